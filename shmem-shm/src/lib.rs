//! Shared-memory support for transport engines of the `shmem` library:
//! same-node peers' heaps mapped into this process.
//!
//! Every PE on a node hands its heap's `memfd` to each same-node peer over
//! an abstract Unix socket with `SCM_RIGHTS`; both ends check with
//! `SO_PEERCRED` that the other side is the same user and the expected
//! process. Nothing is created in the file system, so nothing outlives the
//! job. Engines that move data by load/store or copy (HCCS, SDMA, the
//! example plugin) opt into it; core knows nothing of it.
//!
//! A process maps each peer heap once, whichever engines ask: the engines
//! share the mapping (keyed by the memfd's inode), so the page tables one
//! engine's copies filled serve the others. Two mappings of one heap would
//! each fault in every page on first touch: a 200 MiB region costs 51,200
//! page faults, about 40 ms here, the first time another engine copies
//! into it.
//!
//! ```no_run
//! # fn create(init: &shmem_core::TransportInit<'_>) -> shmem_core::Result<()> {
//! let heaps = shmem_shm::NodeHeaps::map(init, "MYENGINE")?; // collective
//! if let Some(base) = heaps.base(1) {
//!     // PE 1's heap, mapped here: copy with shmem_shm::NodeHeaps::put,
//!     // update words with shmem_shm::NodeHeaps::atomic.
//! #   let _ = base;
//! }
//! # Ok(()) }
//! ```

#![warn(clippy::missing_errors_doc)]

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use shmem_core::heap::{map_fd, unmap};
use shmem_core::wait::Span;
use shmem_core::{AmoOp, AmoWidth, Error, Heap, HeapExport, PeId, Result, SignalOp, TransportInit};

/// The heaps of this node's PEs, mapped here (this PE's own included).
#[derive(Debug)]
pub struct NodeHeaps {
    engine: &'static str,
    heap_size: usize,
    bases: Vec<Option<NonNull<u8>>>,
    /// The peers' heaps, mapped (possibly shared with other engines).
    _mapped: Vec<Arc<Mapping>>,
    _heap: Arc<dyn Heap>,
}

/// One peer heap mapped into this process, unmapped when its last user
/// (an engine's [`NodeHeaps`]) is dropped.
#[derive(Debug)]
struct Mapping {
    base: NonNull<u8>,
    size: usize,
    key: MapKey,
}

/// What identifies a mapped heap: its memfd's device and inode, and size.
type MapKey = (u64, u64, usize);

// SAFETY: a shared mapping reached only through raw pointers (atomics and
// copies); it stays mapped until the value is dropped.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        let mut live = MAPPINGS.lock().unwrap_or_else(|p| p.into_inner());
        // Forget the entry unless a newer mapping of the same file took it.
        if live
            .get(&self.key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), self))
        {
            live.remove(&self.key);
        }
        // SAFETY: made by `map_fd` in `Mapping::get` with this size; the
        // last Arc is gone, so nothing uses it any more.
        unsafe { unmap(self.base, self.size) };
    }
}

/// The peer heaps mapped in this process, by file.
static MAPPINGS: Mutex<BTreeMap<MapKey, Weak<Mapping>>> = Mutex::new(BTreeMap::new());

impl Mapping {
    /// This process's mapping of the heap behind `fd` (`size` bytes): the
    /// existing one if an engine mapped that file already, else a new one.
    fn get(fd: RawFd, size: usize) -> Result<Arc<Mapping>> {
        // SAFETY: a zeroed stat buffer that fstat fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is a descriptor this call owns for its duration.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(Error::last_os("fstat of a peer's heap descriptor"));
        }
        let key = (st.st_dev, st.st_ino, size);
        let mut live = MAPPINGS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = live.get(&key).and_then(Weak::upgrade) {
            return Ok(m);
        }
        let m = Arc::new(Mapping {
            base: map_fd(fd, size)?,
            size,
            key,
        });
        live.insert(key, Arc::downgrade(&m));
        Ok(m)
    }
}

// SAFETY: the mappings are shared memory accessed only through raw pointers
// with atomics or copies; they stay mapped until the value is dropped.
unsafe impl Send for NodeHeaps {}
// SAFETY: as above.
unsafe impl Sync for NodeHeaps {}

fn err(engine: &'static str, reason: impl Into<String>) -> Error {
    Error::Transport {
        engine,
        reason: reason.into(),
    }
}

impl NodeHeaps {
    /// Base of `pe`'s heap in this process, if `pe` is on this node.
    #[inline]
    pub fn base(&self, pe: PeId) -> Option<NonNull<u8>> {
        self.bases.get(pe).copied().flatten()
    }

    /// Like [`NodeHeaps::base`], as an error naming the PE.
    ///
    /// # Errors
    /// [`Error::Transport`] naming the PE when it is not on this node.
    #[inline]
    pub fn require(&self, pe: PeId) -> Result<*mut u8> {
        match self.base(pe) {
            Some(b) => Ok(b.as_ptr()),
            None => Err(err(self.engine, format!("PE {pe} is not on this node"))),
        }
    }

    /// Wakes the waiters of the PE whose heap starts at `base` that watch
    /// `len` bytes at `offset` ([`shmem_core::loadstore::wake`]).
    ///
    /// # Safety
    /// `base` must be a heap mapped by a live [`NodeHeaps`] (or this PE's own).
    #[inline]
    pub unsafe fn wake(base: *mut u8, offset: usize, len: usize) {
        // SAFETY: forwarded contract.
        unsafe { shmem_core::loadstore::wake(base, offset, len) }
    }

    /// A load/store put into the heap at `base` ([`shmem_core::loadstore::put`]).
    ///
    /// # Safety
    /// `base` a mapped heap, `[dst, dst + len)` inside it, `src` valid for `len` bytes.
    #[inline]
    pub unsafe fn put(base: *mut u8, dst: usize, src: *const u8, len: usize) {
        // SAFETY: forwarded contract.
        unsafe { shmem_core::loadstore::put(base, dst, src, len) }
    }

    /// A CPU atomic on the heap at `base` ([`shmem_core::loadstore::atomic`]).
    ///
    /// # Safety
    /// `base` a mapped heap, `offset` in range and aligned to `width`.
    #[inline]
    pub unsafe fn atomic(base: *mut u8, offset: usize, width: AmoWidth, op: AmoOp) -> u64 {
        // SAFETY: forwarded contract.
        unsafe { shmem_core::loadstore::atomic(base, offset, width, op) }
    }

    /// A signal update on the heap at `base` ([`shmem_core::loadstore::signal`]).
    ///
    /// # Safety
    /// `base` a mapped heap, `sig` in range and 8-byte aligned.
    #[inline]
    pub unsafe fn signal(base: *mut u8, sig: usize, op: SignalOp, value: u64, data: Span) {
        // SAFETY: forwarded contract.
        unsafe { shmem_core::loadstore::signal(base, sig, op, value, data) }
    }

    /// Size of every heap.
    pub fn heap_size(&self) -> usize {
        self.heap_size
    }

    /// Exchanges descriptors with the same-node PEs and maps their heaps
    /// (collective). `engine` names the sockets and the errors.
    ///
    /// # Errors
    /// When the descriptor exchange fails (a socket, a peer of another user or process, a
    /// timeout, a heap of another size) or a mapping fails; a bootstrap error.
    pub fn map(init: &TransportInit<'_>, engine: &'static str) -> Result<NodeHeaps> {
        let bs = init.bootstrap;
        let topo = init.topology;
        let me = bs.rank();
        let n = bs.size();
        let heap_size = init.heap.size();
        let local = topo.local_pes();
        let mut bases: Vec<Option<NonNull<u8>>> = vec![None; n];
        bases[me] = Some(init.heap.base());
        let mut mapped = Vec::new();

        // A job-unique tag for the socket names (same for every PE).
        let tag = {
            let mut t = Vec::new();
            t.extend_from_slice(&topo.pid_of.first().copied().unwrap_or(0).to_le_bytes());
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            t.extend_from_slice(&now.to_le_bytes());
            let t = bs.broadcast(0, &t)?;
            t.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let peers: Vec<PeId> = local.iter().copied().filter(|&p| p != me).collect();
        if !peers.is_empty() {
            let HeapExport::Fd(fd) = init.heap.export() else {
                return Err(err(
                    engine,
                    "the symmetric heap cannot be exported as a file descriptor",
                ));
            };
            let name = |pe: PeId| format!("shmem-{}-{tag}-{pe}", engine.to_ascii_lowercase());
            let addr = UnixAddr::from_abstract_name(name(me).as_bytes())
                .map_err(|e| Error::os("abstract socket name", e))?;
            let listener = UnixListener::bind_addr(&addr)
                .map_err(|e| Error::os(format!("binding abstract socket @{}", name(me)), e))?;
            bs.barrier()?;
            let deadline = Instant::now() + init.config.init_timeout;
            let expected = peers.len();
            let server = std::thread::scope(|s| -> Result<()> {
                let serve = s.spawn(|| serve_fd(&listener, fd, heap_size, expected, deadline));
                for &p in &peers {
                    let a = UnixAddr::from_abstract_name(name(p).as_bytes())
                        .map_err(|e| Error::os("abstract socket name", e))?;
                    let stream = UnixStream::connect_addr(&a).map_err(|e| {
                        Error::os(
                            format!("connecting to PE {p}'s heap socket @{}", name(p)),
                            e,
                        )
                    })?;
                    let (pid, uid) = peer_cred(&stream)?;
                    if uid != topo.uid_of[me] || pid != topo.pid_of[p] {
                        return Err(err(engine, format!(
                            "PE {p}'s heap socket is served by pid {pid} uid {uid}, expected pid {} uid {}; refusing to map it",
                            topo.pid_of[p], topo.uid_of[me]
                        )));
                    }
                    let (peer_fd, size) = recv_fd(&stream, deadline)
                        .map_err(|e| Error::os(format!("receiving PE {p}'s heap descriptor"), e))?;
                    if size != heap_size as u64 {
                        return Err(err(
                            engine,
                            format!("PE {p} offers a heap of {size} bytes, ours is {heap_size}"),
                        ));
                    }
                    let m = Mapping::get(peer_fd.as_raw_fd(), heap_size)?;
                    bases[p] = Some(m.base);
                    mapped.push(m);
                }
                serve
                    .join()
                    .map_err(|_| err(engine, "the descriptor server thread panicked"))?
            });
            // On an error the mappings made above go with `mapped`.
            server?;
            drop(listener);
        }
        bs.barrier()?;
        Ok(NodeHeaps {
            engine,
            heap_size,
            bases,
            _mapped: mapped,
            _heap: init.heap.clone(),
        })
    }
}

fn peer_cred(s: &UnixStream) -> Result<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(Error::last_os("getsockopt(SO_PEERCRED)"));
    }
    Ok((cred.pid as u32, cred.uid))
}

fn wait_readable(fd: RawFd, deadline: Instant) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "a same-node PE did not connect in time (SHMEM_INIT_TIMEOUT)",
            ));
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms.max(1)) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

fn serve_fd(
    listener: &UnixListener,
    fd: RawFd,
    heap_size: usize,
    count: usize,
    deadline: Instant,
) -> Result<()> {
    // SAFETY: getuid has no preconditions.
    let my_uid = unsafe { libc::getuid() };
    let mut served = 0;
    while served < count {
        wait_readable(listener.as_raw_fd(), deadline)
            .map_err(|e| Error::os("waiting for same-node PEs", e))?;
        let (stream, _) = listener
            .accept()
            .map_err(|e| Error::os("accepting a same-node PE", e))?;
        let (pid, uid) = peer_cred(&stream)?;
        if uid != my_uid {
            shmem_core::shmem_log!(
                Warn,
                "HCCS: refused heap to pid {pid} of uid {uid} (not our user)"
            );
            continue;
        }
        send_fd(&stream, fd, heap_size as u64)
            .map_err(|e| Error::os("sending the heap descriptor", e))?;
        served += 1;
    }
    Ok(())
}

fn send_fd(s: &UnixStream, fd: RawFd, size: u64) -> io::Result<()> {
    let payload = size.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut _,
        iov_len: payload.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: msghdr is plain data; zeroed is a valid initial state.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer has room for one header carrying one fd,
    // as sized by CMSG_SPACE above.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
    }
    // SAFETY: msg points to live buffers for the duration of the call.
    let r = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn recv_fd(s: &UnixStream, deadline: Instant) -> io::Result<(OwnedFd, u64)> {
    wait_readable(s.as_raw_fd(), deadline)?;
    let mut payload = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: plain data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: buffers live for the call; MSG_CMSG_CLOEXEC keeps the fd private.
    let r = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r as usize != payload.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short heap descriptor message",
        ));
    }
    // SAFETY: walking the control buffer the kernel filled.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no descriptor in the heap message",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const RawFd);
        Ok((OwnedFd::from_raw_fd(fd), u64::from_le_bytes(payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmem_core::heap::MemfdHeap;

    fn fd_of(h: &MemfdHeap) -> RawFd {
        match h.export() {
            HeapExport::Fd(fd) => fd,
            _ => panic!("a memfd heap exports its descriptor"),
        }
    }

    #[test]
    fn engines_share_one_mapping_of_a_heap_and_the_last_unmaps_it() {
        let heap = MemfdHeap::new(1 << 20).unwrap();
        let other = MemfdHeap::new(1 << 20).unwrap();
        let a = Mapping::get(fd_of(&heap), 1 << 20).unwrap();
        let b = Mapping::get(fd_of(&heap), 1 << 20).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "a second engine reuses the mapping");
        let c = Mapping::get(fd_of(&other), 1 << 20).unwrap();
        assert_ne!(a.base, c.base, "another heap gets its own mapping");
        // The shared mapping is the heap: what one writes the other reads.
        // SAFETY: both are live 1 MiB mappings; offset 4096 is in range.
        unsafe {
            heap.base().as_ptr().add(4096).write(0x5a);
            assert_eq!(a.base.as_ptr().add(4096).read(), 0x5a);
        }
        let key = a.key;
        drop(a);
        assert!(MAPPINGS.lock().unwrap().contains_key(&key));
        drop(b);
        assert!(
            !MAPPINGS.lock().unwrap().contains_key(&key),
            "the last user's drop forgets (and unmaps) it"
        );
        let again = Mapping::get(fd_of(&heap), 1 << 20).unwrap();
        // SAFETY: a live 1 MiB mapping of the same heap.
        assert_eq!(unsafe { again.base.as_ptr().add(4096).read() }, 0x5a);
        drop(c);
    }
}
