//! The software verbs provider: the RDMA model over TCP.
//!
//! Each PE registers its heap under a random remote key and listens on the
//! address it reaches the job's control plane from. Per remote peer it opens
//! one connection (its reliable-connected queue pair). Work requests
//! (WRITE, READ, ATOMIC, SIGNAL) are served in order by a progress thread at
//! the target, which checks the remote key and the bounds against its
//! registered heap before touching a byte, writes payloads straight into the
//! heap, and wakes the target's waiters. Responses (ACK, DATA, OLD, NAK) are
//! consumed by a completion thread per queue pair; `quiet` waits until every
//! posted request has completed. Memory outside the heap that a PE exposed
//! ([`Transport::expose_memory`]: the C ABI's static data) gets a key per
//! region; WRITE, READ and ATOMIC with such a key name the bytes by their
//! address on the target, which serves them only inside the region (no
//! signals there), applies atomics as CPU atomics (so they are atomic with
//! its node's own) and rings its waiters that watch everything.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shmem_core::node_heaps::NodeHeaps;
use shmem_core::wait::Span;
use shmem_core::{
    shmem_log, AmoOp, AmoWidth, Capabilities, Completion, Error, PeId, Result, SignalOp, Transport,
    TransportInit,
};

use crate::counters::Counters;
use crate::exposed::{ExposedRegion, Regions};
use crate::wire::{self, Opcode, Request, Response, Status, QP_MAGIC, REQUEST_LEN, RESPONSE_LEN};
use crate::NAME;

/// Largest payload of one work request: larger transfers are split and
/// pipelined on the queue pair.
pub const MAX_MESSAGE: usize = 1 << 20;

fn err(reason: impl Into<String>) -> Error {
    Error::Transport {
        engine: NAME,
        reason: reason.into(),
    }
}

enum Pending {
    Ack(Completion),
    /// A collective's signal ([`Transport::put_signal_collective`]): not
    /// counted for `quiet`, and nobody waits for its acknowledgement (its
    /// bytes left in the posting call); a failure reaches the next `quiet`.
    Collective,
    Read {
        dst: usize,
        len: usize,
        done: Completion,
    },
    Atomic {
        out: Arc<AtomicU64>,
        done: Completion,
    },
}

impl Pending {
    fn fail(self, why: &str) {
        let e = || Err(err(why.to_string()));
        match self {
            Pending::Ack(c) | Pending::Read { done: c, .. } | Pending::Atomic { done: c, .. } => {
                c.finish_part(e())
            }
            Pending::Collective => {}
        }
    }

    /// Whether `quiet` waits for it (it is in [`Counters::issued`]).
    fn counted(&self) -> bool {
        !matches!(self, Pending::Collective)
    }

    /// Fails it with `why` and records its end: as a completion for
    /// `quiet` when it was counted, and its error for the next `quiet`
    /// either way.
    fn abandon(self, why: &str, counters: &Counters) {
        let counted = self.counted();
        self.fail(why);
        if counted {
            counters.complete(Some(why));
        } else {
            counters.record_error(why);
        }
    }
}

/// One reliable-connected queue pair to a peer.
struct QueuePair {
    pe: PeId,
    addr: SocketAddr,
    rkey: u32,
    writer: Mutex<TcpStream>,
    next_seq: AtomicU64,
    pending: Arc<Mutex<HashMap<u64, Pending>>>,
    failed: Arc<Mutex<Option<Lost>>>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

/// Why a queue pair was lost, and when: a quiet names the peer lost first
/// (the likely cause; survivors that exit after it close their links too).
#[derive(Debug, Clone)]
struct Lost {
    at: Instant,
    why: String,
}

/// The queue pair lost first among `qps` (peer, loss), if any was.
fn first_lost(qps: impl Iterator<Item = (PeId, Option<Lost>)>) -> Option<(PeId, Lost)> {
    qps.filter_map(|(pe, l)| Some((pe, l?)))
        .min_by_key(|(_, l)| l.at)
}

/// Records the first loss of a queue pair (later reasons follow from it).
fn mark_lost(failed: &Mutex<Option<Lost>>, why: &str) {
    failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| Lost {
            at: Instant::now(),
            why: why.to_string(),
        });
}

impl QueuePair {
    fn lock_pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When and why this queue pair was lost, if it was.
    fn lost(&self) -> Option<Lost> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fails naming this queue pair's peer once it was lost.
    fn check(&self) -> Result<()> {
        match self.lost() {
            None => Ok(()),
            Some(Lost { why, .. }) => Err(Error::PeerExited {
                pe: self.pe,
                detail: why,
            }),
        }
    }

    /// Posts one work request; `pending` is registered before the bytes leave.
    fn post(
        &self,
        counters: &Counters,
        mut req: Request,
        payload: &[u8],
        pending: Pending,
    ) -> Result<()> {
        // Key 0: the heap's.
        if req.rkey == 0 {
            req.rkey = self.rkey;
        }
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        req.seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        {
            // Registered under the pending lock, and only while the queue
            // pair is alive: the completion thread marks it failed and drains
            // under the same lock, so no request is left unanswered.
            let mut p = self.lock_pending();
            if let Some(Lost { why, .. }) = self.lost() {
                drop(p);
                pending.fail(&why);
                return Err(Error::PeerExited {
                    pe: self.pe,
                    detail: why,
                });
            }
            if pending.counted() {
                counters.issued.fetch_add(1, Ordering::AcqRel);
            }
            p.insert(req.seq, pending);
        }
        if let Err(e) = wire::send(&mut *w, &req.encode(), payload) {
            drop(w);
            let why = if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                format!(
                    "PE {} at {} took no data for the link timeout (stopped or wedged; SHMEM_LINK_TIMEOUT)",
                    self.pe, self.addr
                )
            } else {
                format!("connection to PE {} at {} failed: {e}", self.pe, self.addr)
            };
            mark_lost(&self.failed, &why);
            if let Some(p) = self.lock_pending().remove(&req.seq) {
                p.abandon(&why, counters);
            }
            return Err(Error::PeerExited {
                pe: self.pe,
                detail: why,
            });
        }
        Ok(())
    }
}

/// Reads a queue pair's responses with a watchdog: while requests are
/// outstanding, a peer that sends nothing for `link` (a stopped or wedged
/// process, whose kernel still keeps the connection up) is an error.
struct Watchdog<'a> {
    s: &'a mut TcpStream,
    pending: &'a Mutex<HashMap<u64, Pending>>,
    link: Duration,
    heard: Instant,
}

impl Watchdog<'_> {
    /// Fills `buf`. `owed`: the bytes are the rest of a message whose
    /// header has arrived (its request is no longer pending), so silence is
    /// never idleness.
    fn read_exact(
        &mut self,
        buf: &mut [u8],
        qp_pe: PeId,
        owed: bool,
    ) -> std::result::Result<(), String> {
        let mut got = 0;
        while got < buf.len() {
            match self.s.read(&mut buf[got..]) {
                Ok(0) => return Err("failed to fill whole buffer".into()),
                Ok(k) => {
                    got += k;
                    self.heard = Instant::now();
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    let idle = !owed
                        && self
                            .pending
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .is_empty();
                    if idle && got == 0 {
                        self.heard = Instant::now();
                    } else if self.heard.elapsed() >= self.link {
                        return Err(format!(
                            "PE {qp_pe} did not answer for {:.1} s (stopped or wedged; SHMEM_LINK_TIMEOUT)",
                            self.heard.elapsed().as_secs_f64()
                        ));
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn completion_loop(
    mut s: TcpStream,
    qp_pe: PeId,
    addr: SocketAddr,
    pending: Arc<Mutex<HashMap<u64, Pending>>>,
    failed: Arc<Mutex<Option<Lost>>>,
    counters: Arc<Counters>,
    stopping: Arc<AtomicBool>,
    link: Duration,
) {
    let _ = s.set_read_timeout(Some(
        link.clamp(Duration::from_millis(10), Duration::from_millis(500)),
    ));
    let mut wd = Watchdog {
        s: &mut s,
        pending: &pending,
        link,
        heard: Instant::now(),
    };
    let why = loop {
        let mut h = [0u8; RESPONSE_LEN];
        if let Err(e) = wd.read_exact(&mut h, qp_pe, false) {
            break format!("connection to PE {qp_pe} at {addr} lost: {e}");
        }
        let r = match Response::decode(&h) {
            Ok(r) => r,
            Err(e) => break format!("garbage from PE {qp_pe}: {e}"),
        };
        let p = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&r.seq);
        let Some(p) = p else {
            break format!("PE {qp_pe} answered unknown request {}", r.seq);
        };
        match (r.status, p) {
            (Status::Ack, Pending::Ack(c)) => {
                c.finish_part(Ok(()));
                counters.complete(None);
            }
            (Status::Ack, Pending::Collective) => {}
            (Status::Data, Pending::Read { dst, len, done }) if r.len as usize == len => {
                // SAFETY: the poster keeps `dst` valid for `len` bytes until `done` completes.
                let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
                if let Err(e) = wd.read_exact(buf, qp_pe, true) {
                    let why = format!("connection to PE {qp_pe} lost during a read: {e}");
                    // Later posts must fail as soon as this read does.
                    mark_lost(&failed, &why);
                    done.finish_part(Err(err(why.clone())));
                    counters.complete(Some(&why));
                    break why;
                }
                done.finish_part(Ok(()));
                counters.complete(None);
            }
            (Status::Old, Pending::Atomic { out, done }) => {
                out.store(r.value, Ordering::Release);
                done.finish_part(Ok(()));
                counters.complete(None);
            }
            (Status::Nak, p) => {
                let mut msg = vec![0u8; (r.len as usize).min(4096)];
                let _ = wd.read_exact(&mut msg, qp_pe, true);
                let why = format!(
                    "PE {qp_pe} refused the request: {}",
                    String::from_utf8_lossy(&msg)
                );
                p.abandon(&why, &counters);
            }
            (st, p) => {
                let why = format!("PE {qp_pe} sent {st:?} for a mismatched request");
                p.abandon(&why, &counters);
                break why;
            }
        }
    };
    if !stopping.load(Ordering::SeqCst) {
        shmem_log!(Debug, "ROCE/sw: {why}");
    }
    let drained: Vec<Pending> = {
        let mut p = pending.lock().unwrap_or_else(|p| p.into_inner());
        mark_lost(&failed, &why);
        p.drain().map(|(_, p)| p).collect()
    };
    for p in drained {
        p.abandon(&why, &counters);
    }
}

/// Serves one initiator's queue pair: applies its work requests in order.
/// Why a request on exposed `region` is refused, if it is: only plain
/// reads, writes and aligned 4- or 8-byte atomics inside the region reach
/// it.
fn exposed_refusal(r: &Request, region: &ExposedRegion, from: PeId) -> Option<String> {
    let atomic = r.op == Opcode::Atomic;
    if !(r.op == Opcode::Read || (r.op == Opcode::Write && r.a == 0) || atomic) {
        return Some(format!(
            "{:?} from PE {from} on memory outside the heap (key {:#x}): only reads, writes and atomics reach it",
            r.op, r.rkey
        ));
    }
    if atomic && (!matches!(r.len, 4 | 8) || !r.off.is_multiple_of(r.len)) {
        return Some(format!(
            "misaligned or bad-width atomic at {:#x} from PE {from}",
            r.off
        ));
    }
    (!region.holds(r.off, r.len)).then(|| {
        format!(
            "range [{:#x}, +{}) from PE {from} is outside the region of key {:#x}",
            r.off, r.len, r.rkey
        )
    })
}

/// Serves one queue pair: requests on the heap at `base` (key `rkey`) and
/// on the regions this PE exposed (`exposed`, at their own addresses).
fn serve_qp(
    mut s: TcpStream,
    from: PeId,
    base: usize,
    heap_size: usize,
    rkey: u32,
    exposed: &Regions,
) {
    let base = base as *mut u8;
    let mut out = s.try_clone().ok();
    loop {
        let mut h = [0u8; REQUEST_LEN];
        if s.read_exact(&mut h).is_err() {
            return;
        }
        let Ok(r) = Request::decode(&h) else { return };
        let Some(w) = out.as_mut() else { return };
        let payload = if r.op == Opcode::Write { r.len } else { 0 };
        let nak = |w: &mut TcpStream, why: String| {
            let resp = Response {
                status: Status::Nak,
                seq: r.seq,
                value: 0,
                len: why.len() as u64,
            };
            wire::send(w, &resp.encode(), why.as_bytes())
        };
        let width = if r.op == Opcode::Atomic {
            r.len
        } else if r.op == Opcode::Signal {
            8
        } else {
            r.len
        };
        let end = r.off.checked_add(width);
        let region = if r.rkey != rkey {
            exposed.keyed(0, u64::from(r.rkey))
        } else {
            None
        };
        let bad = if let Some(x) = region {
            exposed_refusal(&r, &x, from)
        } else if r.rkey != rkey {
            Some(format!("wrong remote key {:#x} from PE {from}", r.rkey))
        } else if end.is_none_or(|e| e > heap_size as u64) {
            Some(format!("range [{:#x}, +{width}) from PE {from} is outside the registered heap of {heap_size} bytes", r.off))
        } else if r.op == Opcode::Write
            && r.a != 0
            && (r.b.checked_add(8).is_none_or(|e| e > heap_size as u64) || r.b % 8 != 0)
        {
            Some(format!(
                "signal word at {:#x} from PE {from} is misaligned or outside the registered heap",
                r.b
            ))
        } else if matches!(r.op, Opcode::Atomic | Opcode::Signal)
            && (!matches!(width, 4 | 8) || r.off % width != 0)
        {
            Some(format!(
                "misaligned or bad-width atomic at {:#x} from PE {from}",
                r.off
            ))
        } else {
            None
        };
        if let Some(why) = bad {
            shmem_log!(Warn, "ROCE/sw: refused: {why}");
            if wire::drain(&mut s, payload).is_err() || nak(w, why).is_err() {
                return;
            }
            continue;
        }
        let off = r.off as usize;
        // Where the bytes are: in the heap, or at their own address in a
        // region we exposed.
        let at = if region.is_some() {
            off as *mut u8
        } else {
            // SAFETY: an offset inside our heap (checked above).
            unsafe { base.add(off) }
        };
        let sent = match r.op {
            Opcode::Write => {
                // SAFETY: [at, at+len) lies in our registered heap or in a
                // region we exposed (checked above); concurrent access is the
                // program's own race, as with any put.
                let dst = unsafe { std::slice::from_raw_parts_mut(at, r.len as usize) };
                if s.read_exact(dst).is_err() {
                    return;
                }
                if r.a == 0 {
                    // Outside the heap: the empty range, which rings the
                    // waiters that watch everything (as those on it do).
                    let (off, len) = if region.is_some() {
                        (0, 0)
                    } else {
                        (off, r.len as usize)
                    };
                    // SAFETY: `base` is our own heap, which starts with its
                    // control block.
                    unsafe { NodeHeaps::wake(base, off, len) };
                } else {
                    // Put-with-signal: the signal follows the data it covers.
                    std::sync::atomic::fence(Ordering::Release);
                    let op = if r.a == 2 {
                        SignalOp::Add
                    } else {
                        SignalOp::Set
                    };
                    // SAFETY: in-heap, aligned signal word (checked above).
                    unsafe {
                        NodeHeaps::signal(
                            base,
                            r.b as usize,
                            op,
                            r.c,
                            Span::bytes(off, r.len as usize),
                        )
                    };
                }
                w.write_all(
                    &Response {
                        status: Status::Ack,
                        seq: r.seq,
                        value: 0,
                        len: 0,
                    }
                    .encode(),
                )
            }
            Opcode::Read => {
                // SAFETY: in the heap or in a region we exposed (checked above).
                let src = unsafe { std::slice::from_raw_parts(at, r.len as usize) };
                let resp = Response {
                    status: Status::Data,
                    seq: r.seq,
                    value: 0,
                    len: r.len,
                };
                wire::send(w, &resp.encode(), src)
            }
            Opcode::Atomic => match wire::amo_decode(r.a, r.b, r.c) {
                Some(op) => {
                    let wd = if r.len == 4 {
                        AmoWidth::W32
                    } else {
                        AmoWidth::W64
                    };
                    let old = if region.is_some() {
                        // SAFETY: an aligned word in a region we exposed
                        // (checked above); `base` is our own heap.
                        unsafe { shmem_core::loadstore::atomic_outside(base, at, wd, op) }
                    } else {
                        // SAFETY: in-heap, aligned word (checked above).
                        unsafe { NodeHeaps::atomic(base, off, wd, op) }
                    };
                    w.write_all(
                        &Response {
                            status: Status::Old,
                            seq: r.seq,
                            value: old,
                            len: 0,
                        }
                        .encode(),
                    )
                }
                None => nak(w, format!("unknown atomic {}", r.a)),
            },
            Opcode::Signal => {
                let op = if r.c == 1 {
                    SignalOp::Add
                } else {
                    SignalOp::Set
                };
                // SAFETY: in-heap, aligned signal word (checked above).
                unsafe { NodeHeaps::signal(base, off, op, r.a, Span::bytes(0, 0)) };
                w.write_all(
                    &Response {
                        status: Status::Ack,
                        seq: r.seq,
                        value: 0,
                        len: 0,
                    }
                    .encode(),
                )
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The engine.
pub struct SwVerbs {
    my_pe: PeId,
    reach: Vec<bool>,
    qps: Vec<Option<QueuePair>>,
    counters: Arc<Counters>,
    stopping: Arc<AtomicBool>,
    servers: Mutex<Vec<(JoinHandle<()>, TcpStream)>>,
    /// The heap's remote key.
    rkey: u32,
    /// Regions outside the heap this PE exposed (as PE 0; its servers
    /// read them).
    exposed: Arc<Regions>,
    /// Per PE: the regions outside its heap it exposed.
    peer_exposed: Regions,
    _heap: Arc<dyn shmem_core::Heap>,
}

impl std::fmt::Debug for SwVerbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwVerbs")
            .field("my_pe", &self.my_pe)
            .field("reach", &self.reach)
            .finish()
    }
}

/// What each PE tells the others at setup (one allgather, through the
/// control plane's typed encoding): its listener, remote key and heap size.
type Endpoint = (SocketAddr, u32, u64);

fn parse_endpoint(pe: PeId, b: &[u8]) -> Result<Endpoint> {
    shmem_core::wire::decode::<Endpoint>("software verbs endpoint", b)
        .map_err(|e| err(format!("PE {pe} sent a bad endpoint: {e}")))
}

impl SwVerbs {
    /// Builds the engine (collective): registers the heap, exchanges
    /// endpoints and remote keys with one allgather, connects a queue pair
    /// to every PE in `reach`.
    ///
    /// # Errors
    /// [`Error::Os`] when the listener cannot be bound or a thread cannot
    /// start; a transport error when a PE sends a bad endpoint, registered
    /// a heap of another size or does not open its queue pairs within
    /// `SHMEM_INIT_TIMEOUT`; the bootstrap's errors (a PE died, the job
    /// was aborted).
    pub fn create(init: &TransportInit<'_>, reach: Vec<bool>) -> Result<SwVerbs> {
        let bs = init.bootstrap;
        let (me, n) = (bs.rank(), bs.size());
        let heap = init.heap.clone();
        let heap_size = heap.size();
        let base = heap.base().as_ptr() as usize;
        let link = init.config.link_timeout;
        let rkey = u32::from_le_bytes(random4());
        let tag = bs.broadcast(0, &random4())?;
        let ip = bs.local_ip().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| Error::os(format!("binding the software verbs listener on {ip}"), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::os("getsockname", e))?
            .port();
        let mine: Endpoint = (SocketAddr::new(ip, port), rkey, heap_size as u64);
        let all = bs.allgather(&shmem_core::wire::encode(&mine))?;
        let mut eps = Vec::with_capacity(n);
        for (pe, b) in all.iter().enumerate() {
            eps.push(parse_endpoint(pe, b)?);
        }
        // Who will connect to us: every PE that reaches us (reach is symmetric).
        let incoming: Vec<PeId> = (0..n).filter(|&p| reach[p]).collect();
        let stopping = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + init.config.init_timeout;
        let tag2 = tag.clone();
        let reach2 = reach.clone();
        let serve_heap = heap.clone();
        let exposed: Arc<Regions> = Arc::default();
        let serve_exposed = exposed.clone();
        let accept = std::thread::Builder::new()
            .name("shmem-roce-accept".into())
            .spawn(move || -> Result<Vec<(JoinHandle<()>, TcpStream)>> {
                let mut servers = Vec::new();
                let mut joined = vec![false; n];
                listener.set_nonblocking(true).map_err(|e| Error::os("listener", e))?;
                while incoming.iter().any(|&p| !joined[p]) {
                    if Instant::now() >= deadline {
                        let missing: Vec<_> = incoming.iter().filter(|&&p| !joined[p]).collect();
                        return Err(err(format!("PEs {missing:?} did not open their queue pairs in time")));
                    }
                    let (mut s, peer) = match listener.accept() {
                        Ok(x) => x,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(2));
                            continue;
                        }
                        Err(e) => return Err(Error::os("accepting a queue pair", e)),
                    };
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut hello = [0u8; 8 + 4 + 4];
                    let ok = s.read_exact(&mut hello).is_ok()
                        && &hello[..8] == QP_MAGIC
                        && hello[12..16] == tag2[..];
                    let from = u32::from_le_bytes([hello[8], hello[9], hello[10], hello[11]]) as usize;
                    if !ok || from >= n || !reach2[from] || joined[from] {
                        shmem_log!(Warn, "ROCE/sw: dropped a queue-pair request from {peer} (not a member of this job)");
                        continue;
                    }
                    let _ = s.set_read_timeout(None);
                    shmem_core::net::tune(&s, link);
                    if s.write_all(&[1]).is_err() {
                        continue;
                    }
                    joined[from] = true;
                    let closer = s.try_clone().map_err(|e| Error::os("cloning a queue-pair socket", e))?;
                    // The progress thread keeps the heap mapped for as long
                    // as it may write into it.
                    let keep = serve_heap.clone();
                    let regions = serve_exposed.clone();
                    let h = std::thread::Builder::new()
                        .name(format!("shmem-roce-serve-{from}"))
                        .spawn(move || {
                            let _heap = keep;
                            serve_qp(s, from, base, heap_size, rkey, &regions)
                        })
                        .map_err(|e| Error::os("spawning a progress thread", e))?;
                    servers.push((h, closer));
                }
                Ok(servers)
            })
            .map_err(|e| Error::os("spawning the accept thread", e))?;
        let counters = Arc::new(Counters::default());
        let mut qps: Vec<Option<QueuePair>> = (0..n).map(|_| None).collect();
        let mut connect_err = None;
        for pe in 0..n {
            if !reach[pe] {
                continue;
            }
            let (addr, rk, size) = eps[pe];
            if size != heap_size as u64 {
                connect_err = Some(err(format!(
                    "PE {pe} registered {size} bytes, ours is {heap_size}"
                )));
                break;
            }
            match connect(addr, me, &tag, link, deadline) {
                Ok(s) => {
                    let reader_s = match s.try_clone() {
                        Ok(r) => r,
                        Err(e) => {
                            connect_err = Some(Error::os("cloning a queue-pair socket", e));
                            break;
                        }
                    };
                    let pending = Arc::new(Mutex::new(HashMap::new()));
                    let failed = Arc::new(Mutex::new(None));
                    let (p2, f2, c2, st2) = (
                        pending.clone(),
                        failed.clone(),
                        counters.clone(),
                        stopping.clone(),
                    );
                    let reader = std::thread::Builder::new()
                        .name(format!("shmem-roce-cq-{pe}"))
                        .spawn(move || completion_loop(reader_s, pe, addr, p2, f2, c2, st2, link))
                        .map_err(|e| Error::os("spawning a completion thread", e))?;
                    qps[pe] = Some(QueuePair {
                        pe,
                        addr,
                        rkey: rk,
                        writer: Mutex::new(s),
                        next_seq: AtomicU64::new(1),
                        pending,
                        failed,
                        reader: Mutex::new(Some(reader)),
                    });
                }
                Err(e) => {
                    connect_err = Some(e);
                    break;
                }
            }
        }
        let servers = accept.join().map_err(|_| err("accept thread panicked"))?;
        if let Some(e) = connect_err {
            return Err(e);
        }
        let servers = servers?;
        bs.barrier()?;
        shmem_log!(
            Info,
            "ROCE: software verbs provider, listening on {ip}:{port}"
        );
        Ok(SwVerbs {
            my_pe: me,
            reach,
            qps,
            counters,
            stopping,
            servers: Mutex::new(servers),
            rkey,
            exposed,
            peer_exposed: Regions::default(),
            _heap: heap,
        })
    }

    /// An engine that reaches no PE (every PE is on this node): nothing is
    /// registered or connected.
    pub fn unconnected(init: &TransportInit<'_>) -> SwVerbs {
        let n = init.bootstrap.size();
        SwVerbs {
            my_pe: init.bootstrap.rank(),
            reach: vec![false; n],
            qps: (0..n).map(|_| None).collect(),
            counters: Arc::new(Counters::default()),
            stopping: Arc::new(AtomicBool::new(false)),
            servers: Mutex::new(Vec::new()),
            rkey: 0,
            exposed: Arc::default(),
            peer_exposed: Regions::default(),
            _heap: init.heap.clone(),
        }
    }

    fn qp(&self, pe: PeId) -> Result<&QueuePair> {
        self.qps
            .get(pe)
            .and_then(|q| q.as_ref())
            .ok_or_else(|| err(format!("no queue pair to PE {pe}")))
    }

    fn post_chunks(
        &self,
        pe: PeId,
        op: Opcode,
        off: usize,
        ptr: *mut u8,
        len: usize,
    ) -> Result<Completion> {
        self.post_chunks_signal(pe, op, (0, off), ptr, len, None, false)
    }

    /// The key and address of `len` bytes at `addr` of `pe`'s memory
    /// outside its heap, if `pe` exposed them.
    fn exposed_at(&self, pe: PeId, addr: usize, len: usize) -> Result<(u32, usize)> {
        // Keys are this provider's 32-bit request keys.
        let r = self.peer_exposed.find(pe, addr, len)?;
        Ok((r.key as u32, addr))
    }

    /// An atomic on `off` (key 0: the heap) of `pe`; returns the old value.
    fn atomic_keyed(
        &self,
        pe: PeId,
        (key, off): (u32, usize),
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<u64> {
        let qp = self.qp(pe)?;
        let (a, b, c) = wire::amo_code(op);
        let out = Arc::new(AtomicU64::new(0));
        let done = Completion::pending(1);
        let req = Request {
            op: Opcode::Atomic,
            rkey: key,
            seq: 0,
            off: off as u64,
            len: width.bytes() as u64,
            a,
            b,
            c,
        };
        qp.post(
            &self.counters,
            req,
            &[],
            Pending::Atomic {
                out: out.clone(),
                done: done.clone(),
            },
        )?;
        done.wait().map_err(|e| qp.check().err().unwrap_or(e))?;
        Ok(out.load(Ordering::Acquire))
    }

    /// Posts a transfer as work requests of at most [`MAX_MESSAGE`] bytes;
    /// a write may carry a signal update, applied by the target after the
    /// last chunk's data. `collective`: a collective's write, not counted
    /// for `quiet` ([`Pending::Collective`]).
    #[allow(clippy::too_many_arguments)]
    fn post_chunks_signal(
        &self,
        pe: PeId,
        op: Opcode,
        (key, off): (u32, usize),
        ptr: *mut u8,
        len: usize,
        signal: Option<(usize, SignalOp, u64)>,
        collective: bool,
    ) -> Result<Completion> {
        let qp = self.qp(pe)?;
        let parts = len.div_ceil(MAX_MESSAGE).max(1);
        let done = Completion::pending(parts);
        for i in 0..parts {
            let o = i * MAX_MESSAGE;
            let n = MAX_MESSAGE.min(len - o);
            let (a, b, c) = match signal {
                Some((sig, sop, value)) if i + 1 == parts => {
                    (if sop == SignalOp::Add { 2 } else { 1 }, sig as u64, value)
                }
                _ => (0, 0, 0),
            };
            let req = Request {
                op,
                rkey: key,
                seq: 0,
                off: (off + o) as u64,
                len: n as u64,
                a,
                b,
                c,
            };
            let (payload, pending): (&[u8], Pending) = if op == Opcode::Write {
                let bytes: &[u8] = if n == 0 {
                    // A bare signal: `ptr` need not point anywhere.
                    &[]
                } else {
                    // SAFETY: the caller keeps `ptr` valid for `len` bytes for
                    // this call.
                    unsafe { std::slice::from_raw_parts(ptr.add(o), n) }
                };
                if collective {
                    // Sent inside `post`: this part is over for the caller.
                    done.finish_part(Ok(()));
                    (bytes, Pending::Collective)
                } else {
                    (bytes, Pending::Ack(done.clone()))
                }
            } else {
                (
                    &[],
                    Pending::Read {
                        dst: ptr as usize + o,
                        len: n,
                        done: done.clone(),
                    },
                )
            };
            if let Err(e) = qp.post(&self.counters, req, payload, pending) {
                // The failed part is finished by `post`; finish the parts
                // never posted, then wait for the posted ones, so that no
                // response can touch the caller's buffer after we return.
                for _ in i + 1..parts {
                    done.finish_part(Err(err("not posted after an earlier failure")));
                }
                let _ = done.wait();
                return Err(e);
            }
        }
        Ok(done)
    }
}

fn random4() -> [u8; 4] {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most 4 bytes into `b`.
    let r = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    if r != 4 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            ^ std::process::id();
        b = t.to_le_bytes();
    }
    b
}

fn connect(
    addr: SocketAddr,
    me: PeId,
    tag: &[u8],
    link: Duration,
    deadline: Instant,
) -> Result<TcpStream> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut s) => {
                shmem_core::net::tune(&s, link);
                let mut hello = Vec::with_capacity(16);
                hello.extend_from_slice(QP_MAGIC);
                hello.extend_from_slice(&(me as u32).to_le_bytes());
                hello.extend_from_slice(tag);
                s.write_all(&hello)
                    .map_err(|e| Error::os(format!("queue-pair handshake with {addr}"), e))?;
                let mut ok = [0u8; 1];
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                s.read_exact(&mut ok)
                    .map_err(|e| Error::os(format!("queue-pair handshake with {addr}"), e))?;
                let _ = s.set_read_timeout(None);
                // A peer that stops reading (stopped, wedged) fails a post
                // after the link timeout instead of blocking it forever.
                let _ = s.set_write_timeout(Some(link));
                return Ok(s);
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::os(format!("connecting a queue pair to {addr}"), e));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

impl Drop for SwVerbs {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Queue pairs close themselves (see `QueuePair::drop`); close the
        // peers' queue pairs into this PE so their progress threads end.
        let servers = std::mem::take(&mut *self.servers.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, s) in &servers {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (h, _) in servers {
            let _ = h.join();
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let _ = w.shutdown(std::net::Shutdown::Both);
        drop(w);
        if let Some(h) = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl Transport for SwVerbs {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // Memory outside the heap: where its PE exposed it (otherwise
        // `put_to_address` says so, and the caller finds another way).
        Capabilities::RMA
            | Capabilities::AMO
            | Capabilities::SIGNAL
            | Capabilities::ASYNC
            | Capabilities::EXTERNAL_MEMORY
    }

    fn can_reach(&self, pe: PeId) -> bool {
        self.reach.get(pe).copied().unwrap_or(false)
    }

    unsafe fn put(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // The payload is in the socket once post returns: the source is reusable.
        self.post_chunks(pe, Opcode::Write, dst, src as *mut u8, len)
            .map(|_| ())
    }

    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.post_chunks(pe, Opcode::Read, src, dst, len)?.wait()
    }

    unsafe fn put_to_address(
        &self,
        pe: PeId,
        addr: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let at = self.exposed_at(pe, addr, len)?;
        if len == 0 {
            return Ok(());
        }
        self.post_chunks_signal(pe, Opcode::Write, at, src as *mut u8, len, None, false)
            .map(|_| ())
    }

    unsafe fn get_from_address(
        &self,
        pe: PeId,
        addr: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        let at = self.exposed_at(pe, addr, len)?;
        if len == 0 {
            return Ok(());
        }
        self.post_chunks_signal(pe, Opcode::Read, at, dst, len, None, false)?
            .wait()
    }

    unsafe fn expose_memory(&self, regions: &[(usize, usize)]) -> Result<Vec<u8>> {
        if self.reach.iter().all(|&r| !r) {
            // Nobody reaches this PE through this engine.
            return Ok(Vec::new());
        }
        let mut keys = self.exposed.keys(0);
        let mut card = Vec::new();
        for &(start, len) in regions.iter().filter(|r| r.1 > 0) {
            // A key of its own: not 0 (a request's "the heap"), not the
            // heap's, not another region's.
            let mut key = self.rkey.wrapping_add(1 + keys.len() as u32);
            while key == 0 || key == self.rkey || keys.contains(&u64::from(key)) {
                key = key.wrapping_add(1);
            }
            keys.push(u64::from(key));
            let region = ExposedRegion {
                start: start as u64,
                len: len as u64,
                key: u64::from(key),
            };
            self.exposed.add(0, region);
            card.push(region);
        }
        Ok(Regions::card(&card))
    }

    fn learn_exposed_memory(&self, cards: &[&[u8]]) -> Result<()> {
        self.peer_exposed.learn(cards)
    }

    unsafe fn put_async(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<Completion> {
        if len == 0 {
            return Ok(Completion::done());
        }
        self.post_chunks(pe, Opcode::Write, dst, src as *mut u8, len)
    }

    unsafe fn get_async(
        &self,
        pe: PeId,
        src: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<Completion> {
        if len == 0 {
            return Ok(Completion::done());
        }
        self.post_chunks(pe, Opcode::Read, src, dst, len)
    }

    unsafe fn get_nbi(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract: valid until quiet, which waits for the counts.
        unsafe { self.get_async(pe, src, dst, len) }.map(|_| ())
    }

    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        self.atomic_keyed(pe, (0, offset), width, op)
    }

    unsafe fn atomic_at_address(
        &self,
        pe: PeId,
        addr: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<u64> {
        // The target applies it with a CPU atomic, like its node's own.
        let at = self.exposed_at(pe, addr, width.bytes())?;
        self.atomic_keyed(pe, at, width, op)
    }

    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()> {
        let qp = self.qp(pe)?;
        let c = u64::from(op == SignalOp::Add);
        let req = Request {
            op: Opcode::Signal,
            rkey: 0,
            seq: 0,
            off: sig as u64,
            len: 8,
            a: value,
            b: 0,
            c,
        };
        qp.post(
            &self.counters,
            req,
            &[],
            Pending::Ack(Completion::pending(1)),
        )
    }

    unsafe fn put_signal(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: SignalOp,
        value: u64,
        _nbi: bool,
    ) -> Result<()> {
        // One work request (per chunk) on one queue pair: the target applies
        // the signal after the data of the last chunk.
        self.post_chunks_signal(
            pe,
            Opcode::Write,
            (0, dst),
            src as *mut u8,
            len,
            Some((sig, op, value)),
            false,
        )
        .map(|_| ())
    }

    unsafe fn put_signal_collective(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: SignalOp,
        value: u64,
    ) -> Result<()> {
        // Every part's bytes are in the socket when `post` returns, and the
        // target applies the signal after the last part's data.
        self.post_chunks_signal(
            pe,
            Opcode::Write,
            (0, dst),
            src as *mut u8,
            len,
            Some((sig, op, value)),
            true,
        )
        .map(|_| ())
    }

    fn fence(&self) -> Result<()> {
        // Requests to one PE share a queue pair that is served in order.
        Ok(())
    }

    fn quiet(&self) -> Result<()> {
        let c = &self.counters;
        c.wait_for(c.issued.load(Ordering::Acquire));
        if let Some(e) = c.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(err(e));
        }
        // A lost queue pair fails every quiet after it, naming its peer:
        // what was issued to it may never have been applied. The first
        // one lost is named: a survivor that has exited since (closing its
        // link) is not the cause.
        match first_lost(self.qps.iter().flatten().map(|qp| (qp.pe, qp.lost()))) {
            None => Ok(()),
            Some((pe, Lost { why, .. })) => Err(Error::PeerExited { pe, detail: why }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_names_the_queue_pair_lost_first_and_a_loss_keeps_its_first_reason() {
        let slot = Mutex::new(None);
        mark_lost(&slot, "PE 1 was killed");
        mark_lost(&slot, "a later symptom");
        let first = slot.lock().unwrap().clone().unwrap();
        assert_eq!(first.why, "PE 1 was killed");
        // PE 0 exited after PE 1 died: PE 1 is named although PE 0 comes
        // first in PE order.
        let later = Lost {
            at: first.at + Duration::from_millis(5),
            why: "PE 0 closed its link".into(),
        };
        let qps = vec![(0, Some(later)), (1, Some(first)), (2, None)];
        let (pe, lost) = first_lost(qps.into_iter()).unwrap();
        assert_eq!((pe, lost.why.as_str()), (1, "PE 1 was killed"));
        assert!(first_lost(vec![(0, None), (1, None)].into_iter()).is_none());
    }

    #[repr(C, align(4096))]
    struct Arena([u8; 3 * 65536]);

    /// A target serving a 64 KiB "heap" in the middle of a guarded buffer.
    fn target(rkey: u32) -> (TcpStream, Box<Arena>, std::thread::JoinHandle<()>) {
        // SAFETY: an all-zero byte array is a valid Arena.
        let mut mem: Box<Arena> = unsafe { Box::<Arena>::new_zeroed().assume_init() };
        mem.0[..65536].fill(0xEE);
        mem.0[2 * 65536..].fill(0xEE);
        let base = mem.0.as_mut_ptr() as usize + 65536;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let exposed = Regions::default();
            exposed.add(
                0,
                ExposedRegion {
                    start: base as u64 - 4096,
                    len: 64,
                    key: 0x5EED,
                },
            );
            serve_qp(s, 1, base, 65536, rkey, &exposed);
        });
        let c = TcpStream::connect(addr).unwrap();
        (c, mem, h)
    }

    fn roundtrip(c: &mut TcpStream, req: Request, payload: &[u8]) -> (Response, Vec<u8>) {
        wire::send(c, &req.encode(), payload).unwrap();
        let mut h = [0u8; RESPONSE_LEN];
        c.read_exact(&mut h).unwrap();
        let r = Response::decode(&h).unwrap();
        let mut body = vec![
            0u8;
            if matches!(r.status, Status::Data | Status::Nak) {
                r.len as usize
            } else {
                0
            }
        ];
        c.read_exact(&mut body).unwrap();
        (r, body)
    }

    #[test]
    fn a_peer_that_stops_in_the_middle_of_a_read_reply_fails_the_read_after_the_link_timeout() {
        // The target sends the reply's header, then goes silent (a SIGSTOPped process whose kernel keeps the socket).
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (stall_tx, stall_rx) = std::sync::mpsc::channel::<()>();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut h = [0u8; REQUEST_LEN];
            s.read_exact(&mut h).unwrap();
            let r = Request::decode(&h).unwrap();
            let resp = Response {
                status: Status::Data,
                seq: r.seq,
                value: 0,
                len: r.len,
            };
            s.write_all(&resp.encode()).unwrap();
            // Silent, connection up, until the test is over.
            let _ = stall_rx.recv();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let pending = Arc::new(Mutex::new(HashMap::new()));
        let failed = Arc::new(Mutex::new(None));
        let counters = Arc::new(Counters::default());
        let mut dst = vec![0u8; 4096];
        let done = Completion::pending(1);
        pending.lock().unwrap().insert(
            7,
            Pending::Read {
                dst: dst.as_mut_ptr() as usize,
                len: dst.len(),
                done: done.clone(),
            },
        );
        let req = Request {
            op: Opcode::Read,
            rkey: 1,
            seq: 7,
            off: 0,
            len: 4096,
            a: 0,
            b: 0,
            c: 0,
        };
        wire::send(&mut c, &req.encode(), &[]).unwrap();
        let reader = c.try_clone().unwrap();
        let (p2, f2, c2) = (pending.clone(), failed.clone(), counters.clone());
        let cq = std::thread::spawn(move || {
            completion_loop(
                reader,
                1,
                addr,
                p2,
                f2,
                c2,
                Arc::new(AtomicBool::new(false)),
                Duration::from_millis(300),
            )
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(done.wait()));
        let r = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the read never failed: the watchdog took the owed data for idleness");
        let e = r.unwrap_err().to_string();
        assert!(e.contains("PE 1 did not answer"), "{e}");
        assert!(failed.lock().unwrap().is_some());
        cq.join().unwrap();
        stall_tx.send(()).unwrap();
        peer.join().unwrap();
    }

    #[test]
    fn bad_keys_and_ranges_are_refused_without_touching_memory() {
        let (mut c, mut mem, h) = target(0xABCD);
        let w = |rkey, off, len| Request {
            op: Opcode::Write,
            rkey,
            seq: 1,
            off,
            len,
            a: 0,
            b: 0,
            c: 0,
        };
        let (r, why) = roundtrip(&mut c, w(0x1111, 4096, 8), &[1; 8]);
        assert_eq!(r.status, Status::Nak);
        assert!(String::from_utf8_lossy(&why).contains("wrong remote key"));
        let (r, why) = roundtrip(&mut c, w(0xABCD, 65530, 8), &[2; 8]);
        assert_eq!(r.status, Status::Nak);
        assert!(String::from_utf8_lossy(&why).contains("outside the registered heap"));
        let (r, _) = roundtrip(&mut c, w(0xABCD, u64::MAX - 2, 8), &[3; 8]);
        assert_eq!(r.status, Status::Nak);
        let rd = Request {
            op: Opcode::Read,
            rkey: 0xABCD,
            seq: 2,
            off: 65000,
            len: 4096,
            a: 0,
            b: 0,
            c: 0,
        };
        assert_eq!(roundtrip(&mut c, rd, &[]).0.status, Status::Nak);
        let at = Request {
            op: Opcode::Atomic,
            rkey: 0xABCD,
            seq: 3,
            off: 4100,
            len: 8,
            a: 4,
            b: 1,
            c: 0,
        };
        assert_eq!(roundtrip(&mut c, at, &[]).0.status, Status::Nak);
        // A region outside the heap (the 64 bytes at 4096 below it, key
        // 0x5EED): reads and writes inside it, nothing else.
        let below = mem.0.as_ptr() as u64 + 65536 - 4096;
        let (r, _) = roundtrip(&mut c, w(0x5EED, below + 8, 8), &[9; 8]);
        assert_eq!(r.status, Status::Ack);
        let (r, why) = roundtrip(&mut c, w(0x5EED, below + 60, 8), &[9; 8]);
        assert_eq!(r.status, Status::Nak);
        assert!(String::from_utf8_lossy(&why).contains("outside the region"));
        let sig = Request {
            a: 1,
            b: 8,
            c: 1,
            ..w(0x5EED, below, 8)
        };
        let (r, why) = roundtrip(&mut c, sig, &[9; 8]);
        assert_eq!(r.status, Status::Nak);
        assert!(String::from_utf8_lossy(&why).contains("only reads, writes and atomics"));
        let at_out = |off| Request {
            op: Opcode::Atomic,
            rkey: 0x5EED,
            seq: 6,
            off,
            len: 8,
            a: 4,
            b: 1,
            c: 0,
        };
        assert_eq!(
            roundtrip(&mut c, at_out(below + 20), &[]).0.status,
            Status::Nak
        );
        assert_eq!(
            roundtrip(&mut c, at_out(below + 64), &[]).0.status,
            Status::Nak
        );
        let (r, _) = roundtrip(&mut c, at_out(below + 16), &[]);
        assert_eq!((r.status, r.value), (Status::Old, 0xEEEE_EEEE_EEEE_EEEE));
        let rd_out = Request {
            op: Opcode::Read,
            rkey: 0x5EED,
            seq: 7,
            off: below + 8,
            len: 8,
            a: 0,
            b: 0,
            c: 0,
        };
        assert_eq!(roundtrip(&mut c, rd_out, &[]).1, vec![9; 8]);
        // A good write and read after the refusals still work.
        let (r, _) = roundtrip(&mut c, w(0xABCD, 8192, 4), &[7, 7, 7, 7]);
        assert_eq!(r.status, Status::Ack);
        let rd = Request {
            op: Opcode::Read,
            rkey: 0xABCD,
            seq: 4,
            off: 8192,
            len: 4,
            a: 0,
            b: 0,
            c: 0,
        };
        assert_eq!(roundtrip(&mut c, rd, &[]).1, vec![7, 7, 7, 7]);
        let at = Request {
            op: Opcode::Atomic,
            rkey: 0xABCD,
            seq: 5,
            off: 8200,
            len: 8,
            a: 4,
            b: 5,
            c: 0,
        };
        let (r, _) = roundtrip(&mut c, at, &[]);
        assert_eq!((r.status, r.value), (Status::Old, 0));
        drop(c);
        h.join().unwrap();
        // The guard areas around the heap are untouched but for the 8
        // bytes written into the exposed region.
        assert_eq!(&mem.0[65536 - 4096 + 8..65536 - 4096 + 16], &[9; 8]);
        assert_eq!(
            &mem.0[65536 - 4096 + 16..65536 - 4096 + 24],
            &0xEEEE_EEEE_EEEE_EEEFu64.to_ne_bytes()
        );
        mem.0[65536 - 4096 + 8..65536 - 4096 + 24].fill(0xEE);
        assert!(mem.0[..65536].iter().all(|&b| b == 0xEE));
        assert!(mem.0[2 * 65536..].iter().all(|&b| b == 0xEE));
        assert_eq!(&mem.0[65536 + 8192..65536 + 8196], &[7, 7, 7, 7]);
    }
}
