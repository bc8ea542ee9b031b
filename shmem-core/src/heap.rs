//! The symmetric heap: its backing memory ([`Heap`], [`MemfdHeap`]) and the
//! deterministic allocator that gives identical offsets on every PE.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Bytes at the start of every heap reserved for the runtime (wait doorbell
/// and other per-PE control words); allocations start after them.
pub const RESERVED_BYTES: usize = 4096;

/// Smallest alignment and granule of heap allocations (a cache line).
pub const MIN_ALIGN: usize = 64;

/// How a heap can be reached by a transport of another process.
///
/// Open to new kinds of memory: a heap that is neither a mappable
/// descriptor nor unexportable (device memory, a registered RDMA region)
/// says what it is with [`HeapExport::Other`], and the engines that know
/// that kind downcast the handle.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HeapExport {
    /// A file descriptor that maps the heap (`memfd`), for same-node peers.
    Fd(RawFd),
    /// Any other kind of handle, named by `kind` (e.g. `"cuda-ipc"`).
    Other {
        /// What the handle is, for engines to recognise and for errors.
        kind: &'static str,
        /// The handle itself.
        handle: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    },
    /// The heap cannot be exported.
    None,
}

/// A kind of heap backing, submitted with `inventory::submit!` by the
/// crate that provides it (`memfd` is core's); `SHMEM_HEAP` picks one.
pub struct HeapRegistration {
    /// Name as `SHMEM_HEAP` spells it (lower case).
    pub name: &'static str,
    /// Creates and maps a zero-filled heap of `size` bytes for this PE.
    pub create: fn(size: usize) -> Result<std::sync::Arc<dyn Heap>>,
}

inventory::collect!(HeapRegistration);

fn create_memfd(size: usize) -> Result<std::sync::Arc<dyn Heap>> {
    Ok(std::sync::Arc::new(MemfdHeap::new(size)?))
}

inventory::submit! {
    HeapRegistration { name: "memfd", create: create_memfd }
}

/// Names of the registered heap kinds, sorted.
pub fn heap_kinds() -> Vec<&'static str> {
    let mut v: Vec<_> = inventory::iter::<HeapRegistration>
        .into_iter()
        .map(|r| r.name)
        .collect();
    v.sort_unstable();
    v
}

/// Creates a heap of the registered kind `name` (case-insensitive).
///
/// # Errors
/// [`Error::Config`] naming `SHMEM_HEAP` and the known kinds when no crate
/// registers `name`; the kind's own error when it cannot be created.
pub fn create_heap(name: &str, size: usize) -> Result<std::sync::Arc<dyn Heap>> {
    let want = name.trim().to_ascii_lowercase();
    let reg = inventory::iter::<HeapRegistration>
        .into_iter()
        .find(|r| r.name == want)
        .ok_or_else(|| Error::Config {
            name: "SHMEM_HEAP",
            value: name.to_string(),
            reason: format!("no such heap kind; registered: {}", heap_kinds().join(", ")),
        })?;
    (reg.create)(size)
}

/// The symmetric heap of this PE.
///
/// # Safety
/// Engines and the runtime write through [`Heap::base`] without further
/// checks: an implementation must return a mapping of [`Heap::size`]
/// readable and writable bytes that stays valid, at the same address, for
/// as long as the value lives, and [`Heap::export`] must describe that same
/// memory. The first [`RESERVED_BYTES`] are the runtime's (its wait control
/// block) and must start zeroed.
pub unsafe trait Heap: Send + Sync + std::fmt::Debug {
    /// First byte of the heap in this process.
    fn base(&self) -> NonNull<u8>;
    /// Size in bytes, identical on every PE.
    fn size(&self) -> usize;
    /// A handle through which peers (or an RDMA device) reach the memory.
    fn export(&self) -> HeapExport;
}

/// A heap backed by `memfd_create` + `mmap(MAP_SHARED)`.
///
/// The memory lives only as long as some process maps it or holds the fd, so
/// nothing remains in `/dev/shm` when a job ends or dies.
#[derive(Debug)]
pub struct MemfdHeap {
    base: NonNull<u8>,
    size: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory; all access goes through raw
// pointers whose synchronisation is the caller's (the SHMEM memory model).
unsafe impl Send for MemfdHeap {}
// SAFETY: as above; `MemfdHeap` itself holds no interior state.
unsafe impl Sync for MemfdHeap {}

impl MemfdHeap {
    /// Creates and maps a zero-filled heap of `size` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `size` is below one page plus a cache line or above
    /// this machine's memory; [`Error::Os`] when `memfd_create`, `ftruncate` or `mmap`
    /// fails.
    pub fn new(size: usize) -> Result<MemfdHeap> {
        if size < RESERVED_BYTES + MIN_ALIGN {
            return Err(Error::invalid(
                "mem_size",
                format!(
                    "{size} bytes is too small for a symmetric heap (minimum {})",
                    RESERVED_BYTES + MIN_ALIGN
                ),
            ));
        }
        let limit = physical_memory();
        if limit > 0 && size as u64 > limit {
            return Err(Error::invalid(
                "mem_size",
                format!(
                    "symmetric heap of {size} bytes exceeds this machine's {limit} bytes of memory (SHMEM_SYMMETRIC_SIZE)"
                ),
            ));
        }
        let name = c"shmem-symmetric-heap";
        // SAFETY: `name` is a valid NUL-terminated string.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(Error::last_os("memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(Error::last_os(format!("ftruncate(memfd, {size})")));
        }
        let base = map_fd(fd.as_raw_fd(), size)?;
        Ok(MemfdHeap { base, size, fd })
    }
}

/// Maps `size` bytes of `fd` shared and writable.
///
/// # Errors
/// [`Error::Os`] when `mmap` fails.
pub fn map_fd(fd: RawFd, size: usize) -> Result<NonNull<u8>> {
    // SAFETY: a fresh mapping chosen by the kernel; arguments are valid.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::last_os(format!("mmap of {size} bytes")));
    }
    NonNull::new(ptr.cast()).ok_or_else(|| Error::last_os("mmap returned null"))
}

/// Unmaps a mapping made by [`map_fd`].
///
/// # Safety
/// `base`/`size` must describe a live mapping from [`map_fd`] that nothing
/// uses any more.
pub unsafe fn unmap(base: NonNull<u8>, size: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        libc::munmap(base.as_ptr().cast(), size);
    }
}

fn physical_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if pages <= 0 || page <= 0 {
        return 0;
    }
    pages as u64 * page as u64
}

// SAFETY: a zero-filled shared mapping of `size` bytes made in `new`,
// unmapped only in `Drop`; the fd is the memfd behind it.
unsafe impl Heap for MemfdHeap {
    fn base(&self) -> NonNull<u8> {
        self.base
    }
    fn size(&self) -> usize {
        self.size
    }
    fn export(&self) -> HeapExport {
        HeapExport::Fd(self.fd.as_raw_fd())
    }
}

impl Drop for MemfdHeap {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` and is dropped with the heap.
        unsafe { unmap(self.base, self.size) };
    }
}

/// Deterministic first-fit allocator over `[RESERVED_BYTES, size)`.
///
/// The same sequence of calls gives the same offsets on every PE, which is
/// what makes the heap symmetric.
#[derive(Debug, Clone)]
pub struct Allocator {
    size: usize,
    /// Free blocks: offset -> length, non-adjacent (coalesced).
    free: BTreeMap<usize, usize>,
    /// Live allocations: offset -> (block start, block length).
    live: BTreeMap<usize, (usize, usize)>,
}

fn round_up(v: usize, align: usize) -> Option<usize> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}

impl Allocator {
    /// An allocator for a heap of `size` bytes.
    pub fn new(size: usize) -> Allocator {
        let mut free = BTreeMap::new();
        let start = RESERVED_BYTES;
        let end = size & !(MIN_ALIGN - 1);
        if end > start {
            free.insert(start, end - start);
        }
        Allocator {
            size,
            free,
            live: BTreeMap::new(),
        }
    }

    /// Allocates `bytes` (0 is treated as 1) aligned to `align` (a power of two).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an alignment that is not a power of two;
    /// [`Error::OutOfMemory`] when no free block fits.
    pub fn alloc(&mut self, bytes: usize, align: usize) -> Result<usize> {
        if !align.is_power_of_two() {
            return Err(Error::invalid(
                "alignment",
                format!("{align} is not a power of two"),
            ));
        }
        let align = align.max(MIN_ALIGN);
        let len = round_up(bytes.max(1), MIN_ALIGN).ok_or_else(|| self.oom(bytes, align))?;
        let mut found = None;
        for (&start, &blen) in &self.free {
            let Some(aligned) = round_up(start, align) else {
                continue;
            };
            let pad = aligned - start;
            if pad <= blen && blen - pad >= len {
                found = Some((start, blen, aligned));
                break;
            }
        }
        let Some((start, blen, aligned)) = found else {
            return Err(self.oom(bytes, align));
        };
        self.free.remove(&start);
        if aligned > start {
            self.free.insert(start, aligned - start);
        }
        let end = aligned + len;
        if start + blen > end {
            self.free.insert(end, start + blen - end);
        }
        self.live.insert(aligned, (aligned, len));
        Ok(aligned)
    }

    /// Frees the allocation at `offset`; returns its usable length.
    ///
    /// # Errors
    /// [`Error::InvalidFree`] when `offset` is not a live allocation.
    pub fn free(&mut self, offset: usize) -> Result<usize> {
        let (start, len) = self
            .live
            .remove(&offset)
            .ok_or(Error::InvalidFree { offset })?;
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
        Ok(len)
    }

    /// Whether `[offset, offset + len)` lies inside one live allocation.
    pub fn contains(&self, offset: usize, len: usize) -> bool {
        self.live
            .range(..=offset)
            .next_back()
            .is_some_and(|(&start, &(_, l))| offset + len <= start + l)
    }

    /// Usable length of the live allocation at `offset`.
    pub fn len_of(&self, offset: usize) -> Option<usize> {
        self.live.get(&offset).map(|&(_, l)| l)
    }

    /// Tries to resize the allocation at `offset` in place; returns whether it could.
    ///
    /// # Errors
    /// [`Error::InvalidFree`] when `offset` is not a live allocation;
    /// [`Error::OutOfMemory`] when `bytes` overflows.
    pub fn resize_in_place(&mut self, offset: usize, bytes: usize) -> Result<bool> {
        let &(start, len) = self
            .live
            .get(&offset)
            .ok_or(Error::InvalidFree { offset })?;
        let new_len =
            round_up(bytes.max(1), MIN_ALIGN).ok_or_else(|| self.oom(bytes, MIN_ALIGN))?;
        if new_len <= len {
            if new_len < len {
                self.live.insert(offset, (start, new_len));
                let tail = start + new_len;
                let mut tl = len - new_len;
                if let Some(&nl) = self.free.get(&(start + len)) {
                    self.free.remove(&(start + len));
                    tl += nl;
                }
                self.free.insert(tail, tl);
            }
            return Ok(true);
        }
        let need = new_len - len;
        match self.free.get(&(start + len)).copied() {
            Some(nl) if nl >= need => {
                self.free.remove(&(start + len));
                if nl > need {
                    self.free.insert(start + new_len, nl - need);
                }
                self.live.insert(offset, (start, new_len));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> usize {
        self.free.values().sum()
    }

    /// Largest free block.
    pub fn largest_free(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Heap size this allocator manages.
    pub fn heap_size(&self) -> usize {
        self.size
    }

    fn oom(&self, requested: usize, align: usize) -> Error {
        Error::OutOfMemory {
            requested,
            align,
            free: self.free_bytes(),
            largest: self.largest_free(),
            heap_size: self.size,
        }
    }
}

/// Most allocations whose generation is tracked at once; allocations beyond
/// it get [`crate::sym::UNTRACKED`] handles (still correct, not checked).
pub const TRACKED_ALLOCATIONS: usize = 1 << 16;

/// Generation numbers of live allocations, so that a handle to a freed
/// object is refused: each tracked allocation owns a slot whose number
/// changes when it is freed. Checking a handle is one relaxed load.
pub struct Generations {
    slots: Box<[AtomicU32]>,
    inner: Mutex<GenInner>,
}

#[derive(Default)]
struct GenInner {
    free: Vec<u32>,
    next: u32,
    by_offset: HashMap<usize, u32>,
}

impl std::fmt::Debug for Generations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("Generations")
            .field("live", &g.by_offset.len())
            .finish()
    }
}

impl Default for Generations {
    fn default() -> Self {
        Generations::new()
    }
}

impl Generations {
    /// An empty table.
    pub fn new() -> Generations {
        Generations {
            slots: (0..TRACKED_ALLOCATIONS)
                .map(|_| AtomicU32::new(0))
                .collect(),
            inner: Mutex::new(GenInner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GenInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A tag for the allocation just made at `offset`.
    pub fn issue(&self, offset: usize) -> u64 {
        let mut g = self.lock();
        if let Some(old) = g.by_offset.remove(&offset) {
            // Freed without retire (raw offsets): retire it now.
            self.slots[old as usize].fetch_add(1, Ordering::Relaxed);
            g.free.push(old);
        }
        let slot = match g.free.pop() {
            Some(s) => s,
            None if (g.next as usize) < TRACKED_ALLOCATIONS => {
                g.next += 1;
                g.next - 1
            }
            None => return crate::sym::UNTRACKED,
        };
        g.by_offset.insert(offset, slot);
        let generation = self.slots[slot as usize].load(Ordering::Relaxed);
        ((slot as u64) << 32) | generation as u64
    }

    /// Marks the allocation at `offset` freed: its tags stop being live.
    pub fn retire(&self, offset: usize) {
        let mut g = self.lock();
        if let Some(slot) = g.by_offset.remove(&offset) {
            self.slots[slot as usize].fetch_add(1, Ordering::Relaxed);
            g.free.push(slot);
        }
    }

    /// Whether `tag` names an allocation that has not been freed.
    #[inline]
    pub fn is_live(&self, tag: u64) -> bool {
        if tag == crate::sym::UNTRACKED {
            return true;
        }
        match self.slots.get((tag >> 32) as usize) {
            Some(s) => s.load(Ordering::Relaxed) == tag as u32,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_tells_live_ranges_from_freed_ones() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(100, 8).unwrap();
        let y = a.alloc(64, 8).unwrap();
        assert!(a.contains(x, 100) && a.contains(x + 10, 8) && a.contains(y, 64));
        assert!(!a.contains(x, 200));
        a.free(x).unwrap();
        assert!(!a.contains(x, 8));
        assert!(a.contains(y, 64));
        assert!(!a.contains(0, 8));
    }

    #[test]
    fn freed_generations_are_not_live_and_slots_are_reused() {
        let g = Generations::new();
        let a = g.issue(4096);
        let b = g.issue(8192);
        assert!(g.is_live(a) && g.is_live(b));
        assert!(g.is_live(crate::sym::UNTRACKED));
        g.retire(4096);
        assert!(!g.is_live(a));
        assert!(g.is_live(b));
        // The slot comes back for the next allocation at the same offset,
        // under a new generation: the stale tag stays dead.
        let c = g.issue(4096);
        assert_eq!(c >> 32, a >> 32);
        assert_ne!(c, a);
        assert!(g.is_live(c) && !g.is_live(a));
        g.retire(12345); // unknown offsets are ignored
        assert!(!g.is_live(u64::MAX - 1));
    }

    #[test]
    fn same_calls_same_offsets() {
        let mut a = Allocator::new(1 << 20);
        let mut b = Allocator::new(1 << 20);
        for (n, al) in [(10, 8), (4096, 4096), (1, 64), (300, 128)] {
            assert_eq!(a.alloc(n, al).unwrap(), b.alloc(n, al).unwrap());
        }
    }

    #[test]
    fn alignment_and_reuse() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(100, 4096).unwrap();
        assert_eq!(x % 4096, 0);
        assert!(x >= RESERVED_BYTES);
        let y = a.alloc(100, 8).unwrap();
        a.free(x).unwrap();
        let z = a.alloc(100, 4096).unwrap();
        assert_eq!(x, z);
        a.free(y).unwrap();
        a.free(z).unwrap();
        assert_eq!(a.free_bytes(), (1 << 20) - RESERVED_BYTES);
        assert_eq!(a.largest_free(), (1 << 20) - RESERVED_BYTES);
    }

    #[test]
    fn double_free_and_bad_alignment_are_errors() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(8, 8).unwrap();
        a.free(x).unwrap();
        assert!(matches!(a.free(x), Err(Error::InvalidFree { .. })));
        assert!(matches!(a.free(12345), Err(Error::InvalidFree { .. })));
        assert!(a.alloc(8, 3).is_err());
    }

    #[test]
    fn out_of_memory_reports_free_space() {
        let mut a = Allocator::new(64 * 1024);
        let err = a.alloc(1 << 20, 8).unwrap_err().to_string();
        assert!(err.contains("free"), "{err}");
        assert!(err.contains(&format!("{}", 1 << 20)), "{err}");
    }

    #[test]
    fn resize_in_place_grows_and_shrinks() {
        let mut a = Allocator::new(1 << 20);
        let x = a.alloc(64, 64).unwrap();
        assert!(a.resize_in_place(x, 1000).unwrap());
        assert_eq!(a.len_of(x), Some(1024));
        assert!(a.resize_in_place(x, 64).unwrap());
        let y = a.alloc(64, 64).unwrap();
        assert_eq!(y, x + 64);
        assert!(!a.resize_in_place(x, 1000).unwrap());
    }

    #[test]
    fn memfd_heap_maps_zeroed_memory() {
        let h = MemfdHeap::new(1 << 20).unwrap();
        // SAFETY: within the fresh mapping.
        unsafe {
            assert_eq!(*h.base().as_ptr().add(5000), 0);
            *h.base().as_ptr().add(5000) = 7;
            assert_eq!(*h.base().as_ptr().add(5000), 7);
        }
        assert!(MemfdHeap::new(100).is_err());
        assert!(MemfdHeap::new(usize::MAX / 2).is_err());
    }
}
