//! The libfabric provider: RDMA on every fabric libfabric supports
//! (verbs for RoCE/InfiniBand, EFA, Slingshot's cxi, Omni-Path's psm2/opx,
//! and `tcp;ofi_rxm` or `sockets` on plain Ethernet).
//!
//! `libfabric.so.1` is loaded at run time ([`ffi::Api::load`]), so a build
//! needs no libfabric and a host without it falls back to the software
//! provider. Per job: one fabric, domain and reliable-datagram endpoint, the
//! whole symmetric heap registered as one memory region, the endpoint
//! addresses and keys of all PEs exchanged in one bootstrap allgather
//! (postcard-encoded [`PeerCard`]), an address vector of all peers.
//! Memory outside the heap that a PE exposes ([`Transport::expose_memory`]:
//! the C ABI's static data) is registered as regions of its own, whose
//! addresses and keys the runtime's allgather hands to the peers; their
//! `put_to_address`/`get_from_address` are then `fi_write`/`fi_read` with
//! those keys, and a write rings the target's waiters that watch everything
//! (remote CQ data of the empty range, or a wake message after delivery).
//! Atomics there (`atomic_at_address`) are atomic messages with
//! [`AMO_EXPOSED`] set, applied by the target as CPU atomics; where atomic
//! messages are off they are refused as unsupported (the provider's own
//! atomics would not be atomic with the target node's CPU atomics), and the
//! C ABI falls back to the owner's service thread.
//!
//! Data path: put = `fi_write`, get = `fi_read`, atomics =
//! `fi_fetch_atomic`/`fi_compare_atomic` (a compare-and-swap loop stands in
//! for any op/width the provider lacks, found with `fi_query_atomic`),
//! signals = `fi_atomic`. Non-fetching atomics are `fi_atomic` too and
//! return once posted ([`Transport::atomic_post`]) when the provider orders
//! atomics after atomics (`FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW`, as
//! `tcp;ofi_rxm` does) and progresses manually; a later write, read or
//! signal message to the same PE, which the provider does not order after
//! atomics, first waits for them (`Ofi::after_amos`), so this PE sees its
//! own operations in program order. Where signals are messages (below)
//! and the provider progresses manually, atomics are messages too
//! (`SHMEM_ROCE_OFI_AMO_MSG`, every PE alike): the target applies one with
//! a CPU atomic (so it is atomic with the CPU atomics of the target's own
//! node; `tcp;ofi_rxm`'s own atomics are software run by the target's
//! thread too), rings the waiters on the word and answers with its old
//! value; each sender numbers its atomic messages per target, and the
//! target applies them in that order even when two threads drain its
//! completion queue at once. A fetching atomic then costs one message
//! each way where the provider's took a request, a response and our wake
//! message. Blocking puts copy their source into a (pooled) bounce buffer
//! and return once posted, except from `SHMEM_ROCE_OFI_DIRECT_PUT` bytes
//! (256 KiB) up: those write straight from the caller's buffer and return
//! once delivered, since on TCP providers the copy costs the core as much
//! as the provider's own copy into the socket (1 MiB back-to-back puts
//! over `net` between two namespaces: 1.27 -> 1.74 GB/s at the median of
//! five interleaved rounds; `sw` 2.02). Transfers are split into pieces of
//! `SHMEM_ROCE_OFI_CHUNK` (128 KiB on manual-progress providers; at most
//! the provider's `max_msg_size` and [`MAX_CHUNK`]) and pipelined (see
//! [`Inner::max_chunk`]). Every operation
//! carries a context that its completion-queue entry hands back; `quiet`
//! waits until every posted operation has completed. When the provider
//! orders writes after writes (`FI_ORDER_WAW`) fences and put-with-signal
//! are free; otherwise the signal is posted after the data's delivery
//! completion and `fence` completes the earlier operations first.
//!
//! Providers without atomics: libfabric's own TCP RDM endpoint (protocol
//! `FI_PROTO_XNET`: the `net` provider of 1.17, `tcp` itself from 1.18)
//! lists `FI_ATOMIC` but `fi_query_atomic` fails for every op. Without a
//! native 32- and 64-bit compare-and-swap nothing can be emulated on the
//! provider, so every signal and atomic is a message (set-up fails, naming
//! the setting, where `SHMEM_ROCE_OFI_SIGNAL_MSG` or `SHMEM_ROCE_OFI_AMO_MSG`
//! forbids them), and the provider counts as unordered (messages are
//! applied by the target's threads, not in the stream), so fences drain.
//! Its domain claims automatic progress, but in 1.17 its thread runs only
//! for wait objects other than a file descriptor; with ours it moves data
//! only inside libfabric calls and is driven as a manual-progress provider
//! (later versions start their thread for a descriptor too, and driving it
//! as well costs only polls). Its 1.17 wait descriptor does not re-arm in
//! `fi_trywait`, which the progress thread learns at run time
//! ([`WaitFdTrust`]). It is used where `FI_PROVIDER` names it; `auto`
//! keeps libfabric's order (`tcp;ofi_rxm` first), see [`WaitFdTrust`] for
//! why.
//!
//! Progress: a progress thread polls the completion queue (manual-progress
//! providers such as `tcp;ofi_rxm` move data only inside libfabric calls)
//! for 150 us past its last completion or its last sight of traffic, then
//! blocks: on the queue's wait descriptor where the provider has one
//! (`FI_WAIT_FD`, after `fi_trywait`; traffic that makes no completion
//! here, such as a peer's reads of this PE's memory, wakes it too, and it
//! keeps polling while they come: an 8-byte get from a PE waiting in a
//! barrier measured 45-49 us when each read woke it and 24-30 us since),
//! else in `fi_cq_sread` (waking costs tens of microseconds per message).
//! Where the descriptor does not re-arm in `fi_trywait` (libfabric 1.17's
//! TCP RDM endpoint, learnt at run time: [`WaitFdTrust`]) it naps between
//! polls for a while and then blocks in `fi_cq_sread`.
//! Threads waiting for their own operations poll the completion queue
//! themselves. So do threads waiting in the library for anything else (a
//! signal, a word, a collective's flag: [`Transport::progress`], while the
//! wait spins or yields), so that a message they wait for is applied on
//! the waiting thread instead of being handed over from the progress
//! thread.
//!
//! Waking the target's waiters: a remote write is invisible to the
//! target's CPU. Where the target's provider reports remote CQ data (both
//! `tcp;ofi_rxm` and `sockets` carry 8 bytes), a write carries the heap
//! range it fills (40 bits of offset, 24 of length; `FI_REMOTE_CQ_DATA`),
//! the target's completion queue reports it once the bytes are in memory,
//! and whichever thread polls there rings the waiters watching that range
//! (the same [`shmem_core::wait::ring`] a local writer uses): no message
//! besides the write. An OSU `osu_oshm_put` of 8 bytes and `quiet` across
//! two namespaces over `tcp;ofi_rxm`, the target in a barrier: 26.5-28.0 us
//! against 42-55 with wake messages (three interleaved runs). Elsewhere,
//! and for atomics, after an operation that changed a peer's memory
//! completes the initiator sends the peer a small "wake" message naming
//! the bytes it changed (`SHMEM_ROCE_OFI_REMOTE_DATA=0` forces that for
//! writes too); the peer's progress thread rings its waiters. A wake that
//! overtakes its data costs at most one poll interval of the waiter (which
//! re-checks its condition every 50 ms), never correctness.
//!
//! Memory registration: the heap is one region; providers that require
//! registered local buffers (`FI_MR_LOCAL`, e.g. verbs) also get the
//! receive buffers registered at set-up, pooled bounce buffers registered
//! once (the registration stays with the buffer while it is reused), and
//! every other local buffer of a data transfer registered per operation
//! (its context closes the region at completion);
//! `SHMEM_ROCE_OFI_MR_LOCAL=1` forces that on any provider.
//!
//! Failures: an error completion marks its peer failed; an operation that
//! gets no completion while its peer sends nothing for `SHMEM_LINK_TIMEOUT`
//! fails with an error naming the peer, and so does every later operation
//! to it. Such an operation's context stays with the provider (it is
//! freed if its completion ever comes), but a read's destination buffer is
//! the caller's again once the error is returned: a peer that comes back
//! after the link timeout could still write into it, as with any RDMA
//! library that abandons a request.
//!
//! Signals on providers without `FI_ORDER_WAW` (`tcp;ofi_rxm` advertises
//! only RMA-after-RMA and atomic-after-atomic ordering): a put-with-signal
//! with up to `SHMEM_ROCE_OFI_SIGNAL_MSG` bytes of data (512 by default)
//! is one message, which the target's progress thread applies: it copies
//! the data into its heap, updates the signal word with a CPU atomic (as a
//! local signal does, so remote and local signal updates are atomic with
//! respect to each other), rings its waiters and sends back an
//! acknowledgement that completes the operation for `quiet` and `fence`.
//! That is one message on the critical path where a write (or byte
//! atomic) followed by a signal atomic cost two, the second 15-18 us on
//! `tcp;ofi_rxm` here. Larger data is written with delivery completion and
//! its signal follows as such a message; `signal_set`/`signal_add` are
//! messages too. Every PE must agree on using them (checked at set-up).
//! The target acknowledges before it wakes its waiters, so that a PE that
//! exits right after its wait does not take the acknowledgement along.
//! An acknowledgement still queued when the target sends the sender a
//! signal message of its own rides in that message (8 bytes after the
//! data, where it still fits an inject): the answer of a put-with-signal
//! ping-pong acknowledges what it answers, one message per hop instead of
//! two (8-byte ping-pong over `tcp;ofi_rxm`, five interleaved runs: 8.7
//! -> 8.2 us per hop at the median).
//! A collective's signal ([`Transport::put_signal_collective`]) is not
//! counted for `quiet` and `fence`: only its target waits for it. Its
//! message says so (`SIGNAL_COLLECTIVE`), and its target always queues the
//! acknowledgement for its next message to the sender (a barrier's answer)
//! or the next flush; the sender waits for it only when the engine is
//! dropped. So a barrier between two nodes is one message each way.
//! Without a fence, two signal messages from one PE may be applied in
//! either order (two threads may drain the completion queue at once), as
//! OpenSHMEM allows. With `SHMEM_ROCE_OFI_SIGNAL_MSG=0` the data goes as a
//! byte-array `FI_ATOMIC_WRITE` (ordered before the signal atomic posted
//! right after it) up to the provider's atomic size, larger data waits for
//! delivery before the signal atomic.

pub mod ffi;

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void, CStr, CString};
use std::net::IpAddr;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shmem_core::wait::{ring, ControlBlock, Span};
use shmem_core::{
    shmem_log, AmoOp, AmoWidth, Capabilities, Completion, Error, PeId, Result, SignalOp, Transport,
    TransportInit,
};

use crate::counters::Counters;
use crate::exposed::{ExposedRegion, Regions};
use crate::NAME;
use ffi::*;

/// Largest single transfer posted, also when the provider allows more.
pub const MAX_CHUNK: usize = 4 << 20;
/// Pieces of a transfer on manual-progress providers by default
/// (`SHMEM_ROCE_OFI_CHUNK=auto`, see [`Inner::max_chunk`]).
const PIECE: usize = 128 << 10;
/// Receive buffers for wake, signal, atomic and acknowledgement messages
/// kept posted (about 300 KiB). A burst of posted atomics is one message
/// each: with 64 buffers the first burst of 500 in a job cost 33 us per
/// atomic while `tcp;ofi_rxm` grew its pool for unexpected messages, and
/// 10 us with 512.
const RX_BUFFERS: usize = 512;
/// Bytes of one receive buffer: a signal message's header and up to
/// [`SIGNAL_MSG_MAX`] bytes of data.
const RX_LEN: usize = SIGNAL_HEADER + SIGNAL_MSG_MAX;
/// Bytes of one wake message.
const WAKE_LEN: usize = 40;
const WAKE_MAGIC: u64 = 0x5348_4d57_414b_4531; // "SHMWAKE1"
/// First word of an acknowledgement of a signal message (then its id).
const ACK_MAGIC: u64 = 0x5348_4d41_434b_5331; // "SHMACKS1"
const ACK_LEN: usize = 16;
/// First word of the answer to an atomic message (then its id and the
/// value the word held before).
const ACK_VALUE_MAGIC: u64 = 0x5348_4d41_434b_5631; // "SHMACKV1"
const ACK_VALUE_LEN: usize = 24;
/// Low 16 bits of the first word of an atomic message.
const AMO_TAG: u64 = 0x414d; // "MA"
/// Bytes of an atomic message: tag|op|width|from, id, offset, operand,
/// compare, sequence number (per sender and target).
const AMO_LEN: usize = 48;
/// Bit of an atomic message's first word (the top bit of its op byte):
/// the offset is an address in memory outside the heap that the target
/// exposed ([`Transport::expose_memory`]).
const AMO_EXPOSED: u64 = 1 << 23;
/// First word of the refusal of an atomic message the target does not
/// understand (then its id).
const ACK_REFUSED_MAGIC: u64 = 0x5348_4d41_434b_5231; // "SHMACKR1"
/// Low 16 bits of the first word of a signal message.
const SIGNAL_TAG: u64 = 0x4d53; // "SM"
/// Bytes of a signal message before its data: tag|op|flags|from, id, dst,
/// len, sig, value.
const SIGNAL_HEADER: usize = 48;
/// Most data bytes a put-with-signal carries in its signal message.
pub const SIGNAL_MSG_MAX: usize = 512;
/// Signal message flag: the data follows the header (else `dst`/`len`
/// only name bytes an earlier write delivered, for the wake).
const SIGNAL_INLINE: u64 = 1;
/// Signal message flag: after the data (or the header) comes the id of a
/// signal message the target sent this PE, acknowledged by this one (the
/// answer of a ping-pong then carries the acknowledgement of what it
/// answers, one message instead of two).
const SIGNAL_ACK: u64 = 2;
/// Signal message flag: a collective's signal
/// ([`Transport::put_signal_collective`]), whose sender waits for its
/// acknowledgement only when its engine is dropped: the target always
/// queues the acknowledgement, to ride on its next message to the sender
/// (a barrier's answer) or leave with the next flush (a waiting thread's
/// next poll, the progress thread's next round: at most its blocking
/// timeout, 20 ms, later).
const SIGNAL_COLLECTIVE: u64 = 4;
/// Blocking puts under `SHMEM_ROCE_OFI_DIRECT_PUT` copy their source into
/// a bounce buffer (so they return at once); this many bytes of bounce
/// buffers may be in flight.
const BOUNCE_LIMIT: usize = 64 << 20;
/// Bounce buffers of at least this size go back to a pool when their
/// operation completes (a fresh megabyte costs 256 page faults, several
/// times its copy); the pool keeps at most [`BOUNCE_POOL_BYTES`].
const BOUNCE_POOL_MIN: usize = 64 << 10;
const BOUNCE_POOL_BYTES: usize = 16 << 20;
/// How long the progress thread keeps polling after its last completion.
const HOT: Duration = Duration::from_micros(150);
/// Naps of the progress thread where the wait descriptor cannot be
/// trusted ([`WaitFdTrust`]), within [`NAP_ACTIVE_FOR`] of the
/// last activity; after that it blocks in `fi_cq_sread`.
const NAP_ACTIVE: Duration = Duration::from_micros(50);
const NAP_ACTIVE_FOR: Duration = Duration::from_millis(10);
/// A yield that takes longer than this gave the core to other work for a
/// time slice: the cores are contended (see [`Inner::pause`]).
const SLOW_YIELD: Duration = Duration::from_millis(1);
/// How long the engine's threads sleep instead of yielding after a slow
/// yield, before they try a yield again.
const CONTENDED_FOR: Duration = Duration::from_millis(20);
/// A waiting thread that drove the provider this recently is still
/// driving it (see the progress thread's loop).
const DRIVEN_LATELY: Duration = Duration::from_millis(1);
/// Their sleep between polls meanwhile.
const CONTENDED_SLEEP: Duration = Duration::from_micros(20);
/// Bits of a write's remote CQ data that hold the heap offset of its range;
/// the other 24 hold its length ([`remote_data`]).
const REMOTE_DATA_OFFSET_BITS: u32 = 40;
/// The largest heap whose offsets fit [`REMOTE_DATA_OFFSET_BITS`].
const REMOTE_DATA_MAX_HEAP: u64 = 1 << REMOTE_DATA_OFFSET_BITS;
/// Length field of remote CQ data that means "to the end of the heap" (a
/// range this long or longer).
const REMOTE_DATA_TO_END: u64 = (1 << (64 - REMOTE_DATA_OFFSET_BITS)) - 1;

/// The remote CQ data of a write of `len` bytes at heap offset `off`
/// (`off` below [`REMOTE_DATA_MAX_HEAP`]).
fn remote_data(off: u64, len: u64) -> u64 {
    off | len.min(REMOTE_DATA_TO_END) << REMOTE_DATA_OFFSET_BITS
}

/// The heap range a write's remote CQ data names, within a heap of `heap`
/// bytes: the whole rest of the heap for a long write, None for data no
/// write of this library sends.
fn remote_range(data: u64, heap: u64) -> Option<(u64, u64)> {
    let off = data & (REMOTE_DATA_MAX_HEAP - 1);
    let len = data >> REMOTE_DATA_OFFSET_BITS;
    if off > heap {
        return None;
    }
    if len == REMOTE_DATA_TO_END {
        return Some((off, heap - off));
    }
    (off + len <= heap).then_some((off, len))
}
/// Providers `auto` never picks (they reach only processes of one host).
const HOST_ONLY: &[&str] = &["shm", "sm2"];

fn err(reason: impl Into<String>) -> Error {
    Error::Transport {
        engine: NAME,
        reason: reason.into(),
    }
}

fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric strings are NUL-terminated and live as long as their info.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// What one PE tells the others at setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerCard {
    /// Provider name (every PE must use the same).
    pub provider: String,
    /// Endpoint address (`fi_getname`).
    pub addr: Vec<u8>,
    /// Remote key of the heap's memory region.
    pub key: u64,
    /// Virtual address of the heap (used with `FI_MR_VIRT_ADDR`).
    pub base: u64,
    /// Heap bytes.
    pub size: u64,
    /// Whether this PE sends signals as messages applied by their target
    /// (`SHMEM_ROCE_OFI_SIGNAL_MSG` > 0); every PE must agree, or one PE's
    /// CPU atomics and another's provider atomics would update the same
    /// signal word without being atomic with each other.
    pub signal_msg: bool,
    /// Whether this PE's completion queue reports the remote CQ data of
    /// writes into it (and it rings its waiters for them): writers then
    /// send no wake message after a write.
    pub remote_data: bool,
    /// Whether this PE sends its atomics to other nodes as messages that
    /// the target applies with CPU atomics (`SHMEM_ROCE_OFI_AMO_MSG`);
    /// every PE must agree, as for `signal_msg`.
    pub amo_msg: bool,
}

/// Posts a non-fetching atomic of `count` elements at `buf` (descriptor
/// `desc`) to `remote` on `p`, asking for delivery completion as writes do
/// (`quiet` promises the update is in the target's memory).
///
/// # Safety
/// `ep` is the open endpoint; `buf` stays valid and `ctx` is a live
/// context until the operation's completion.
#[allow(clippy::too_many_arguments)]
unsafe fn atomic_write_delivered(
    ep: *mut fid_ep,
    buf: *mut c_void,
    count: usize,
    desc: *mut c_void,
    p: &Peer,
    remote: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut OpCtx,
) -> isize {
    let ioc = fi_ioc { addr: buf, count };
    let rma = fi_rma_ioc {
        addr: remote,
        count,
        key: p.key,
    };
    let mut desc = desc;
    let msg = fi_msg_atomic {
        msg_iov: &ioc,
        desc: &mut desc,
        iov_count: 1,
        addr: p.addr,
        rma_iov: &rma,
        rma_iov_count: 1,
        datatype,
        op,
        context: ctx.cast(),
        data: 0,
    };
    // SAFETY: guaranteed by the caller; `msg` and what it points to live
    // through the call (the provider copies the descriptors).
    unsafe { ((*(*ep).atomic).writemsg)(ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE) }
}

/// Adds `add`'s ranges to `into`'s two: a range joins one it overlaps or
/// touches, else takes an empty slot, else widens the slot nearest to it
/// (a wider wake only re-checks more waiters; it never misses one).
fn merge_spans(into: &mut Spans, add: &Spans) {
    for &(off, len) in add.iter().filter(|r| r.1 > 0) {
        let end = off.saturating_add(len);
        let gap = |&(o, l): &(u64, u64)| {
            let e = o.saturating_add(l);
            if l == 0 {
                u64::MAX
            } else if end < o {
                o - end
            } else {
                off.saturating_sub(e)
            }
        };
        let k = match into.iter().position(|r| r.1 > 0 && gap(r) == 0) {
            Some(k) => k,
            None => match into.iter().position(|r| r.1 == 0) {
                Some(k) => {
                    into[k] = (off, len);
                    continue;
                }
                None => (0..into.len()).min_by_key(|&k| gap(&into[k])).unwrap_or(0),
            },
        };
        let (o, l) = into[k];
        let lo = o.min(off);
        into[k] = (lo, o.saturating_add(l).max(end) - lo);
    }
}

/// What the idle progress thread's wait on the completion queue's file
/// descriptor found.
enum Traffic {
    /// Traffic, or pending work (`fi_trywait` said not to block).
    Yes,
    /// The wait timed out (or was interrupted).
    No,
    /// The descriptor cannot be waited on; the thread falls back to
    /// `fi_cq_sread`.
    Broken(String),
}

/// What one look at the completion queue's wait descriptor around
/// `fi_trywait` showed ([`Inner::look_at_wait_fd`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FdLook {
    /// Readable before `fi_trywait` and quiet after it: the call re-armed
    /// it.
    Rearmed,
    /// Readable before and after a `fi_trywait` that found the queue empty.
    Stuck,
    /// Nothing to learn: quiet before the call, or work pending.
    Unknown,
}

/// What [`WaitFdTrust::observe`] concluded from a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Nothing new.
    Same,
    /// The verdict held at start-up is confirmed (logged once).
    Confirmed(bool),
    /// The verdict changed: the descriptor is (`true`) or is not trusted
    /// from now on.
    Changed(bool),
}

/// Whether the idle progress thread may block on the completion queue's
/// wait descriptor, learnt at run time from what the descriptor shows
/// around `fi_trywait` (a look each time the thread is about to block).
///
/// Why it matters: libfabric's own TCP RDM endpoint of 1.17
/// (`FI_PROTO_XNET`) signals the descriptor for every completion and
/// re-arms it only inside a blocking `fi_cq_sread` (its `fi_trywait` does
/// nothing; later libfabric versions reset it there), so once anything
/// completed it stays readable. Taken for traffic, it kept the progress
/// thread polling for good: a whole core per PE while idle (3.0 s of CPU in
/// 3 s), and an 8-byte get from a PE computing for 2 ms waited for the end
/// of the computation (medians up to 2.1 ms), the thread sharing the cores
/// with everything else. Blocking in `fi_cq_sread` instead (woken by every
/// message) cost the put-with-signal ping-pong up to 85 us per hop. So
/// where the descriptor is not trusted, within [`NAP_ACTIVE_FOR`] of the
/// last activity here (a completion or a waiting thread's poll) the thread
/// naps [`NAP_ACTIVE`] between polls, and only after that blocks in
/// `fi_cq_sread`. A peer's get from a PE whose waiting thread sleeps then
/// pays the nap (an 8-byte get, target in a barrier: 47-82 us against 29-40
/// over `tcp;ofi_rxm`), which is why `auto` does not prefer that provider.
///
/// That endpoint starts out distrusted, and [`REARMS_TO_TRUST`] looks in a
/// row that find the descriptor re-armed trust it (a libfabric that resets
/// it in `fi_trywait`, as later versions' TCP RDM endpoint does). Every
/// other provider is trusted for good: a look that finds the descriptor
/// readable after `fi_trywait` proves nothing there, since over
/// `tcp;ofi_rxm` the descriptor also covers the sockets, whose unread bytes
/// or pending sends (a PE serving a peer's reads, say, with no completion
/// of its own) keep it readable look after look; that is traffic, which the
/// thread serves, not a defect.
#[derive(Debug)]
struct WaitFdTrust {
    trusted: bool,
    /// Consecutive looks that found a distrusted descriptor re-armed.
    against: u32,
    /// Looks that agreed since start-up, up to [`CONFIRM_LOOKS`].
    agreed: u32,
    /// Whether the verdict changed since start-up.
    changed: bool,
}

/// Looks in a row that find a distrusted descriptor re-armed.
const REARMS_TO_TRUST: u32 = 2;
/// Agreeing looks after which the start-up verdict is logged as confirmed.
const CONFIRM_LOOKS: u32 = 1;

impl WaitFdTrust {
    fn new(trusted: bool) -> WaitFdTrust {
        WaitFdTrust {
            trusted,
            against: 0,
            agreed: 0,
            changed: false,
        }
    }

    fn trusted(&self) -> bool {
        self.trusted
    }

    /// Takes one look into account.
    fn observe(&mut self, look: FdLook) -> Verdict {
        match (look, self.trusted) {
            (FdLook::Unknown, _) | (FdLook::Stuck, true) => Verdict::Same,
            (FdLook::Rearmed, false) => {
                self.against += 1;
                if self.against < REARMS_TO_TRUST {
                    return Verdict::Same;
                }
                self.trusted = true;
                self.changed = true;
                Verdict::Changed(true)
            }
            (FdLook::Rearmed, true) | (FdLook::Stuck, false) => {
                self.against = 0;
                if self.changed || self.agreed >= CONFIRM_LOOKS {
                    return Verdict::Same;
                }
                self.agreed += 1;
                if self.agreed == CONFIRM_LOOKS {
                    Verdict::Confirmed(self.trusted)
                } else {
                    Verdict::Same
                }
            }
        }
    }

    /// Whether a look can still tell anything: a distrusted descriptor may
    /// turn out to re-arm; a trusted one only waits for its confirmation.
    fn wants_looks(&self) -> bool {
        !self.trusted || (!self.changed && self.agreed < CONFIRM_LOOKS)
    }
}

/// Takes a look at the wait descriptor into account and logs what it
/// settles; returns whether the verdict changed (the progress thread then
/// starts its round again under the new one).
fn learn(trust: &mut WaitFdTrust, look: FdLook, provider: &str) -> bool {
    let say = |trusted: bool| {
        if trusted {
            format!("fi_trywait re-arms the completion queue's wait descriptor (provider {provider}): the idle progress thread waits on it")
        } else {
            format!("the completion queue's wait descriptor stays readable after fi_trywait (provider {provider}): the idle progress thread naps between polls, then blocks in fi_cq_sread")
        }
    };
    match trust.observe(look) {
        Verdict::Same => false,
        Verdict::Confirmed(t) => {
            shmem_log!(Info, "ROCE/ofi: {}", say(t));
            false
        }
        Verdict::Changed(t) => {
            shmem_log!(Info, "ROCE/ofi: {} (changed at run time)", say(t));
            true
        }
    }
}

/// Whether `fd` is readable right now.
fn readable(fd: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never blocks.
    unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
}

/// Little-endian word `i` of a received message.
fn le_word(b: &[u8], i: usize) -> u64 {
    b.get(i * 8..i * 8 + 8)
        .and_then(|w| w.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Writes `words` little-endian at the start of `m` (a message).
fn put_words(m: &mut [u8], words: &[u64]) {
    for (k, v) in words.iter().enumerate() {
        m[k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// The acknowledgement of signal message `id`.
fn ack_message(id: u64) -> [u8; ACK_LEN] {
    let mut m = [0u8; ACK_LEN];
    put_words(&mut m, &[ACK_MAGIC, id]);
    m
}

/// The answer to atomic message `id`: the value its word held before.
fn value_ack_message(id: u64, value: u64) -> [u8; ACK_VALUE_LEN] {
    let mut m = [0u8; ACK_VALUE_LEN];
    put_words(&mut m, &[ACK_VALUE_MAGIC, id, value]);
    m
}

/// Describes `mr_mode` bits for `SHMEM_INFO`.
pub fn mr_mode_names(mode: c_int) -> String {
    let names = [
        (FI_MR_BASIC, "FI_MR_BASIC"),
        (FI_MR_SCALABLE, "FI_MR_SCALABLE"),
        (FI_MR_LOCAL, "FI_MR_LOCAL"),
        (FI_MR_RAW, "FI_MR_RAW"),
        (FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"),
        (FI_MR_ALLOCATED, "FI_MR_ALLOCATED"),
        (FI_MR_PROV_KEY, "FI_MR_PROV_KEY"),
        (FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"),
        (FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"),
        (FI_MR_ENDPOINT, "FI_MR_ENDPOINT"),
        (FI_MR_HMEM, "FI_MR_HMEM"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| mode & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "none (offsets, requested keys)".into()
    } else {
        v.join("|")
    }
}

/// The memory-registration modes this provider can work with.
pub const MR_MODES_SUPPORTED: c_int =
    FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_LOCAL;

/// Whether `auto` may pick `provider` (when `FI_PROVIDER` does not name it).
pub fn auto_may_pick(provider: &str) -> bool {
    !provider
        .split(';')
        .next()
        .is_some_and(|core| HOST_ONLY.contains(&core))
}

/// A provider found by [`probe`].
#[derive(Debug, Clone)]
pub struct Found {
    /// `fabric_attr->prov_name`.
    pub provider: String,
    /// `fabric_attr->name`.
    pub fabric: String,
    /// `domain_attr->name`.
    pub domain: String,
}

/// The `fi_getinfo` list for our needs, owned (freed on drop).
struct InfoList<'a> {
    api: &'a Api,
    head: *mut fi_info,
}

impl Drop for InfoList<'_> {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: `head` came from fi_getinfo and is freed once.
            unsafe { (self.api.freeinfo)(self.head) };
        }
    }
}

impl InfoList<'_> {
    fn iter(&self) -> impl Iterator<Item = *mut fi_info> + '_ {
        let mut p = self.head;
        std::iter::from_fn(move || {
            if p.is_null() {
                return None;
            }
            let cur = p;
            // SAFETY: a node of the list fi_getinfo returned.
            p = unsafe { (*cur).next };
            Some(cur)
        })
    }
}

/// Why the `sockets` provider will be slow here, if it will: its progress
/// threads spin for `FI_SOCKETS_PE_WAITTIME` milliseconds (10 by default)
/// before they sleep, and where this node's PEs already fill its cores the
/// spinning takes their time slices: an 8-byte get measured 4 ms and a
/// put-with-signal ping-pong 2 ms per hop on 2 cores, against 0.1 ms with
/// `FI_SOCKETS_PE_WAITTIME=0`.
fn sockets_spin_warning(
    provider: &str,
    waittime_set: bool,
    machine_pes: usize,
    cores: usize,
) -> Option<String> {
    if !provider.starts_with("sockets") || waittime_set || cores > 2 * machine_pes.max(1) {
        return None;
    }
    Some(format!(
        "the libfabric `sockets` provider's progress threads spin 10 ms before they sleep \
         (FI_SOCKETS_PE_WAITTIME), and this PE may run on {cores} core(s) with {machine_pes} PE(s) \
         on its machine: operations may take milliseconds. Set FI_SOCKETS_PE_WAITTIME=0, or use \
         FI_PROVIDER=tcp"
    ))
}

fn api_version(api: &Api) -> u32 {
    // SAFETY: fi_version has no preconditions.
    let lib = unsafe { (api.version)() };
    lib.min(fi_version(1, 17)).max(fi_version(1, 5))
}

fn getinfo<'a>(api: &'a Api, node: Option<IpAddr>) -> std::result::Result<InfoList<'a>, String> {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with all attribute structs.
    let hints = unsafe { (api.dupinfo)(ptr::null()) };
    if hints.is_null() {
        return Err("fi_allocinfo failed".into());
    }
    // SAFETY: `hints` and its attribute structs were just allocated by libfabric.
    unsafe {
        let h = &mut *hints;
        h.caps = FI_MSG
            | FI_RMA
            | FI_ATOMIC
            | FI_READ
            | FI_WRITE
            | FI_REMOTE_READ
            | FI_REMOTE_WRITE
            | FI_SEND
            | FI_RECV;
        h.mode = FI_CONTEXT | FI_CONTEXT2;
        (*h.ep_attr).type_ = FI_EP_RDM;
        (*h.domain_attr).threading = FI_THREAD_SAFE;
        (*h.domain_attr).mr_mode = MR_MODES_SUPPORTED;
        (*h.domain_attr).av_type = FI_AV_TABLE;
    }
    let node_c = node.map(|ip| CString::new(ip.to_string()).unwrap_or_default());
    let mut out: *mut fi_info = ptr::null_mut();
    // SAFETY: valid hints, optional NUL-terminated node, out pointer.
    let rc = unsafe {
        (api.getinfo)(
            api_version(api),
            node_c.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            ptr::null(),
            if node.is_some() { 1 << 57 } else { 0 }, // FI_SOURCE
            hints,
            &mut out,
        )
    };
    // SAFETY: allocated by fi_dupinfo above.
    unsafe { (api.freeinfo)(hints) };
    if rc != 0 {
        return Err(format!(
            "fi_getinfo found no provider with FI_RMA|FI_ATOMIC|FI_MSG on FI_EP_RDM{}: {}",
            std::env::var("FI_PROVIDER")
                .map(|p| format!(" (FI_PROVIDER={p})"))
                .unwrap_or_default(),
            api.error(rc as isize)
        ));
    }
    Ok(InfoList { api, head: out })
}

/// Picks the first usable provider of the list (honouring `FI_PROVIDER`,
/// which libfabric applies itself; without it, host-only providers are
/// skipped).
fn pick(list: &InfoList<'_>) -> std::result::Result<*mut fi_info, String> {
    let explicit = std::env::var("FI_PROVIDER").is_ok_and(|p| !p.trim().is_empty());
    let mut skipped = Vec::new();
    for i in list.iter() {
        // SAFETY: a node of the fi_getinfo list, with its attribute structs.
        let name = unsafe { cstr((*(*i).fabric_attr).prov_name) };
        if explicit || auto_may_pick(&name) {
            return Ok(i);
        }
        skipped.push(name);
    }
    Err(format!(
        "only host-local providers found ({}); set FI_PROVIDER to use one",
        skipped.join(", ")
    ))
}

/// Loads libfabric and finds the provider the `ofi` provider would use.
///
/// # Errors
/// Why libfabric cannot be used: missing library, no provider.
pub fn probe(node: Option<IpAddr>) -> std::result::Result<Found, String> {
    let api = Api::load()?;
    let list = getinfo(api, node)?;
    let i = pick(&list)?;
    // SAFETY: a node of the list, valid while `list` lives.
    unsafe {
        Ok(Found {
            provider: cstr((*(*i).fabric_attr).prov_name),
            fabric: cstr((*(*i).fabric_attr).name),
            domain: cstr((*(*i).domain_attr).name),
        })
    }
}

/// The names of the providers that offer what the `ofi` provider needs
/// here (`FI_PROVIDER` still filters them), in libfabric's order.
///
/// # Errors
/// Why libfabric cannot be used: missing library, no provider.
pub fn provider_names() -> std::result::Result<Vec<String>, String> {
    let api = Api::load()?;
    let list = getinfo(api, None)?;
    let mut names: Vec<String> = Vec::new();
    for i in list.iter() {
        // SAFETY: a node of the list, valid while `list` lives.
        let name = unsafe { cstr((*(*i).fabric_attr).prov_name) };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// Kinds of operation contexts.
const KIND_TX: u64 = 1;
const KIND_RX: u64 = 2;
/// The send of a signal message too large to inject: its completion only
/// frees the bytes (the target's acknowledgement completes the operation).
const KIND_SIGNAL_SEND: u64 = 3;

/// The context of one posted operation: owned by the provider from post to
/// completion-queue entry (leaked if that never comes).
#[repr(C)]
struct OpCtx {
    fictx: fi_context2,
    kind: u64,
    id: u64,
    /// Operand, compare value and result of atomics.
    operand: u64,
    compare: u64,
    result: u64,
    /// Source copy of a blocking put.
    bounce: Vec<u8>,
    /// Registration of this operation's local buffer (providers that
    /// require `FI_MR_LOCAL`), closed with the context.
    mr: *mut fid_mr,
    /// Registration of `bounce` for its whole capacity, which goes back to
    /// the pool with it (closed with the context if it does not).
    bounce_mr: *mut fid_mr,
    bounce_desc: *mut c_void,
}

impl Drop for OpCtx {
    fn drop(&mut self) {
        // Runs before `bounce` is freed: the registrations go first.
        close(self.mr.cast());
        close(self.bounce_mr.cast());
    }
}

/// A pooled bounce buffer with, where local buffers must be registered
/// (`FI_MR_LOCAL`), its registration: made once for the buffer's whole
/// capacity and kept while the buffer is reused (registering a megabyte
/// pins its pages, which verbs makes cost more than the copy).
struct Bounce {
    buf: Vec<u8>,
    mr: *mut fid_mr,
    desc: *mut c_void,
}

/// A receive buffer for wake, signal and acknowledgement messages.
#[repr(C)]
struct RxCtx {
    fictx: fi_context2,
    kind: u64,
    buf: [u8; RX_LEN],
    /// The buffer's registration descriptor (`FI_MR_LOCAL`), or null.
    desc: *mut c_void,
}

/// Two (offset, length) byte ranges of a peer's heap to wake it for.
type Spans = [(u64, u64); 2];

/// An operation awaiting its completion.
struct Track {
    pe: PeId,
    done: Completion,
    out: Option<Arc<AtomicU64>>,
    bounce: usize,
    /// Wake `pe` for these spans once the operation completed.
    wake: Option<Spans>,
    posted: Instant,
    /// A collective's signal ([`Transport::put_signal_collective`]):
    /// `quiet` and `fence` do not wait for it (it is not in
    /// [`Counters::issued`]); dropping the engine does
    /// ([`Inner::collective_in_flight`]).
    collective: bool,
}

/// Where an atomic message applies: a heap offset, or the address of a
/// word in a region the target exposed (sent with [`AMO_EXPOSED`]).
#[derive(Debug, Clone, Copy)]
enum AmoAt {
    Heap(usize),
    Exposed(u64),
}

/// Where a transfer's remote bytes are: a heap offset, or memory outside
/// the heap that the peer exposed (an address in the provider's addressing
/// of that region, and the region's key).
#[derive(Debug, Clone, Copy)]
enum Place {
    Heap(usize),
    Exposed { remote: u64, key: u64 },
}

struct Peer {
    addr: fi_addr_t,
    base: u64,
    key: u64,
    /// Writes to this peer carry their heap range as remote CQ data (see
    /// [`PeerCard::remote_data`]) instead of being followed by a wake.
    remote_data: bool,
    /// Sequence number of the next atomic message to this peer; held
    /// while the message is injected, so that numbers go out in order.
    amo_sent: Mutex<u64>,
    /// Atomic messages from this peer: the number of the next one to
    /// apply, and those that arrived before it (two threads may drain the
    /// completion queue at once), applied in order as it arrives.
    amo_received: Mutex<(u64, std::collections::BTreeMap<u64, [u8; AMO_LEN]>)>,
    failed: Mutex<Option<String>>,
    /// Last time an operation to this peer completed.
    heard: Mutex<Instant>,
}

/// Which atomics the provider executes natively (per width: 32, 64).
#[derive(Debug, Clone, Copy, Default)]
struct NativeAmo {
    read: [bool; 2],
    write: [bool; 2],
    sum: [bool; 2],
    band: [bool; 2],
    bor: [bool; 2],
    bxor: [bool; 2],
    cswap: [bool; 2],
    signal_set: bool,
    signal_add: bool,
    /// Bytes one `FI_ATOMIC_WRITE` of `FI_UINT8` may carry (0: none); with
    /// `FI_ORDER_ATOMIC_WAW` such a write is ordered before a later signal
    /// atomic, which plain writes are not on providers without `FI_ORDER_WAW`.
    byte_write_max: usize,
}

impl NativeAmo {
    /// 32- and 64-bit compare-and-swap exist, so every atomic can be done
    /// (or emulated) with the provider's atomics; without them every
    /// atomic and signal is a message the target applies (`create` checks
    /// that they can be).
    fn complete(&self) -> bool {
        self.cswap[0] && self.cswap[1]
    }
}

struct Raw {
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    ep: *mut fid_ep,
    av: *mut fid_av,
    cq: *mut fid_cq,
    mr: *mut fid_mr,
    /// Registrations of the receive buffers (`FI_MR_LOCAL`).
    rx_mrs: Vec<*mut fid_mr>,
}

/// Shared state of the engine and its progress thread.
struct Inner {
    api: &'static Api,
    raw: Raw,
    my_pe: PeId,
    peers: Vec<Option<Peer>>,
    virt_addr: bool,
    ordered: bool,
    /// RMA transfers are posted in pieces of at most this many bytes
    /// (`SHMEM_ROCE_OFI_CHUNK`: by default [`PIECE`] on manual-progress
    /// providers and the provider's `max_msg_size`, at most [`MAX_CHUNK`],
    /// on auto-progress ones), back to back. Over TCP providers a transfer in one
    /// piece moved only while both sides' threads happened to be inside
    /// libfabric, and its target saw nothing of it until the end (no
    /// completion to keep its progress thread polling); in pieces, each
    /// delivery acknowledgement overlaps the next piece and each piece's
    /// remote CQ data keeps the target polling. Back-to-back 1 MiB puts
    /// between two namespaces, medians of six interleaved rounds, 4 MiB
    /// pieces -> 128 KiB: `net` 1.33 -> 2.48 GB/s, `tcp;ofi_rxm` 2.00 ->
    /// 2.67 (64 KiB: 2.20 and 1.92).
    max_chunk: usize,
    inject_size: usize,
    native: NativeAmo,
    counters: Counters,
    tracks: Mutex<HashMap<u64, Track>>,
    /// Collectives' signals ([`Track::collective`]) not finished yet.
    collective_in_flight: AtomicU64,
    next_id: AtomicU64,
    bounce_bytes: AtomicU64,
    /// When a waiting thread last drove progress ([`Transport::progress`]),
    /// in nanoseconds since `epoch`.
    driven_at: AtomicU64,
    epoch: Instant,
    /// A thread is in [`Inner::try_poll_cq`].
    polling: AtomicBool,
    /// Until when (nanoseconds since `epoch`) the cores count as contended
    /// ([`Inner::pause`]).
    contended_until: AtomicU64,
    /// Spent bounce buffers for reuse (see [`BOUNCE_POOL_MIN`]).
    bounce_pool: Mutex<Vec<Bounce>>,
    wakes: Mutex<VecDeque<(PeId, Spans)>>,
    /// Acknowledgements of signal messages not sent yet: (PE, id).
    acks: Mutex<VecDeque<(PeId, u64)>>,
    /// Answers to atomic messages the provider could not take at once
    /// (peer, id, value), sent by [`Inner::flush_acks`].
    value_acks: Mutex<VecDeque<(PeId, u64, u64)>>,
    /// Entries in `acks` (read without its lock to skip empty flushes).
    acks_queued: AtomicUsize,
    /// The progress thread polls in a loop (within [`HOT`] of its last
    /// completion) and sends queued acknowledgements on every round; when
    /// it does not, a signal message is acknowledged at once.
    hot: AtomicBool,
    /// Put-with-signal data up to this many bytes goes in one signal
    /// message applied by the target's progress thread (0: signals are
    /// provider atomics).
    signal_msg_max: Option<usize>,
    rx: Vec<*mut RxCtx>,
    /// Every local buffer of a data transfer is registered (the provider
    /// requires `FI_MR_LOCAL`, or `SHMEM_ROCE_OFI_MR_LOCAL=1`).
    local_mr: bool,
    /// Descriptor of the heap's registration (buffers inside the heap).
    heap_desc: *mut c_void,
    /// Local registrations must be bound to the endpoint (`FI_MR_ENDPOINT`).
    mr_endpoint: bool,
    /// Next requested key of a local registration.
    next_key: AtomicU64,
    /// Registrations of this process's memory outside the heap that the
    /// peers may read and write ([`Transport::expose_memory`]).
    exposed_mrs: Mutex<Vec<*mut fid_mr>>,
    /// Per PE: the regions outside its heap it exposed.
    exposed: Regions,
    /// This PE's own exposed regions (as PE 0), where atomic messages may
    /// land: known from its own exposure, since a peer that has learnt
    /// them may send before this PE has learnt every card.
    exposed_here: Regions,
    base: *mut u8,
    heap_size: usize,
    link: Duration,
    stopping: AtomicBool,
    sread: bool,
    /// The provider moves data on its own threads (`FI_PROGRESS_AUTO`): a
    /// posted operation may still be queued inside this process on return.
    auto_progress: bool,
    info: String,
}

// SAFETY: the raw libfabric objects are opened with FI_THREAD_SAFE, so any
// thread may call into them; the other raw pointers are the heap (mapped
// for the engine's life) and receive contexts owned by the engine.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Inner {
    fn peer(&self, pe: PeId) -> Result<&Peer> {
        let p = self
            .peers
            .get(pe)
            .and_then(|p| p.as_ref())
            .ok_or_else(|| err(format!("PE {pe} is not reached by the libfabric provider")))?;
        if let Some(why) = p.failed.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(Error::PeerExited { pe, detail: why });
        }
        Ok(p)
    }

    fn lock_tracks(&self) -> MutexGuard<'_, HashMap<u64, Track>> {
        self.tracks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remote(&self, p: &Peer, off: usize) -> u64 {
        if self.virt_addr {
            p.base + off as u64
        } else {
            off as u64
        }
    }

    fn fail_peer(&self, pe: PeId, why: &str) {
        if let Some(Some(p)) = self.peers.get(pe) {
            let mut f = p.failed.lock().unwrap_or_else(|e| e.into_inner());
            if f.is_none() {
                if !self.stopping.load(Ordering::SeqCst) {
                    shmem_log!(Debug, "ROCE/ofi: {why}");
                }
                *f = Some(why.to_string());
            }
        }
    }

    /// Registers a new operation; returns its boxed context.
    fn track(&self, track: Track) -> Box<OpCtx> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if track.collective {
            self.collective_in_flight.fetch_add(1, Ordering::AcqRel);
        } else {
            self.counters.issued.fetch_add(1, Ordering::AcqRel);
        }
        self.lock_tracks().insert(id, track);
        Box::new(OpCtx {
            fictx: fi_context2::default(),
            kind: KIND_TX,
            id,
            operand: 0,
            compare: 0,
            result: 0,
            bounce: Vec::new(),
            mr: ptr::null_mut(),
            bounce_mr: ptr::null_mut(),
            bounce_desc: ptr::null_mut(),
        })
    }

    /// Finishes operation `id` (if the watchdog did not already).
    fn finish(&self, id: u64, result: u64, error: Option<String>) {
        let Some(t) = self.lock_tracks().remove(&id) else {
            return;
        };
        if t.bounce > 0 {
            self.bounce_bytes
                .fetch_sub(t.bounce as u64, Ordering::AcqRel);
        }
        if let Some(Some(p)) = self.peers.get(t.pe) {
            *p.heard.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        }
        match error {
            None => {
                if let Some(o) = &t.out {
                    o.store(result, Ordering::Release);
                }
                if let Some(w) = t.wake {
                    self.queue_wake(t.pe, w);
                }
                t.done.finish_part(Ok(()));
                if t.collective {
                    self.collective_in_flight.fetch_sub(1, Ordering::AcqRel);
                } else {
                    self.counters.complete(None);
                }
            }
            Some(e) => {
                let why = if e.contains(&format!("PE {} ", t.pe)) {
                    e
                } else {
                    format!("operation to PE {} failed: {e}", t.pe)
                };
                self.fail_peer(t.pe, &why);
                t.done.finish_part(Err(Error::PeerExited {
                    pe: t.pe,
                    detail: why.clone(),
                }));
                if t.collective {
                    // Not counted, but the next `quiet` reports it.
                    self.counters.record_error(&why);
                    self.collective_in_flight.fetch_sub(1, Ordering::AcqRel);
                } else {
                    self.counters.complete(Some(&why));
                }
            }
        }
    }

    /// Queues a wake of `pe` for `spans`, into the wake already queued for
    /// `pe` when there is one: the completions one poll reads (a burst of
    /// small puts) then cost one wake message per peer, not one each.
    fn queue_wake(&self, pe: PeId, spans: Spans) {
        let mut q = self.wakes.lock().unwrap_or_else(|e| e.into_inner());
        match q.iter_mut().find(|(p, _)| *p == pe) {
            Some((_, queued)) => merge_spans(queued, &spans),
            None => q.push_back((pe, spans)),
        }
    }

    /// The descriptor a data transfer passes for its local buffer
    /// `addr..addr+len`: none unless every local buffer must be registered;
    /// the heap's for a buffer inside it; else a new registration, which
    /// the operation's context keeps (`ctx.mr`) until it completes.
    fn local_desc(
        &self,
        ctx: &mut OpCtx,
        addr: *const u8,
        len: usize,
    ) -> std::result::Result<*mut c_void, String> {
        if !self.local_mr || len == 0 {
            return Ok(ptr::null_mut());
        }
        let (a, b) = (addr as usize, self.base as usize);
        if a >= b && a.checked_add(len).is_some_and(|e| e <= b + self.heap_size) {
            return Ok(self.heap_desc);
        }
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let (mr, desc) = reg_local(self.api, &self.raw, self.mr_endpoint, key, addr, len)?;
        close(ctx.mr.cast());
        ctx.mr = mr;
        Ok(desc)
    }

    /// Un-registers an operation whose post failed.
    fn unpost(&self, ctx: *mut OpCtx, why: &str) {
        // SAFETY: the provider refused the context: it is ours again.
        let ctx = unsafe { Box::from_raw(ctx) };
        self.finish(ctx.id, 0, Some(why.to_string()));
    }

    /// [`Inner::poll_cq`] without blocking, unless another thread is
    /// polling right now (then 0 at once): threads that poll in a loop
    /// take turns instead of meeting on the provider's locks, where a
    /// contended lock puts one of them to sleep (with the target's progress
    /// thread and its waiting thread both polling, a 1 MiB put measured
    /// 661 us against 513 without the waiting thread's polls, medians of
    /// four noisy runs; taking turns measured 578).
    fn try_poll_cq(&self) -> usize {
        if self
            .polling
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return 0;
        }
        let n = self.poll_cq(None);
        self.polling.store(false, Ordering::Release);
        n
    }

    /// `fi_trywait` on the completion queue: 0 when nothing is pending (and
    /// the provider re-armed its wait descriptor, if it does),
    /// `-FI_EAGAIN` when something is; `None` where the provider has none.
    fn trywait(&self) -> Option<c_int> {
        // SAFETY: the fabric is open for the engine's life.
        let trywait = unsafe { (*(*self.raw.fabric).ops).trywait }?;
        // SAFETY: the completion queue is open for the engine's life; its
        // fid is the first field of fid_cq.
        let mut fids = [unsafe { ptr::addr_of_mut!((*self.raw.cq).fid) }];
        // SAFETY: an open fabric and an array of one open fid.
        Some(unsafe { trywait(self.raw.fabric, fids.as_mut_ptr(), 1) })
    }

    /// Looks at `fd` (the completion queue's wait descriptor) around
    /// `fi_trywait`, for [`WaitFdTrust`].
    fn look_at_wait_fd(&self, fd: c_int) -> FdLook {
        if !readable(fd) || self.trywait() != Some(0) {
            return FdLook::Unknown;
        }
        if readable(fd) {
            FdLook::Stuck
        } else {
            FdLook::Rearmed
        }
    }

    /// Blocks until `fd` (the completion queue's wait descriptor) shows
    /// traffic or `ms` milliseconds pass, once `fi_trywait` says that
    /// nothing is pending; returns whether there is traffic or pending work
    /// (a poll of the completion queue handles either).
    fn wait_traffic(&self, fd: c_int, ms: c_int) -> Traffic {
        match self.trywait() {
            None => return Traffic::Broken("no fi_trywait".into()),
            Some(0) => {}
            Some(r) if r == -FI_EAGAIN => return Traffic::Yes,
            Some(r) => {
                return Traffic::Broken(format!("fi_trywait: {}", self.api.error(r as isize)))
            }
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Traffic::No;
            }
            return Traffic::Broken(format!("poll: {e}"));
        }
        if p.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return Traffic::Broken(format!("poll: revents {:#x}", p.revents));
        }
        if r > 0 {
            Traffic::Yes
        } else {
            Traffic::No
        }
    }

    /// Reads up to a batch of completions; returns how many were handled.
    fn poll_cq(&self, block: Option<c_int>) -> usize {
        let mut entries = [fi_cq_data_entry {
            op_context: ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: ptr::null_mut(),
            data: 0,
        }; 16];
        let cq = self.raw.cq;
        // SAFETY: `cq` is open for the engine's life, in FI_CQ_FORMAT_DATA;
        // `entries` has room for 16 fi_cq_data_entry.
        let n = unsafe {
            match block {
                Some(ms) if self.sread => ((*(*cq).ops).sread)(
                    cq,
                    entries.as_mut_ptr().cast(),
                    entries.len(),
                    ptr::null(),
                    ms,
                ),
                _ => ((*(*cq).ops).read)(cq, entries.as_mut_ptr().cast(), entries.len()),
            }
        };
        if n > 0 {
            for e in &entries[..n as usize] {
                if e.op_context.is_null() && e.flags & FI_REMOTE_CQ_DATA != 0 {
                    // SAFETY: `self.base` is this PE's heap.
                    unsafe { self.on_remote_write(e.data) };
                } else {
                    self.complete_ctx(e.op_context, None);
                }
            }
            return n as usize;
        }
        if n == -(FI_EAVAIL as isize) {
            // SAFETY: zeroed is a valid fi_cq_err_entry to be filled in.
            let mut e: fi_cq_err_entry = unsafe { std::mem::zeroed() };
            // SAFETY: valid CQ and entry.
            let r = unsafe { ((*(*cq).ops).readerr)(cq, &mut e, 0) };
            if r > 0 {
                // SAFETY: valid CQ; err_data is valid until the next read.
                let msg = unsafe {
                    let mut buf = [0 as std::ffi::c_char; 256];
                    let s = ((*(*cq).ops).strerror)(
                        cq,
                        e.prov_errno,
                        e.err_data,
                        buf.as_mut_ptr(),
                        buf.len(),
                    );
                    format!("{} ({})", self.api.error(e.err as isize), cstr(s))
                };
                self.complete_ctx(e.op_context, Some(msg));
                return 1;
            }
        }
        0
    }

    fn complete_ctx(&self, c: *mut c_void, error: Option<String>) {
        if c.is_null() {
            return;
        }
        // SAFETY: every context we post starts with fi_context2 followed by `kind`.
        let kind = unsafe { (*(c as *const OpCtx)).kind };
        if kind == KIND_RX {
            let rx = c as *mut RxCtx;
            if error.is_none() {
                // SAFETY: an RxCtx owned by the engine, its buffer now filled.
                unsafe { self.on_message(&(*rx).buf) };
            }
            if !self.stopping.load(Ordering::SeqCst) {
                self.post_rx(rx);
            }
            return;
        }
        // SAFETY: a TX context boxed by `track` and handed to the provider,
        // which returns it exactly once.
        let mut ctx = unsafe { Box::from_raw(c as *mut OpCtx) };
        if ctx.bounce.capacity() >= BOUNCE_POOL_MIN {
            self.give_bounce(Bounce {
                buf: std::mem::take(&mut ctx.bounce),
                mr: std::mem::replace(&mut ctx.bounce_mr, ptr::null_mut()),
                desc: ctx.bounce_desc,
            });
        }
        if kind == KIND_SIGNAL_SEND && error.is_none() {
            // Sent; the target's acknowledgement finishes the operation.
            return;
        }
        self.finish(ctx.id, ctx.result, error);
    }

    /// A copy of `src` in a bounce buffer, reused from the pool when one
    /// there is large enough; a poolable buffer is registered once when
    /// local buffers must be (its descriptor is then non-null).
    fn take_bounce(&self, src: &[u8]) -> Bounce {
        let empty = || Bounce {
            buf: Vec::new(),
            mr: ptr::null_mut(),
            desc: ptr::null_mut(),
        };
        let mut b = if src.len() >= BOUNCE_POOL_MIN {
            let mut pool = self.bounce_pool.lock().unwrap_or_else(|e| e.into_inner());
            pool.iter()
                .position(|b| b.buf.capacity() >= src.len())
                .map(|k| pool.swap_remove(k))
                .unwrap_or_else(empty)
        } else {
            empty()
        };
        b.buf.clear();
        // Within the capacity of a pooled buffer: no reallocation, so its
        // registration still covers it.
        b.buf.extend_from_slice(src);
        if self.local_mr && b.mr.is_null() && b.buf.capacity() >= BOUNCE_POOL_MIN {
            let key = self.next_key.fetch_add(1, Ordering::Relaxed);
            // A failed registration leaves the per-operation one to try
            // (and report).
            if let Ok((mr, desc)) = reg_local(
                self.api,
                &self.raw,
                self.mr_endpoint,
                key,
                b.buf.as_ptr(),
                b.buf.capacity(),
            ) {
                b.mr = mr;
                b.desc = desc;
            }
        }
        b
    }

    /// Returns a spent bounce buffer to the pool (or frees it and its
    /// registration when the pool is full).
    fn give_bounce(&self, b: Bounce) {
        let mut pool = self.bounce_pool.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = pool.iter().map(|b| b.buf.capacity()).sum();
        if held + b.buf.capacity() <= BOUNCE_POOL_BYTES {
            pool.push(b);
        } else {
            drop(pool);
            close(b.mr.cast());
        }
    }

    /// Handles a received message: a wake rings this PE's waiters on its
    /// spans, a signal message is applied, an acknowledgement finishes the
    /// signal message it names.
    ///
    /// # Safety
    /// `self.base` is this PE's heap.
    unsafe fn on_message(&self, b: &[u8; RX_LEN]) {
        let w = |i| le_word(b, i);
        if w(0) == ACK_MAGIC {
            self.finish(w(1), 0, None);
            return;
        }
        if w(0) == ACK_VALUE_MAGIC {
            self.finish(w(1), w(2), None);
            return;
        }
        if w(0) == ACK_REFUSED_MAGIC {
            self.finish(
                w(1),
                0,
                Some("the target refused an atomic message (a word outside what it exposed, or a library of another version)".into()),
            );
            return;
        }
        if w(0) & 0xffff == AMO_TAG {
            // SAFETY: as for this function.
            unsafe { self.on_amo(b) };
            return;
        }
        if w(0) & 0xffff == SIGNAL_TAG {
            // SAFETY: as for this function.
            unsafe { self.on_signal(b) };
            return;
        }
        if w(0) != WAKE_MAGIC {
            return;
        }
        let mut spans = [Span::bytes(0, 0); 2];
        for (k, s) in spans.iter_mut().enumerate() {
            let (off, len) = (w(1 + 2 * k), w(2 + 2 * k));
            if off
                .checked_add(len)
                .is_some_and(|e| e <= self.heap_size as u64)
            {
                *s = Span::bytes(off as usize, len as usize);
            }
        }
        // SAFETY: our heap starts with its control block.
        unsafe { ring(self.base as *const ControlBlock, &spans) };
    }

    /// Applies an atomic message with a CPU atomic on this PE's heap (so it
    /// is atomic with the atomics of PEs on this node, which are CPU
    /// atomics too), rings the waiters on the word, and answers with the
    /// value the word held before.
    ///
    /// # Safety
    /// `self.base` is this PE's heap.
    unsafe fn on_amo(&self, b: &[u8; RX_LEN]) {
        let from = (le_word(b, 0) >> 32) as usize;
        let seq = le_word(b, 5);
        let mut m = [0u8; AMO_LEN];
        m.copy_from_slice(&b[..AMO_LEN]);
        let Ok(p) = self.peer(from) else {
            shmem_log!(
                Warn,
                "ROCE/ofi: an atomic message from unknown PE {from}; ignored"
            );
            return;
        };
        // In the order the sender numbered them: atomics after atomics are
        // ordered, as on providers that order them.
        let mut r = p.amo_received.lock().unwrap_or_else(|e| e.into_inner());
        if seq != r.0 {
            if seq > r.0 {
                r.1.insert(seq, m);
            }
            return;
        }
        let mut next = Some(m);
        while let Some(m) = next {
            // SAFETY: as for this function.
            unsafe { self.apply_amo(&m) };
            r.0 += 1;
            let want = r.0;
            next = r.1.remove(&want);
        }
    }

    /// Applies one atomic message ([`Inner::on_amo`]).
    ///
    /// # Safety
    /// `self.base` is this PE's heap.
    unsafe fn apply_amo(&self, b: &[u8; AMO_LEN]) {
        let w = |i| le_word(b, i);
        let head = w(0);
        let code = (head >> 16) & 0x7f;
        let exposed = head & AMO_EXPOSED != 0;
        let bytes = (head >> 24) & 0xff;
        let from = (head >> 32) as usize;
        let (id, off, operand, compare) = (w(1), w(2), w(3), w(4));
        let width = match bytes {
            4 => Some(AmoWidth::W32),
            8 => Some(AmoWidth::W64),
            _ => None,
        };
        let op = crate::wire::amo_decode(code, operand, compare);
        let low = shmem_core::heap::RESERVED_BYTES as u64;
        let (Some(width), Some(op)) = (width, op) else {
            shmem_log!(
                Warn,
                "ROCE/ofi: PE {from} sent an atomic message this library does not know (op {code}, {bytes} bytes); refused"
            );
            self.send_refusal(from, id);
            return;
        };
        if exposed {
            let inside =
                off.is_multiple_of(bytes) && self.exposed_here.holding(0, off, bytes).is_some();
            if !inside {
                shmem_log!(
                    Warn,
                    "ROCE/ofi: PE {from} sent an atomic message at {off:#x}, outside what this PE exposed; refused"
                );
                self.send_refusal(from, id);
                return;
            }
            // SAFETY: an aligned word in a region this PE exposed
            // (checked), which the API updates only with CPU atomics;
            // `self.base` is our heap.
            let old = unsafe {
                shmem_core::loadstore::atomic_outside(self.base, off as *mut u8, width, op)
            };
            self.send_value_ack(from, id, old);
            return;
        }
        if off < low
            || off % bytes != 0
            || off
                .checked_add(bytes)
                .is_none_or(|e| e > self.heap_size as u64)
        {
            shmem_log!(
                Warn,
                "ROCE/ofi: PE {from} sent an atomic message outside this PE's heap (offset {off}, {bytes} bytes); refused"
            );
            self.send_refusal(from, id);
            return;
        }
        // The CPU atomic a PE of this node applies, which also rings the
        // waiters on the word.
        // SAFETY: an aligned word inside this PE's heap (checked), which
        // every atomic of the API updates only with CPU atomics.
        let old = unsafe { shmem_core::loadstore::atomic(self.base, off as usize, width, op) };
        self.send_value_ack(from, id, old);
    }

    /// Refuses atomic message `id` of `pe` (best effort: only a library of
    /// another version sends one this one refuses).
    fn send_refusal(&self, pe: PeId, id: u64) {
        let Ok(p) = self.peer(pe) else { return };
        let mut r = [0u8; ACK_LEN];
        put_words(&mut r, &[ACK_REFUSED_MAGIC, id]);
        let ep = self.raw.ep;
        let _ = self.post(pe, || {
            // SAFETY: open endpoint; inject copies the bytes before returning.
            unsafe { ((*(*ep).msg).inject)(ep, r.as_ptr().cast(), ACK_LEN, p.addr) }
        });
    }

    /// Answers atomic message `id` of `pe` with `value` (at once when the
    /// provider takes it, else queued for [`Inner::flush_acks`]).
    fn send_value_ack(&self, pe: PeId, id: u64, value: u64) {
        let Ok(p) = self.peer(pe) else { return };
        let m = value_ack_message(id, value);
        let ep = self.raw.ep;
        // SAFETY: open endpoint; inject copies the bytes before returning.
        let r = unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), ACK_VALUE_LEN, p.addr) };
        if r == -(FI_EAGAIN as isize) {
            self.value_acks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back((pe, id, value));
            self.acks_queued.fetch_add(1, Ordering::SeqCst);
        } else if r != 0 {
            shmem_log!(
                Debug,
                "ROCE/ofi: answering an atomic message of PE {pe} failed: {}",
                self.api.error(r)
            );
        }
    }

    /// Rings the waiters on the heap range a peer's write just filled (the
    /// write's remote CQ data, [`remote_data`]): its completion here comes
    /// once the bytes are in this PE's memory.
    ///
    /// # Safety
    /// `self.base` is this PE's heap.
    unsafe fn on_remote_write(&self, data: u64) {
        let Some((off, len)) = remote_range(data, self.heap_size as u64) else {
            shmem_log!(
                Warn,
                "ROCE/ofi: a write into this PE carried remote CQ data {data:#x} that names no range of its heap; ignored"
            );
            return;
        };
        let spans = [Span::bytes(off as usize, len as usize), Span::bytes(0, 0)];
        // SAFETY: our heap starts with its control block.
        unsafe { ring(self.base as *const ControlBlock, &spans) };
    }

    /// Applies a signal message: its data (when inline) into this PE's
    /// heap, then the signal update (a CPU atomic, like a local signal's),
    /// rings the waiters on both, and acknowledges it to the sender.
    ///
    /// # Safety
    /// `self.base` is this PE's heap.
    unsafe fn on_signal(&self, b: &[u8; RX_LEN]) {
        let w = |i| le_word(b, i);
        let head = w(0);
        let op = (head >> 16) & 0xff;
        let flags = (head >> 24) & 0xff;
        let from = (head >> 32) as usize;
        let (id, dst, len, sig, value) = (w(1), w(2), w(3), w(4), w(5));
        let heap = self.heap_size as u64;
        let inline = flags & SIGNAL_INLINE != 0;
        if flags & SIGNAL_ACK != 0 {
            let at = SIGNAL_HEADER + if inline { len as usize } else { 0 };
            if at + 8 <= RX_LEN {
                self.finish(le_word(&b[at..], 0), 0, None);
            }
        }
        // Below RESERVED_BYTES lives the heap's control block, which no
        // operation of the API may write.
        let low = shmem_core::heap::RESERVED_BYTES as u64;
        let fits = dst.checked_add(len).is_some_and(|e| e <= heap)
            && (len == 0 || dst >= low)
            && (!inline || len as usize <= SIGNAL_MSG_MAX)
            && sig >= low
            && sig % 8 == 0
            && sig.checked_add(8).is_some_and(|e| e <= heap)
            && (op == 1 || op == 2);
        if !fits {
            // Only a mismatched library build sends such a message; say
            // so, and acknowledge it so that the sender does not hang.
            shmem_log!(
                Warn,
                "ROCE/ofi: PE {from} sent a signal message outside this PE's heap (dst {dst}, {len} B, signal at {sig}); ignored"
            );
        } else {
            if inline && len > 0 {
                // SAFETY: `dst..dst+len` is inside this PE's heap (checked);
                // the bytes follow the header in the receive buffer.
                unsafe {
                    ptr::copy_nonoverlapping(
                        b.as_ptr().add(SIGNAL_HEADER),
                        self.base.add(dst as usize),
                        len as usize,
                    );
                }
            }
            // SAFETY: an aligned word inside this PE's heap (checked), which
            // other PEs' signals also update only atomically.
            let word = unsafe { &*(self.base.add(sig as usize) as *const AtomicU64) };
            // SeqCst: the data copied above is visible before the signal.
            if op == 1 {
                word.store(value, Ordering::SeqCst);
            } else {
                word.fetch_add(value, Ordering::SeqCst);
            }
            // Queue the acknowledgement before waking anyone here: a woken
            // PE that finalizes and exits at once sends it on its way out
            // (the sender's quiet waits for it).
            if flags & SIGNAL_COLLECTIVE != 0 {
                self.queue_ack(from, id);
            } else {
                self.defer_ack(from, id);
            }
            let spans = [
                Span::bytes(sig as usize, 8),
                Span::bytes(dst as usize, len as usize),
            ];
            // SAFETY: our heap starts with its control block.
            unsafe { ring(self.base as *const ControlBlock, &spans) };
            return;
        }
        self.send_ack(from, id);
    }

    /// Acknowledges signal message `id` to `pe` (at once when the provider
    /// takes it, else queued for [`Inner::flush_wakes`]).
    fn send_ack(&self, pe: PeId, id: u64) {
        let Ok(p) = self.peer(pe) else { return };
        let m = ack_message(id);
        let ep = self.raw.ep;
        // SAFETY: open endpoint; inject copies the bytes before returning.
        let r = unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), ACK_LEN, p.addr) };
        if r == -(FI_EAGAIN as isize) {
            self.acks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back((pe, id));
            self.acks_queued.fetch_add(1, Ordering::SeqCst);
        } else if r != 0 {
            // The link to the sender is gone: its operation fails there by
            // the link timeout, as any operation to a lost peer does.
            shmem_log!(
                Debug,
                "ROCE/ofi: acknowledging a signal message to PE {pe} failed: {}",
                self.api.error(r)
            );
        }
    }

    /// Acknowledges signal message `id` to `pe` soon rather than now, when
    /// the progress thread polls in a loop: it sends the acknowledgement on
    /// its next round, or the thread that applied the message does on its
    /// next poll of the queue, after whatever it did in between. A waiting
    /// thread that applied a signal it waited for thus answers it (the
    /// next hop of a ping-pong) before acknowledging it: an 8-byte
    /// put-with-signal ping-pong over `tcp;ofi_rxm`, three interleaved
    /// runs, measured 27-34 us with the acknowledgement first and 13-14 us
    /// with it deferred. When the progress thread sleeps, the
    /// acknowledgement leaves at once (nobody would send it soon).
    fn defer_ack(&self, pe: PeId, id: u64) {
        if !self.hot.load(Ordering::SeqCst) {
            return self.send_ack(pe, id);
        }
        self.queue_ack(pe, id);
        // The progress thread clears `hot` and then looks at the queue: it
        // either sees this entry, or this load sees `hot` cleared.
        if !self.hot.load(Ordering::SeqCst) {
            self.flush_acks();
        }
    }

    /// Queues the acknowledgement of signal message `id` for `pe`, sent by
    /// the next message to `pe` or the next flush.
    fn queue_ack(&self, pe: PeId, id: u64) {
        self.acks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back((pe, id));
        self.acks_queued.fetch_add(1, Ordering::SeqCst);
    }

    /// Takes a queued acknowledgement owed to `pe`, for a message to `pe`
    /// that carries it ([`SIGNAL_ACK`]).
    fn take_ack(&self, pe: PeId) -> Option<u64> {
        if self.acks_queued.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut q = self.acks.lock().unwrap_or_else(|e| e.into_inner());
        let at = q.iter().position(|&(p, _)| p == pe)?;
        let (_, id) = q.remove(at)?;
        self.acks_queued.fetch_sub(1, Ordering::SeqCst);
        Some(id)
    }

    /// Sends the acknowledgements queued by [`Inner::send_ack`] and
    /// [`Inner::defer_ack`]; unlike a wake, an acknowledgement is never
    /// dropped while its peer lives (the sender's `quiet` waits for it).
    fn flush_acks(&self) {
        while self.acks_queued.load(Ordering::SeqCst) > 0 {
            let next = self
                .value_acks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            let Some((pe, id, value)) = next else { break };
            self.acks_queued.fetch_sub(1, Ordering::SeqCst);
            let Ok(p) = self.peer(pe) else { continue };
            let m = value_ack_message(id, value);
            let ep = self.raw.ep;
            let _ = self.post(pe, || {
                // SAFETY: open endpoint; inject copies the bytes before returning.
                unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), ACK_VALUE_LEN, p.addr) }
            });
        }
        while self.acks_queued.load(Ordering::SeqCst) > 0 {
            let next = {
                let mut q = self.acks.lock().unwrap_or_else(|e| e.into_inner());
                let next = q.pop_front();
                if next.is_some() {
                    self.acks_queued.fetch_sub(1, Ordering::SeqCst);
                }
                next
            };
            let Some((pe, id)) = next else { return };
            let Ok(p) = self.peer(pe) else { continue };
            let m = ack_message(id);
            let ep = self.raw.ep;
            let _ = self.post(pe, || {
                // SAFETY: open endpoint; inject copies the bytes before returning.
                unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), ACK_LEN, p.addr) }
            });
        }
    }

    fn post_rx(&self, rx: *mut RxCtx) {
        let ep = self.raw.ep;
        for _ in 0..1000 {
            // SAFETY: open endpoint; the buffer lives in an RxCtx the engine owns
            // until the endpoint is closed.
            let r = unsafe {
                ((*(*ep).msg).recv)(
                    ep,
                    (*rx).buf.as_mut_ptr().cast(),
                    RX_LEN,
                    (*rx).desc,
                    u64::MAX,
                    rx.cast(),
                )
            };
            if r != -(FI_EAGAIN as isize) {
                return;
            }
            self.poll_cq(None);
        }
    }

    /// Sends the queued acknowledgements, then the queued wake messages.
    fn flush_wakes(&self) {
        self.flush_acks();
        self.flush_wake_msgs();
    }

    /// Sends the queued wake messages (best effort: a wake is a hint).
    fn flush_wake_msgs(&self) {
        loop {
            let next = self
                .wakes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            let Some((pe, spans)) = next else { return };
            let Ok(p) = self.peer(pe) else { continue };
            let mut m = [0u8; WAKE_LEN];
            put_words(
                &mut m,
                &[WAKE_MAGIC, spans[0].0, spans[0].1, spans[1].0, spans[1].1],
            );
            let ep = self.raw.ep;
            for _ in 0..100 {
                // SAFETY: open endpoint; inject copies the 40 bytes before returning.
                let r = unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), WAKE_LEN, p.addr) };
                if r != -(FI_EAGAIN as isize) {
                    break;
                }
                self.poll_cq(None);
            }
        }
    }

    /// Fails operations whose peer has been silent for the link timeout.
    fn watchdog(&self) {
        let now = Instant::now();
        let stale: Vec<(u64, PeId)> = {
            let t = self.lock_tracks();
            t.iter()
                .filter(|(_, t)| {
                    self.peers
                        .get(t.pe)
                        .and_then(|p| p.as_ref())
                        .is_some_and(|p| {
                            let heard = *p.heard.lock().unwrap_or_else(|e| e.into_inner());
                            now.duration_since(heard.max(t.posted)) >= self.link
                        })
                })
                .map(|(id, t)| (*id, t.pe))
                .collect()
        };
        for (id, pe) in stale {
            let why = format!(
                "PE {pe} did not answer for {:.1} s (link cut, stopped or wedged; SHMEM_LINK_TIMEOUT)",
                self.link.as_secs_f64()
            );
            self.fail_peer(pe, &why);
            self.finish(id, 0, Some(why));
        }
    }

    /// Waits for `done`, driving progress meanwhile: polls the completion
    /// queue, yielding the core between polls, then sleeping briefly (some
    /// providers do not wake a thread blocked in `fi_cq_sread` promptly, so
    /// the waiting thread keeps polling; the watchdog ends the wait).
    fn wait(&self, done: &Completion) -> Result<()> {
        self.progress_until(|| done.is_done());
        done.wait()
    }

    /// Lets other threads run between polls that found nothing. On an idle
    /// machine a yield returns at once; where other processes keep the
    /// cores busy, one yield hands the core to them for a whole time slice
    /// (milliseconds): an 8-byte get from a PE asleep in a barrier took
    /// 2.1-2.4 ms with two busy loops on this 2-core VM, against 12 us
    /// without. So once a yield took longer than [`SLOW_YIELD`], the
    /// engine's threads sleep [`CONTENDED_SLEEP`] between polls instead
    /// for [`CONTENDED_FOR`] (a thread that wakes from a sleep gets the
    /// core back at once): 158-191 us per get under the same load. The
    /// progress thread sleeps so only while no waiting thread of its PE
    /// drives the provider (a barrier's does): when it slept then too, a
    /// 1 + 1 barrier under the same load went from 15-44 to 20-47 us.
    /// Blocking on the completion queue's wait descriptor instead of
    /// sleeping measured 1-3.6 ms per get (it slept out its timeout).
    fn pause(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        if now < self.contended_until.load(Ordering::Relaxed) {
            std::thread::sleep(CONTENDED_SLEEP);
            return;
        }
        let t = Instant::now();
        std::thread::yield_now();
        if t.elapsed() > SLOW_YIELD {
            self.contended_until
                .store(now + CONTENDED_FOR.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// Drives progress until `done()`: polls the completion queue, yielding
    /// the core between empty polls for 200 us, then sleeping 20 us (200 us
    /// after 10 ms); then sends the wake messages the completions owe.
    fn progress_until(&self, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            if self.try_poll_cq() > 0 {
                continue;
            }
            let t = start.elapsed();
            if t < Duration::from_micros(200) {
                self.pause();
            } else {
                std::thread::sleep(Duration::from_micros(if t < Duration::from_millis(10) {
                    20
                } else {
                    200
                }));
            }
        }
        self.flush_wakes();
    }

    /// Posts with retries while the provider asks for progress (`-FI_EAGAIN`),
    /// for at most the link timeout.
    fn post(&self, pe: PeId, mut f: impl FnMut() -> isize) -> std::result::Result<(), String> {
        let start = Instant::now();
        loop {
            let r = f();
            if r == 0 {
                return Ok(());
            }
            if r != -(FI_EAGAIN as isize) {
                return Err(format!("posting to PE {pe} failed: {}", self.api.error(r)));
            }
            if start.elapsed() >= self.link {
                return Err(format!(
                    "PE {pe}: the provider accepted no new operation for {:.1} s (SHMEM_LINK_TIMEOUT)",
                    self.link.as_secs_f64()
                ));
            }
            if self.try_poll_cq() == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// The engine.
pub struct Ofi {
    inner: Arc<Inner>,
    reach: Vec<bool>,
    /// Non-fetching atomics return once posted ([`Transport::atomic_post`]):
    /// the provider orders atomics after atomics and progresses manually.
    post_amos: bool,
    /// Per peer: posted non-fetching atomics not yet complete (counted up
    /// before each is posted, down by its completion), so that a later
    /// write, read or signal message to that peer (which the provider does
    /// not order after atomics) first waits for them.
    amo_in_flight: Arc<Vec<AtomicU64>>,
    /// Atomics go as messages that the target applies with CPU atomics
    /// (see [`PeerCard::amo_msg`]).
    amo_msg: bool,
    /// Blocking puts of at least this many bytes skip the bounce copy and
    /// wait for their delivery (`SHMEM_ROCE_OFI_DIRECT_PUT`; 0: never).
    direct_put: usize,
    progress: Mutex<Option<JoinHandle<()>>>,
    _heap: Arc<dyn shmem_core::Heap>,
}

impl std::fmt::Debug for Ofi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ofi")
            .field("my_pe", &self.inner.my_pe)
            .field("info", &self.inner.info)
            .finish()
    }
}

fn check(api: &Api, what: &str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(err(format!("{what} failed: {}", api.error(rc as isize))))
    }
}

fn close(f: *mut fid) {
    if !f.is_null() {
        // SAFETY: an open libfabric object, closed once.
        unsafe { ((*(*f).ops).close)(f) };
    }
}

impl Raw {
    fn close_all(&mut self) {
        close(self.ep.cast());
        for m in self.rx_mrs.drain(..) {
            close(m.cast());
        }
        close(self.mr.cast());
        close(self.av.cast());
        close(self.cq.cast());
        close(self.domain.cast());
        close(self.fabric.cast());
        *self = Raw::null();
    }
    fn null() -> Raw {
        Raw {
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            ep: ptr::null_mut(),
            av: ptr::null_mut(),
            cq: ptr::null_mut(),
            mr: ptr::null_mut(),
            rx_mrs: Vec::new(),
        }
    }
}

/// Registers `len` bytes at `addr` for local use in data transfers (what
/// providers with `FI_MR_LOCAL` require of every local buffer); returns
/// the region and its descriptor.
fn reg_local(
    api: &Api,
    raw: &Raw,
    bind_ep: bool,
    key: u64,
    addr: *const u8,
    len: usize,
) -> std::result::Result<(*mut fid_mr, *mut c_void), String> {
    let access = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    // SAFETY: as for this function.
    let mr = unsafe { register(api, raw, bind_ep, key, addr, len, access, "local buffer") }?;
    // SAFETY: an open region; fi_mr_desc reads this field.
    Ok((mr, unsafe { (*mr).mem_desc }))
}

/// `fi_mr_reg` of `len` bytes at `addr` with `access` (and its binding to
/// the endpoint where the provider wants that); `what` names it in errors.
///
/// # Safety
/// `addr..addr+len` stays mapped until the region is closed.
#[allow(clippy::too_many_arguments)]
unsafe fn register(
    api: &Api,
    raw: &Raw,
    bind_ep: bool,
    key: u64,
    addr: *const u8,
    len: usize,
    access: u64,
    what: &str,
) -> std::result::Result<*mut fid_mr, String> {
    let mut mr: *mut fid_mr = ptr::null_mut();
    // SAFETY: open domain; `addr..addr+len` is memory the caller keeps
    // alive until it closes the region.
    let rc = unsafe {
        ((*(*raw.domain).mr).reg)(
            raw.domain.cast(),
            addr.cast(),
            len,
            access,
            0,
            key,
            0,
            &mut mr,
            ptr::null_mut(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "fi_mr_reg of a {len}-byte {what} failed: {}",
            api.error(rc as isize)
        ));
    }
    if bind_ep {
        let f = mr.cast::<fid>();
        // SAFETY: the region just opened and the open endpoint.
        let rc = unsafe {
            let rc = ((*(*f).ops).bind)(f, raw.ep.cast(), 0);
            if rc == 0 {
                ((*(*f).ops).control)(f, FI_ENABLE, ptr::null_mut())
            } else {
                rc
            }
        };
        if rc != 0 {
            close(f);
            return Err(format!(
                "binding a {what}'s registration to the endpoint failed: {}",
                api.error(rc as isize)
            ));
        }
    }
    Ok(mr)
}

struct Opened {
    raw: Raw,
    provider: String,
    fabric: String,
    domain: String,
    mr_mode: c_int,
    ordered: bool,
    /// Atomics execute in order after earlier atomics (`FI_ORDER_ATOMIC_RAW`
    /// and `FI_ORDER_ATOMIC_WAW`).
    atomics_ordered: bool,
    max_chunk: usize,
    inject_size: usize,
    progress: c_int,
    native: NativeAmo,
    sread: bool,
    wait_fd: Option<c_int>,
    /// Whether the progress thread starts out trusting the completion
    /// queue's wait descriptor ([`WaitFdTrust`]).
    wait_fd_trusted: bool,
    addr: Vec<u8>,
    /// Bytes of remote CQ data the provider carries with a write.
    cq_data_size: usize,
}

/// Opens fabric, domain, CQ, AV, endpoint and the heap's MR.
fn open(api: &Api, info: *mut fi_info, base: *mut u8, size: usize) -> Result<Opened> {
    let mut raw = Raw::null();
    let r = (|| -> Result<Opened> {
        // SAFETY: `info` is a node of a live fi_getinfo list; every object
        // is opened through the ops tables of its parent, with out-pointers
        // to fields of `raw`.
        unsafe {
            let i = &*info;
            let fa = &*i.fabric_attr;
            let da = &*i.domain_attr;
            let ea = &*i.ep_attr;
            let ta = &*i.tx_attr;
            let provider = cstr(fa.prov_name);
            check(
                api,
                "fi_fabric",
                (api.fabric)(i.fabric_attr, &mut raw.fabric, ptr::null_mut()),
            )?;
            check(
                api,
                "fi_domain",
                ((*(*raw.fabric).ops).domain)(raw.fabric, info, &mut raw.domain, ptr::null_mut()),
            )?;
            let mut cq_attr = fi_cq_attr {
                size: 0,
                flags: 0,
                format: FI_CQ_FORMAT_DATA,
                wait_obj: FI_WAIT_UNSPEC,
                signaling_vector: 0,
                wait_cond: FI_CQ_COND_NONE,
                wait_set: ptr::null_mut(),
            };
            // The first wait object the provider takes: a file descriptor
            // (the progress thread polls it, and learns that traffic
            // arrived even when that traffic makes no completion here, a
            // peer's read of this PE's memory: it then stays awake for what
            // follows), any (it blocks in fi_cq_sread), or none (it sleeps
            // between polls).
            let has_trywait = (*(*raw.fabric).ops).trywait.is_some();
            let mut wait_objs = vec![FI_WAIT_UNSPEC, FI_WAIT_NONE];
            if has_trywait {
                wait_objs.insert(0, FI_WAIT_FD);
            }
            let mut opened = -1;
            for &w in &wait_objs {
                cq_attr.wait_obj = w;
                raw.cq = ptr::null_mut();
                opened = ((*(*raw.domain).ops).cq_open)(
                    raw.domain,
                    &mut cq_attr,
                    &mut raw.cq,
                    ptr::null_mut(),
                );
                if opened == 0 {
                    break;
                }
            }
            check(api, "fi_cq_open", opened)?;
            let sread = cq_attr.wait_obj != FI_WAIT_NONE;
            let mut wait_fd = None;
            if cq_attr.wait_obj == FI_WAIT_FD {
                let mut fd: c_int = -1;
                let got = ((*(*raw.cq).fid.ops).control)(
                    &mut (*raw.cq).fid,
                    FI_GETWAIT,
                    (&mut fd as *mut c_int).cast(),
                );
                if got == 0 && fd >= 0 {
                    wait_fd = Some(fd);
                }
            }
            let mut av_attr = fi_av_attr {
                type_: if da.av_type == FI_AV_MAP {
                    FI_AV_MAP
                } else {
                    FI_AV_TABLE
                },
                rx_ctx_bits: 0,
                count: 0,
                ep_per_node: 0,
                name: ptr::null(),
                map_addr: ptr::null_mut(),
                flags: 0,
            };
            check(
                api,
                "fi_av_open",
                ((*(*raw.domain).ops).av_open)(
                    raw.domain,
                    &mut av_attr,
                    &mut raw.av,
                    ptr::null_mut(),
                ),
            )?;
            check(
                api,
                "fi_endpoint",
                ((*(*raw.domain).ops).endpoint)(raw.domain, info, &mut raw.ep, ptr::null_mut()),
            )?;
            let ep_fid = raw.ep.cast::<fid>();
            let bind = (*(*ep_fid).ops).bind;
            check(
                api,
                "fi_ep_bind(cq)",
                bind(ep_fid, raw.cq.cast(), FI_TRANSMIT | FI_RECV),
            )?;
            check(api, "fi_ep_bind(av)", bind(ep_fid, raw.av.cast(), 0))?;
            check(
                api,
                "fi_enable",
                ((*(*ep_fid).ops).control)(ep_fid, FI_ENABLE, ptr::null_mut()),
            )?;
            let mr_mode = da.mr_mode;
            check(
                api,
                "fi_mr_reg(symmetric heap)",
                ((*(*raw.domain).mr).reg)(
                    raw.domain.cast(),
                    base as *const c_void,
                    size,
                    FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                    0,
                    1,
                    0,
                    &mut raw.mr,
                    ptr::null_mut(),
                ),
            )?;
            if mr_mode & FI_MR_ENDPOINT != 0 {
                let mr_fid = raw.mr.cast::<fid>();
                check(
                    api,
                    "fi_mr_bind",
                    ((*(*mr_fid).ops).bind)(mr_fid, ep_fid, 0),
                )?;
                check(
                    api,
                    "fi_mr_enable",
                    ((*(*mr_fid).ops).control)(mr_fid, FI_ENABLE, ptr::null_mut()),
                )?;
            }
            let mut addr = vec![0u8; 256];
            let mut len = addr.len();
            let getname = (*(*raw.ep).cm).getname;
            let mut rc = getname(ep_fid, addr.as_mut_ptr().cast(), &mut len);
            if rc != 0 && len > addr.len() {
                addr.resize(len, 0);
                rc = getname(ep_fid, addr.as_mut_ptr().cast(), &mut len);
            }
            check(api, "fi_getname", rc)?;
            addr.truncate(len);
            let q = |dt: c_int, op: c_int, flags: u64| {
                // SAFETY: open domain; attr is written by the provider.
                let mut a = fi_atomic_attr { count: 0, size: 0 };
                ((*(*raw.domain).ops).query_atomic)(raw.domain, dt, op, &mut a, flags) == 0
                    && a.count >= 1
            };
            let both = |op: c_int, flags: u64| [q(FI_UINT32, op, flags), q(FI_UINT64, op, flags)];
            let fetch = 1u64 << 58;
            let compare = 1u64 << 59;
            let native = NativeAmo {
                read: both(FI_ATOMIC_READ, fetch),
                write: both(FI_ATOMIC_WRITE, fetch),
                sum: both(FI_SUM, fetch),
                band: both(FI_BAND, fetch),
                bor: both(FI_BOR, fetch),
                bxor: both(FI_BXOR, fetch),
                cswap: both(FI_CSWAP, compare),
                signal_set: q(FI_UINT64, FI_ATOMIC_WRITE, 0),
                signal_add: q(FI_UINT64, FI_SUM, 0),
                byte_write_max: {
                    let mut a = fi_atomic_attr { count: 0, size: 0 };
                    let rc = ((*(*raw.domain).ops).query_atomic)(
                        raw.domain,
                        FI_UINT8,
                        FI_ATOMIC_WRITE,
                        &mut a,
                        0,
                    );
                    if rc == 0 && a.size == 1 && ta.msg_order & FI_ORDER_ATOMIC_WAW != 0 {
                        a.count.min(4096)
                    } else {
                        0
                    }
                },
            };
            // libfabric's own TCP RDM endpoint (`net` in 1.17, `tcp` from
            // 1.18) claims automatic progress but in 1.17 runs its thread
            // only for wait objects other than a file descriptor: with ours,
            // data moves only inside libfabric calls (later versions start
            // it for a descriptor too; driving it as well costs only polls).
            let xnet = ea.protocol == FI_PROTO_XNET;
            let progress = if xnet && wait_fd.is_some() {
                FI_PROGRESS_MANUAL
            } else {
                da.data_progress
            };
            Ok(Opened {
                provider,
                fabric: cstr(fa.name),
                domain: cstr(da.name),
                mr_mode,
                // Signal and atomic messages are applied by the target's
                // threads, not in the stream's order: with them the
                // provider's write ordering does not carry over.
                ordered: ta.msg_order & FI_ORDER_WAW != 0 && native.complete(),
                atomics_ordered: ta.msg_order & (FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW)
                    == (FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW),
                // The provider's limit (0: none stated), at most MAX_CHUNK.
                max_chunk: match ea.max_msg_size {
                    0 => MAX_CHUNK,
                    m => m.min(MAX_CHUNK),
                },
                inject_size: ta.inject_size,
                progress,
                native,
                sread,
                wait_fd,
                // 1.17's does not re-arm it in fi_trywait.
                wait_fd_trusted: !xnet,
                addr,
                cq_data_size: da.cq_data_size,
                raw: Raw::null(),
            })
        }
    })();
    match r {
        Ok(mut o) => {
            o.raw = raw;
            Ok(o)
        }
        Err(e) => {
            raw.close_all();
            Err(e)
        }
    }
}

impl Ofi {
    /// Builds the engine (collective): opens the provider, registers the
    /// heap, exchanges addresses and keys in one allgather, fills the
    /// address vector and starts the progress thread.
    ///
    /// # Errors
    /// libfabric missing or without a usable provider, or any setup call
    /// failing (the message names the call and the provider's reason).
    pub fn create(init: &TransportInit<'_>, reach: Vec<bool>) -> Result<Ofi> {
        let bs = init.bootstrap;
        let (me, n) = (bs.rank(), bs.size());
        let heap = init.heap.clone();
        let base = heap.base().as_ptr();
        let heap_size = heap.size();
        let unavailable = |reason: String| Error::EngineUnavailable {
            requested: "ROCE (SHMEM_ROCE_PROVIDER=ofi)".into(),
            reason,
            available: shmem_core::transport::registered_names(),
        };
        let signal_msg = init.config.var::<u64>("SHMEM_ROCE_OFI_SIGNAL_MSG")?;
        let remote_data_wanted = init.config.var::<u64>("SHMEM_ROCE_OFI_REMOTE_DATA")? != 0;
        let amo_msg_wanted = init.config.var::<u64>("SHMEM_ROCE_OFI_AMO_MSG")? != 0;
        let mr_local_forced = init.config.var::<u64>("SHMEM_ROCE_OFI_MR_LOCAL")? != 0;
        let direct_put = init
            .config
            .var::<shmem_core::config::ByteSize>("SHMEM_ROCE_OFI_DIRECT_PUT")?
            .0;
        let piece = match init.config.var::<String>("SHMEM_ROCE_OFI_CHUNK")?.trim() {
            t if t.eq_ignore_ascii_case("auto") => None,
            t => Some(
                <shmem_core::config::ByteSize as shmem_core::config::ConfigValue>::parse(t)
                    .map_err(|reason| Error::Config {
                        name: "SHMEM_ROCE_OFI_CHUNK",
                        value: t.to_string(),
                        reason,
                    })?
                    .0,
            ),
        };
        let api = Api::load().map_err(unavailable)?;
        let node = bs.local_ip();
        let opened = {
            let list = getinfo(api, node).map_err(unavailable)?;
            let info = pick(&list).map_err(unavailable)?;
            open(api, info, base, heap_size)?
        };
        let mut raw = opened.raw;
        // Heap ranges travel as 40 bits of offset and 24 of length.
        let remote_data = remote_data_wanted
            && opened.cq_data_size >= 8
            && (heap_size as u64) <= REMOTE_DATA_MAX_HEAP;
        // Atomic messages need signals as messages (their answers ride the
        // same machinery) and room for one in an inject.
        let amo_msg_possible = signal_msg > 0 && opened.inject_size >= AMO_LEN.max(ACK_VALUE_LEN);
        if !(opened.native.complete() || (amo_msg_wanted && amo_msg_possible)) {
            raw.close_all();
            return Err(unavailable(format!(
                "provider {} has no 32- and 64-bit compare-and-swap (fi_query_atomic), so its atomics and signals must travel as messages, {}",
                opened.provider,
                if !amo_msg_wanted {
                    "which SHMEM_ROCE_OFI_AMO_MSG=0 forbids".to_string()
                } else if signal_msg == 0 {
                    "which SHMEM_ROCE_OFI_SIGNAL_MSG=0 forbids".to_string()
                } else {
                    format!(
                        "which need an inject size of {} B (it has {})",
                        AMO_LEN.max(ACK_VALUE_LEN),
                        opened.inject_size
                    )
                }
            )));
        }
        let card = PeerCard {
            provider: opened.provider.clone(),
            addr: opened.addr.clone(),
            // SAFETY: an open MR (fi_mr_key reads this field).
            key: unsafe { (*raw.mr).key },
            base: base as u64,
            size: heap_size as u64,
            signal_msg: !opened.ordered && signal_msg > 0,
            remote_data,
            // Where signals are messages (software providers without
            // write-after-write ordering, whose atomics the target's
            // threads execute anyway) and those threads are ours.
            // Without native atomics they are messages on any provider.
            amo_msg: amo_msg_wanted
                && amo_msg_possible
                && (!opened.native.complete()
                    || (!opened.ordered && opened.progress == FI_PROGRESS_MANUAL)),
        };
        let setup = || -> Result<Vec<Option<Peer>>> {
            let bytes = postcard::to_stdvec(&card)
                .map_err(|e| err(format!("encoding the endpoint card: {e}")))?;
            let all = bs.allgather(&bytes)?;
            let mut cards = Vec::with_capacity(n);
            for (pe, b) in all.iter().enumerate() {
                let c: PeerCard = postcard::from_bytes(b)
                    .map_err(|e| err(format!("PE {pe} sent a bad endpoint card: {e}")))?;
                if c.provider != card.provider {
                    return Err(err(format!(
                        "PE {pe} uses libfabric provider {:?}, this PE {:?} (set FI_PROVIDER alike on every node)",
                        c.provider, card.provider
                    )));
                }
                if c.signal_msg != card.signal_msg {
                    return Err(err(format!(
                        "PE {pe} has SHMEM_ROCE_OFI_SIGNAL_MSG {} 0, this PE {} 0 (set it alike on every node: signals sent as messages and as provider atomics are not atomic with each other)",
                        if c.signal_msg { ">" } else { "=" },
                        if card.signal_msg { ">" } else { "=" },
                    )));
                }
                if c.amo_msg != card.amo_msg {
                    return Err(err(format!(
                        "PE {pe} {} atomics as messages, this PE {} (set SHMEM_ROCE_OFI_AMO_MSG and SHMEM_ROCE_OFI_SIGNAL_MSG alike on every node, with the same FI_PROVIDER: atomics applied by the target's CPU and by the provider are not atomic with each other on every fabric)",
                        if c.amo_msg { "sends" } else { "does not send" },
                        if card.amo_msg { "does" } else { "does not" },
                    )));
                }
                if c.size != card.size {
                    return Err(err(format!(
                        "PE {pe} registered {} bytes, ours is {heap_size}",
                        c.size
                    )));
                }
                cards.push(c);
            }
            let mut addrs = vec![u64::MAX; n];
            for (pe, c) in cards.iter().enumerate() {
                // SAFETY: open AV; the address bytes are the peer's fi_getname
                // output; one fi_addr_t is written.
                let rc = unsafe {
                    ((*(*raw.av).ops).insert)(
                        raw.av,
                        c.addr.as_ptr().cast(),
                        1,
                        &mut addrs[pe],
                        0,
                        ptr::null_mut(),
                    )
                };
                if rc != 1 {
                    return Err(err(format!(
                        "fi_av_insert of PE {pe}'s address failed: {}",
                        api.error(rc as isize)
                    )));
                }
            }
            Ok((0..n)
                .map(|pe| {
                    (reach[pe] || pe == me).then(|| Peer {
                        addr: addrs[pe],
                        base: cards[pe].base,
                        key: cards[pe].key,
                        remote_data: remote_data && cards[pe].remote_data,
                        amo_sent: Mutex::new(0),
                        amo_received: Mutex::new((0, std::collections::BTreeMap::new())),
                        failed: Mutex::new(None),
                        heard: Mutex::new(Instant::now()),
                    })
                })
                .collect())
        };
        let peers = match setup() {
            Ok(p) => p,
            Err(e) => {
                raw.close_all();
                return Err(e);
            }
        };
        // Providers that do not order writes after writes pay a round trip
        // (or a second message) for every put-with-signal's signal: there
        // the data and the signal go as one message instead.
        let signal_msg_max = if opened.ordered {
            None
        } else {
            (signal_msg > 0).then(|| (signal_msg as usize).min(SIGNAL_MSG_MAX))
        };
        // Transfers go in pieces of at most SHMEM_ROCE_OFI_CHUNK (see
        // `Inner::max_chunk`).
        let max_chunk = match piece {
            // Auto-progress providers move data on their own threads, which
            // pieces do not help, and `sockets` stalled with hundreds of
            // pieces in flight each way (4 KiB pieces of a 3 MiB exchange:
            // a peer silent for the link timeout in one run of three).
            None if opened.progress == FI_PROGRESS_AUTO => opened.max_chunk,
            None => PIECE.min(opened.max_chunk),
            Some(0) => opened.max_chunk,
            Some(p) => p.max(4096).min(opened.max_chunk),
        };
        let info = format!(
            "provider {}, fabric {}, domain {}, MR mode {}, {} progress (idle progress thread {}), {}, max transfer {} B (posted in pieces of {} B), inject {} B, {}",
            opened.provider,
            opened.fabric,
            opened.domain,
            mr_mode_names(opened.mr_mode),
            if opened.progress == FI_PROGRESS_MANUAL { "manual" } else { "auto" },
            match (opened.progress == FI_PROGRESS_MANUAL, opened.wait_fd, opened.sread) {
                (true, Some(_), _) => "polls the CQ's wait fd",
                (true, None, true) => "blocks in fi_cq_sread",
                _ => "sleeps between polls",
            },
            if opened.ordered {
                "writes ordered (FI_ORDER_WAW)".to_string()
            } else if let Some(max) = signal_msg_max {
                format!(
                    "writes unordered (signals as messages applied by the target, with put-with-signal data up to {max} B)"
                )
            } else if opened.native.byte_write_max > 0 {
                format!(
                    "writes unordered (put-with-signal data up to {} B as ordered byte atomics, larger waits for delivery)",
                    opened.native.byte_write_max
                )
            } else {
                "writes unordered (signals wait for delivery)".to_string()
            },
            opened.max_chunk,
            max_chunk,
            opened.inject_size,
            if remote_data {
                "writes wake their target through remote CQ data"
            } else {
                "writes wake their target with a message"
            }
        );
        let rx: Vec<*mut RxCtx> = (0..RX_BUFFERS)
            .map(|_| {
                Box::into_raw(Box::new(RxCtx {
                    fictx: fi_context2::default(),
                    kind: KIND_RX,
                    buf: [0; RX_LEN],
                    desc: ptr::null_mut(),
                }))
            })
            .collect();
        // Providers with FI_MR_LOCAL (verbs, for one) take only registered
        // local buffers: the heap is, the receive buffers are registered
        // here, and every other buffer of a data transfer per operation.
        let local_mr = opened.mr_mode & FI_MR_LOCAL != 0 || mr_local_forced;
        let mr_endpoint = opened.mr_mode & FI_MR_ENDPOINT != 0;
        // Requested keys of local registrations (the heap's is 1).
        let mut next_key = 1 << 20;
        if local_mr {
            for &r in &rx {
                // SAFETY: a live receive context owned here.
                let buf = unsafe { (*r).buf.as_ptr() };
                match reg_local(api, &raw, mr_endpoint, next_key, buf, RX_LEN) {
                    Ok((mr, desc)) => {
                        raw.rx_mrs.push(mr);
                        // SAFETY: as above.
                        unsafe { (*r).desc = desc };
                    }
                    Err(why) => {
                        raw.close_all();
                        for &r in &rx {
                            // SAFETY: never posted; ours alone.
                            drop(unsafe { Box::from_raw(r) });
                        }
                        return Err(err(why));
                    }
                }
                next_key += 1;
            }
        }
        let info = if local_mr {
            format!("{info}, local buffers registered (FI_MR_LOCAL)")
        } else {
            info
        };
        // SAFETY: the heap's open region; fi_mr_desc reads this field.
        let heap_desc = unsafe { (*raw.mr).mem_desc };
        let inner = Arc::new(Inner {
            api,
            raw,
            my_pe: me,
            peers,
            virt_addr: opened.mr_mode & FI_MR_VIRT_ADDR != 0,
            ordered: opened.ordered,
            max_chunk,
            inject_size: opened.inject_size,
            native: opened.native,
            counters: Counters::default(),
            tracks: Mutex::new(HashMap::new()),
            collective_in_flight: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            bounce_bytes: AtomicU64::new(0),
            driven_at: AtomicU64::new(0),
            epoch: Instant::now(),
            polling: AtomicBool::new(false),
            contended_until: AtomicU64::new(0),
            bounce_pool: Mutex::new(Vec::new()),
            wakes: Mutex::new(VecDeque::new()),
            acks: Mutex::new(VecDeque::new()),
            value_acks: Mutex::new(VecDeque::new()),
            acks_queued: AtomicUsize::new(0),
            hot: AtomicBool::new(true),
            signal_msg_max,
            rx,
            local_mr,
            heap_desc,
            mr_endpoint,
            next_key: AtomicU64::new(next_key),
            exposed_mrs: Mutex::new(Vec::new()),
            exposed: Regions::default(),
            exposed_here: Regions::default(),
            base,
            heap_size,
            link: init.config.link_timeout.max(Duration::from_millis(100)),
            stopping: AtomicBool::new(false),
            sread: opened.sread,
            auto_progress: opened.progress == FI_PROGRESS_AUTO,
            info,
        });
        for &r in &inner.rx {
            inner.post_rx(r);
        }
        let inner2 = inner.clone();
        let first_wait_fd = opened.wait_fd;
        let mut fd_trust = WaitFdTrust::new(opened.wait_fd_trusted);
        let provider = opened.provider.clone();
        let progress = std::thread::Builder::new()
            .name("shmem-roce-ofi".into())
            .spawn(move || {
                let i = inner2;
                let mut last_dog = Instant::now();
                let mut active = Instant::now();
                // The completion queue's wait descriptor (`FI_WAIT_FD`),
                // polled instead of blocking in `fi_cq_sread` while it works.
                let mut wait_fd = first_wait_fd;
                while !i.stopping.load(Ordering::SeqCst) {
                    // Within HOT of the last completion the thread polls and
                    // yields the core between polls (traffic comes in
                    // bursts, and waking from fi_cq_sread costs tens of us
                    // per message); then it blocks in fi_cq_sread.
                    // Auto-progress providers complete operations on their
                    // own threads, and some of them (sockets) do not wake a
                    // blocked fi_cq_sread promptly: they are polled every
                    // 100 us when idle.
                    let hot = active.elapsed() < HOT;
                    let block = (!i.auto_progress && !hot).then_some(20);
                    // Where the wait descriptor cannot be trusted, the
                    // thread naps between polls while this PE was active
                    // lately (see `WaitFdTrust`).
                    let stale = !fd_trust.trusted();
                    let napping = block.is_some() && wait_fd.is_some() && stale && {
                        let driven = Duration::from_nanos(
                            (i.epoch.elapsed().as_nanos() as u64)
                                .saturating_sub(i.driven_at.load(Ordering::Relaxed)),
                        );
                        active.elapsed().min(driven) < NAP_ACTIVE_FOR
                    };
                    // Acknowledgements may wait for the next round while
                    // the thread polls or naps (see `defer_ack`).
                    let defer = hot || napping;
                    if defer != i.hot.load(Ordering::Relaxed) {
                        i.hot.store(defer, Ordering::SeqCst);
                        if !defer {
                            // Those queued meanwhile leave before it
                            // blocks.
                            i.flush_acks();
                        }
                    }
                    let got = match (block, wait_fd) {
                        (Some(_), Some(_)) if napping => {
                            std::thread::sleep(NAP_ACTIVE);
                            i.flush_acks();
                            i.try_poll_cq()
                        }
                        (Some(ms), Some(fd)) if stale => {
                            if learn(&mut fd_trust, i.look_at_wait_fd(fd), &provider) {
                                continue;
                            }
                            // Idle: block in the provider, which re-arms the
                            // descriptor and serves what comes.
                            i.poll_cq(Some(ms))
                        }
                        (Some(ms), Some(fd)) => {
                            if fd_trust.wants_looks() {
                                // Confirms the verdict in the log; a trusted
                                // descriptor stays trusted.
                                learn(&mut fd_trust, i.look_at_wait_fd(fd), &provider);
                            }
                            // Traffic that makes no completion here (a
                            // peer's read of this PE's memory) keeps the
                            // thread polling too: a peer that reads in a
                            // loop is served without a wake-up per read.
                            match i.wait_traffic(fd, ms) {
                                Traffic::Yes => active = Instant::now(),
                                Traffic::No => {}
                                Traffic::Broken(why) => {
                                    shmem_log!(
                                        Warn,
                                        "ROCE/ofi: cannot wait on the completion queue's descriptor ({why}); blocking in fi_cq_sread instead"
                                    );
                                    wait_fd = None;
                                }
                            }
                            i.poll_cq(None)
                        }
                        (Some(_), None) => i.poll_cq(block),
                        (None, _) => i.try_poll_cq(),
                    };
                    if got > 0 {
                        active = Instant::now();
                    } else if hot {
                        // While a waiting thread of this PE drives the
                        // provider (a barrier's), this thread only yields
                        // to it; otherwise it pauses as the waits do.
                        let driven = Duration::from_nanos(
                            (i.epoch.elapsed().as_nanos() as u64)
                                .saturating_sub(i.driven_at.load(Ordering::Relaxed)),
                        );
                        if driven < DRIVEN_LATELY {
                            std::thread::yield_now();
                        } else {
                            i.pause();
                        }
                    } else if !i.sread || i.auto_progress {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    i.flush_wakes();
                    if last_dog.elapsed() >= Duration::from_millis(50) {
                        last_dog = Instant::now();
                        i.watchdog();
                    }
                }
            })
            .map_err(|e| Error::os("spawning the libfabric progress thread", e))?;
        let post_amos = opened.atomics_ordered && !inner.auto_progress;
        let amo_in_flight = Arc::new((0..inner.peers.len()).map(|_| AtomicU64::new(0)).collect());
        let engine = Ofi {
            inner,
            reach,
            post_amos,
            amo_in_flight,
            amo_msg: card.amo_msg,
            direct_put,
            progress: Mutex::new(Some(progress)),
            _heap: heap,
        };
        // Every PE's receive buffers are posted before anyone sends a wake.
        bs.barrier()?;
        // Connect to every peer now (connection-based providers such as
        // ofi_rxm connect on first use and hold the first operations back
        // until then, which a PE that exits right after them would lose).
        engine.connect_all()?;
        bs.barrier()?;
        shmem_log!(Info, "ROCE: libfabric {}", engine.inner.info);
        let local_pes = init.topology.local_pes();
        if let Some(why) = sockets_spin_warning(
            &opened.provider,
            std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_some(),
            init.topology.machine_pes(),
            init.config.cores(),
        ) {
            // Once per node.
            if local_pes.first().is_none_or(|&first| first == me) {
                shmem_log!(Warn, "ROCE: {why}");
            }
        }
        if init.config.info && me == 0 {
            eprintln!("shmem ROCE engine: libfabric {}", engine.inner.info);
        }
        Ok(engine)
    }

    /// Sends one empty wake message to every reachable peer and waits until
    /// all are delivered.
    fn connect_all(&self) -> Result<()> {
        let i = &*self.inner;
        let n = i.peers.len();
        let peers: Vec<PeId> = (0..n)
            .filter(|&pe| pe != i.my_pe && self.can_reach(pe))
            .collect();
        if peers.is_empty() {
            return Ok(());
        }
        let done = Completion::pending(peers.len());
        for &pe in &peers {
            let p = i.peer(pe)?;
            let mut ctx = i.track(Track {
                pe,
                done: done.clone(),
                out: None,
                bounce: 0,
                wake: None,
                posted: Instant::now(),
                collective: false,
            });
            let mut m = vec![0u8; WAKE_LEN];
            m[..8].copy_from_slice(&WAKE_MAGIC.to_le_bytes());
            ctx.bounce = m;
            let buf = ctx.bounce.as_ptr();
            let desc = i.local_desc(&mut ctx, buf, WAKE_LEN);
            let raw_ctx = Box::into_raw(ctx);
            let ep = i.raw.ep;
            let r = desc.and_then(|desc| {
                i.post(pe, || {
                    // SAFETY: open endpoint; the message lives in the context
                    // until its completion.
                    unsafe {
                        ((*(*ep).msg).send)(ep, buf.cast(), WAKE_LEN, desc, p.addr, raw_ctx.cast())
                    }
                })
            });
            if let Err(why) = r {
                i.unpost(raw_ctx, &why);
                let _ = i.wait(&done);
                return Err(Error::PeerExited { pe, detail: why });
            }
        }
        i.wait(&done)
    }

    /// One line describing the provider in use (as `SHMEM_INFO` prints it).
    pub fn describe(&self) -> &str {
        &self.inner.info
    }

    /// Waits for the non-fetching atomics posted to `pe` before a write,
    /// read or signal message that the provider would not order after them
    /// (the same program order a blocking atomic gives).
    fn after_amos(&self, pe: PeId) -> Result<()> {
        // A zero count means every atomic this thread posted to `pe`
        // before has completed (its count went up before it was posted).
        match self.amo_in_flight.get(pe) {
            Some(c) if c.load(Ordering::Acquire) > 0 => self.drain(),
            _ => Ok(()),
        }
    }

    /// The provider's op code and operand for `op` at `width` when the
    /// provider has it natively (`fi_query_atomic`), else `None`.
    fn native_op(&self, width: AmoWidth, op: AmoOp) -> Option<(c_int, u64)> {
        let n = &self.inner.native;
        let w = usize::from(width == AmoWidth::W64);
        let m = mask(width);
        match op {
            AmoOp::Fetch => n.read[w].then_some((FI_ATOMIC_READ, 0)),
            AmoOp::Set(v) | AmoOp::Swap(v) => n.write[w].then_some((FI_ATOMIC_WRITE, v & m)),
            AmoOp::Add(v) => n.sum[w].then_some((FI_SUM, v & m)),
            AmoOp::And(v) => n.band[w].then_some((FI_BAND, v & m)),
            AmoOp::Or(v) => n.bor[w].then_some((FI_BOR, v & m)),
            AmoOp::Xor(v) => n.bxor[w].then_some((FI_BXOR, v & m)),
            AmoOp::CompareSwap { .. } => None,
        }
    }

    /// The wake a put-with-signal's data carries when the signal waits for
    /// its delivery: where the target reads remote CQ data, each piece
    /// carries its range (which keeps the target's progress thread polling
    /// while the data comes in: a 1 MiB put-with-signal ping-pong over
    /// `net` measured 1689 -> 627 us per hop, over `tcp;ofi_rxm` 873 ->
    /// 554, medians of four rounds); else none (the signal wakes the range).
    fn piece_wake(&self, pe: PeId, dst: usize, len: usize) -> Result<Option<Spans>> {
        Ok(self
            .inner
            .peer(pe)?
            .remote_data
            .then_some([(dst as u64, len as u64), (0, 0)]))
    }

    /// A blocking put of `len` bytes at `src` to `place` on `pe`; `wake`:
    /// the target's waiters to ring.
    ///
    /// # Safety
    /// `src` valid for reads of `len` bytes; `place` inside `pe`'s heap or
    /// a region it exposed.
    unsafe fn put_at(
        &self,
        pe: PeId,
        place: Place,
        src: *const u8,
        len: usize,
        wake: Spans,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if self.direct_put > 0 && len >= self.direct_put {
            // Large: the bounce copy would cost this core as much as the
            // provider's own copy into the socket (a second pass over the
            // data), more than waiting for the delivery does.
            let done = self.post_rma(pe, true, place, src as *mut u8, len, false, Some(wake))?;
            return self.inner.wait(&done);
        }
        self.post_rma(pe, true, place, src as *mut u8, len, true, Some(wake))
            .map(|_| ())
    }

    /// A blocking get of `len` bytes at `place` on `pe` into `dst`.
    ///
    /// # Safety
    /// `dst` valid for writes of `len` bytes; `place` as for [`Ofi::put_at`].
    unsafe fn get_at(&self, pe: PeId, place: Place, dst: *mut u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let done = self.post_rma(pe, false, place, dst, len, false, None)?;
        self.inner.wait(&done)
    }

    /// Where `len` bytes at `addr` of `pe`'s memory outside its heap are,
    /// if `pe` exposed them ([`Transport::expose_memory`]).
    fn exposed_place(&self, pe: PeId, addr: usize, len: usize) -> Result<Place> {
        let i = &*self.inner;
        let r = i.exposed.find(pe, addr, len)?;
        let addr = addr as u64;
        Ok(Place::Exposed {
            remote: if i.virt_addr { addr } else { addr - r.start },
            key: r.key,
        })
    }

    /// Posts `len` bytes as writes (`bounce`: copy the source first so that
    /// it is reusable on return) or reads, in pieces of
    /// [`Inner::max_chunk`]. A write with `wake` wakes its target's waiters
    /// on the bytes it fills: where the target reads remote CQ data every
    /// piece carries its own range (and `wake`'s spans are not used), else
    /// a wake message for `wake` follows the last piece's completion.
    #[allow(clippy::too_many_arguments)]
    fn post_rma(
        &self,
        pe: PeId,
        write: bool,
        place: Place,
        ptr: *mut u8,
        len: usize,
        bounce: bool,
        wake: Option<Spans>,
    ) -> Result<Completion> {
        self.after_amos(pe)?;
        let i = &*self.inner;
        let p = i.peer(pe)?;
        let chunk = i.max_chunk;
        let parts = len.div_ceil(chunk).max(1);
        let done = Completion::pending(parts);
        for k in 0..parts {
            let o = k * chunk;
            let n = chunk.min(len - o);
            let copy = bounce && n > i.inject_size;
            if copy {
                while i.bounce_bytes.load(Ordering::Acquire) as usize + n > BOUNCE_LIMIT
                    && i.bounce_bytes.load(Ordering::Acquire) > 0
                {
                    if i.try_poll_cq() == 0 {
                        i.pause();
                    }
                    i.peer(pe)?;
                }
                i.bounce_bytes.fetch_add(n as u64, Ordering::AcqRel);
            }
            // A write that wakes its target: carried in the write itself
            // (the target rings the range as it lands, every chunk its
            // own) where the target reads remote CQ data, else a wake
            // message once the last chunk has completed.
            // Memory outside the heap: the empty range, which rings only
            // the waiters that watch everything (as those on it do).
            let data = (write && wake.is_some() && p.remote_data).then(|| match place {
                Place::Heap(off) => remote_data((off + o) as u64, n as u64),
                Place::Exposed { .. } => remote_data(0, 0),
            });
            let mut ctx = i.track(Track {
                pe,
                done: done.clone(),
                out: None,
                bounce: if copy { n } else { 0 },
                wake: if k + 1 == parts && data.is_none() {
                    wake
                } else {
                    None
                },
                posted: Instant::now(),
                collective: false,
            });
            // SAFETY: the caller keeps `ptr` valid for `len` bytes as the
            // operation requires (until return when bouncing or injecting).
            let mut src = unsafe { ptr.add(o) };
            if copy {
                // SAFETY: as above.
                let b = i.take_bounce(unsafe { std::slice::from_raw_parts(src, n) });
                ctx.bounce = b.buf;
                ctx.bounce_mr = b.mr;
                ctx.bounce_desc = b.desc;
                src = ctx.bounce.as_mut_ptr();
            }
            let (remote, key) = match place {
                Place::Heap(off) => (i.remote(p, off + o), p.key),
                Place::Exposed { remote, key } => (remote + o as u64, key),
            };
            let ep = i.raw.ep;
            let desc = if ctx.bounce_desc.is_null() {
                i.local_desc(&mut ctx, src, n)
            } else {
                Ok(ctx.bounce_desc)
            };
            let raw_ctx = Box::into_raw(ctx);
            let inject = write && bounce && n <= i.inject_size;
            // Delivery completion: `quiet` (which waits for these
            // completions) promises the data is in the target's memory,
            // which a provider's default completion (data sent) does not.
            let flags = FI_COMPLETION
                | FI_DELIVERY_COMPLETE
                | if inject { 1 << 25 } else { 0 } // FI_INJECT
                | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 };
            let r = desc.and_then(|local| {
                i.post(pe, || {
                    // SAFETY: open endpoint; `src` valid for `n` bytes (see above);
                    // the context lives until its completion.
                    unsafe {
                        if write {
                            let iov = iovec {
                                iov_base: src.cast(),
                                iov_len: n,
                            };
                            let rma = fi_rma_iov {
                                addr: remote,
                                len: n,
                                key,
                            };
                            let mut desc: *mut c_void = local;
                            let msg = fi_msg_rma {
                                msg_iov: &iov,
                                desc: &mut desc,
                                iov_count: 1,
                                addr: p.addr,
                                rma_iov: &rma,
                                rma_iov_count: 1,
                                context: raw_ctx.cast(),
                                data: data.unwrap_or(0),
                            };
                            ((*(*ep).rma).writemsg)(ep, &msg, flags)
                        } else {
                            ((*(*ep).rma).read)(
                                ep,
                                src.cast(),
                                n,
                                local,
                                p.addr,
                                remote,
                                key,
                                raw_ctx.cast(),
                            )
                        }
                    }
                })
            });
            if let Err(why) = r {
                i.unpost(raw_ctx, &why);
                for _ in k + 1..parts {
                    done.finish_part(Err(err("not posted after an earlier failure")));
                }
                let _ = i.wait(&done);
                return Err(Error::PeerExited { pe, detail: why });
            }
        }
        Ok(done)
    }

    /// Posts one atomic; `fetch` gives the previous value through `out`.
    #[allow(clippy::too_many_arguments)]
    fn post_atomic(
        &self,
        pe: PeId,
        off: usize,
        width: AmoWidth,
        op: c_int,
        operand: u64,
        compare: Option<u64>,
        fetch: bool,
        wake: Option<Spans>,
        collective: bool,
    ) -> Result<(Completion, Arc<AtomicU64>)> {
        let i = &*self.inner;
        let p = i.peer(pe)?;
        let done = Completion::pending(1);
        let out = Arc::new(AtomicU64::new(0));
        let mut ctx = i.track(Track {
            pe,
            done: done.clone(),
            out: Some(out.clone()),
            bounce: 0,
            wake,
            posted: Instant::now(),
            collective,
        });
        ctx.operand = operand;
        ctx.compare = compare.unwrap_or(0);
        let dt = match width {
            AmoWidth::W32 => FI_UINT32,
            AmoWidth::W64 => FI_UINT64,
        };
        let remote = i.remote(p, off);
        let ep = i.raw.ep;
        // Operand, compare value and result: three adjacent words of the
        // context, one registration when local buffers need one.
        let words = ptr::addr_of!(ctx.operand).cast::<u8>();
        let desc = i.local_desc(&mut ctx, words, 3 * 8);
        let raw_ctx = Box::into_raw(ctx);
        // The operands and result live in the context (valid until its
        // completion); a 32-bit operand is the low half of the u64 on a
        // little-endian host, which is the only kind this engine builds for.
        // SAFETY: `raw_ctx` is a live box.
        let (opnd, cmp, res) = unsafe {
            (
                ptr::addr_of_mut!((*raw_ctx).operand).cast::<c_void>(),
                ptr::addr_of_mut!((*raw_ctx).compare).cast::<c_void>(),
                ptr::addr_of_mut!((*raw_ctx).result).cast::<c_void>(),
            )
        };
        let r = desc.and_then(|local| {
            i.post(pe, || {
                // SAFETY: open endpoint; operand/compare/result point into the
                // context, which lives until its completion.
                unsafe {
                    let a = &*(*ep).atomic;
                    match (compare, fetch) {
                        (Some(_), _) => (a.compwrite)(
                            ep,
                            opnd,
                            1,
                            local,
                            cmp,
                            local,
                            res,
                            local,
                            p.addr,
                            remote,
                            p.key,
                            dt,
                            op,
                            raw_ctx.cast(),
                        ),
                        (None, true) => (a.readwrite)(
                            ep,
                            opnd,
                            1,
                            local,
                            res,
                            local,
                            p.addr,
                            remote,
                            p.key,
                            dt,
                            op,
                            raw_ctx.cast(),
                        ),
                        (None, false) => {
                            atomic_write_delivered(ep, opnd, 1, local, p, remote, dt, op, raw_ctx)
                        }
                    }
                }
            })
        });
        if let Err(why) = r {
            i.unpost(raw_ctx, &why);
            return Err(Error::PeerExited { pe, detail: why });
        }
        Ok((done, out))
    }

    /// Sends a signal message: the target's progress thread writes `data`
    /// (when `inline`; else `dst`/`len` only name bytes already delivered,
    /// for the wake) and then updates the signal word at `sig`, rings its
    /// waiters and acknowledges; the acknowledgement completes the returned
    /// operation (so `quiet` and `fence` wait for it).
    #[allow(clippy::too_many_arguments)]
    fn post_signal_msg(
        &self,
        pe: PeId,
        dst: usize,
        len: usize,
        inline: Option<&[u8]>,
        sig: usize,
        op: SignalOp,
        value: u64,
        collective: bool,
    ) -> Result<Completion> {
        self.after_amos(pe)?;
        let i = &*self.inner;
        let p = i.peer(pe)?;
        let data = inline.unwrap_or(&[]);
        let total = SIGNAL_HEADER + data.len();
        if total > RX_LEN {
            return Err(err(format!(
                "a signal message carries at most {SIGNAL_MSG_MAX} B of data, not {}",
                data.len()
            )));
        }
        let done = Completion::pending(1);
        let mut ctx = i.track(Track {
            pe,
            done: done.clone(),
            out: None,
            bounce: 0,
            wake: None,
            posted: Instant::now(),
            collective,
        });
        let op_code: u64 = match op {
            SignalOp::Set => 1,
            SignalOp::Add => 2,
        };
        let mut flags = if inline.is_some() { SIGNAL_INLINE } else { 0 };
        if collective && !i.auto_progress {
            // Auto-progress providers wait for a collective's signal's
            // acknowledgement in the call (see `signal_with`): not deferred.
            flags |= SIGNAL_COLLECTIVE;
        }
        // An acknowledgement owed to `pe` rides along when the message
        // still fits an inject and a receive buffer.
        let ack = if total + 8 <= i.inject_size.min(RX_LEN) {
            i.take_ack(pe)
        } else {
            None
        };
        if ack.is_some() {
            flags |= SIGNAL_ACK;
        }
        let head = SIGNAL_TAG | op_code << 16 | flags << 24 | (i.my_pe as u64) << 32;
        let mut m = [0u8; RX_LEN];
        put_words(
            &mut m,
            &[head, ctx.id, dst as u64, len as u64, sig as u64, value],
        );
        m[SIGNAL_HEADER..total].copy_from_slice(data);
        let total = match ack {
            Some(a) => {
                m[total..total + 8].copy_from_slice(&a.to_le_bytes());
                total + 8
            }
            None => total,
        };
        let ep = i.raw.ep;
        let r = if total <= i.inject_size {
            let id = ctx.id;
            drop(ctx);
            let r = i.post(pe, || {
                // SAFETY: open endpoint; inject copies the bytes before returning.
                unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), total, p.addr) }
            });
            if let Err(why) = &r {
                i.finish(id, 0, Some(why.clone()));
            }
            r
        } else {
            ctx.kind = KIND_SIGNAL_SEND;
            ctx.bounce = m[..total].to_vec();
            let buf = ctx.bounce.as_ptr();
            let desc = i.local_desc(&mut ctx, buf, total);
            let raw_ctx = Box::into_raw(ctx);
            let r = desc.and_then(|desc| {
                i.post(pe, || {
                    // SAFETY: open endpoint; the message lives in the context
                    // until its completion.
                    unsafe {
                        ((*(*ep).msg).send)(ep, buf.cast(), total, desc, p.addr, raw_ctx.cast())
                    }
                })
            });
            if let Err(why) = &r {
                i.unpost(raw_ctx, why);
            }
            r
        };
        r.map_err(|why| Error::PeerExited { pe, detail: why })?;
        Ok(done)
    }

    /// [`Transport::signal`]; `collective`: as
    /// [`Transport::put_signal_collective`] (not counted for `quiet`; an
    /// auto-progress provider still waits for it before returning, so that
    /// a PE killed right after its barrier has sent its arrival).
    unsafe fn signal_with(
        &self,
        pe: PeId,
        sig: usize,
        op: SignalOp,
        value: u64,
        collective: bool,
    ) -> Result<()> {
        if self.inner.signal_msg_max.is_some() {
            let done = self.post_signal_msg(pe, sig, 0, None, sig, op, value, collective)?;
            if self.inner.auto_progress {
                // As below: the signal has left this process on return.
                self.inner.wait(&done)?;
            }
            return Ok(());
        }
        // The provider's thread may not have sent it yet: a signal has left
        // this process when the call returns (a PE that exits right after a
        // barrier must not take it along).
        let wait = self.inner.auto_progress;
        if self.signal_atomic(
            pe,
            sig,
            op,
            value,
            [(sig as u64, 8), (0, 0)],
            wait,
            collective,
        )? {
            return Ok(());
        }
        let amo = match op {
            SignalOp::Set => AmoOp::Set(value),
            SignalOp::Add => AmoOp::Add(value),
        };
        // SAFETY: the caller's contract for `sig` (in-heap, aligned word of
        // `pe`) is the atomic's.
        unsafe { self.atomic(pe, sig, AmoWidth::W64, amo) }.map(|_| ())
    }

    /// [`Transport::put_signal`]; `collective` as in [`Ofi::signal_with`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn put_signal_with(
        &self,
        pe: PeId,
        dst: usize,
        src: *const u8,
        len: usize,
        sig: usize,
        op: SignalOp,
        value: u64,
        nbi: bool,
        collective: bool,
    ) -> Result<()> {
        let ordered = self.inner.ordered;
        if let Some(max) = self.inner.signal_msg_max {
            let done = if len <= max {
                // SAFETY: the caller keeps `src` valid for `len` bytes; they
                // are copied into the message before this returns.
                let data = unsafe { std::slice::from_raw_parts(src, len) };
                self.post_signal_msg(pe, dst, len, Some(data), sig, op, value, collective)?
            } else {
                // The signal may only go once the data is in place; the
                // source stays untouched until then (no bounce copy).
                let data = self.post_rma(
                    pe,
                    true,
                    Place::Heap(dst),
                    src as *mut u8,
                    len,
                    false,
                    self.piece_wake(pe, dst, len)?,
                )?;
                self.inner.wait(&data)?;
                self.post_signal_msg(pe, dst, len, None, sig, op, value, collective)?
            };
            if self.inner.auto_progress && !nbi {
                // As in `signal`.
                self.inner.wait(&done)?;
            }
            return Ok(());
        }
        let n = &self.inner.native;
        if len > 0 && !ordered && self.signal_code(op).1 && len <= n.byte_write_max {
            // Small data as a byte-array atomic write: atomics are ordered
            // after atomics (FI_ORDER_ATOMIC_WAW), so the signal can follow
            // at once instead of after the data's delivery.
            // SAFETY: the caller keeps `src` valid for `len` bytes; it is
            // copied before this returns.
            let data = unsafe { std::slice::from_raw_parts(src, len) };
            self.post_atomic_bytes(pe, dst, data)?;
        } else if len > 0 {
            // Unordered: the data's delivery is awaited below, so the
            // source needs no bounce copy.
            let wake = if ordered {
                None
            } else {
                self.piece_wake(pe, dst, len)?
            };
            let done = self.post_rma(
                pe,
                true,
                Place::Heap(dst),
                src as *mut u8,
                len,
                !nbi && ordered,
                wake,
            )?;
            if !ordered {
                // The signal may only be posted once the data is in place.
                self.inner.wait(&done)?;
            }
        }
        let spans = [(sig as u64, 8), (dst as u64, len as u64)];
        // Waited for as in `signal_with`.
        let wait = self.inner.auto_progress && !nbi;
        if self.signal_atomic(pe, sig, op, value, spans, wait, collective)? {
            return Ok(());
        }
        let amo = match op {
            SignalOp::Set => AmoOp::Set(value),
            SignalOp::Add => AmoOp::Add(value),
        };
        // SAFETY: the caller's contract for `sig` (in-heap, aligned word of
        // `pe`) is the atomic's.
        unsafe { self.atomic(pe, sig, AmoWidth::W64, amo) }?;
        self.wake_after(pe, [(sig as u64, 8), (dst as u64, len as u64)]);
        Ok(())
    }

    /// The provider atomic that performs signal update `op`, and whether
    /// the provider has it.
    fn signal_code(&self, op: SignalOp) -> (c_int, bool) {
        let n = &self.inner.native;
        match op {
            SignalOp::Set => (FI_ATOMIC_WRITE, n.signal_set),
            SignalOp::Add => (FI_SUM, n.signal_add),
        }
    }

    /// Posts signal update `op` as a provider atomic that wakes `pe` for
    /// `spans` once complete (with `wait`, waits for that); `Ok(false)`
    /// when the provider lacks the atomic and the caller must emulate it.
    #[allow(clippy::too_many_arguments)]
    fn signal_atomic(
        &self,
        pe: PeId,
        sig: usize,
        op: SignalOp,
        value: u64,
        spans: Spans,
        wait: bool,
        collective: bool,
    ) -> Result<bool> {
        let (code, native) = self.signal_code(op);
        if !native {
            return Ok(false);
        }
        let (done, _) = self.post_atomic(
            pe,
            sig,
            AmoWidth::W64,
            code,
            value,
            None,
            false,
            Some(spans),
            collective,
        )?;
        if wait {
            self.inner.wait(&done)?;
        }
        Ok(true)
    }

    /// Posts a non-fetching atomic with `post`, counted in
    /// [`Ofi::amo_in_flight`] from before it is posted until it is over
    /// (failed or not), so that a later write, read or signal to `pe`
    /// first waits for it ([`Ofi::after_amos`]).
    fn post_counted(&self, pe: PeId, post: impl FnOnce() -> Result<Completion>) -> Result<()> {
        let Some(count) = self.amo_in_flight.get(pe) else {
            return Err(Error::PeOutOfRange {
                pe,
                n_pes: self.amo_in_flight.len(),
            });
        };
        count.fetch_add(1, Ordering::AcqRel);
        let counts = self.amo_in_flight.clone();
        let down = move || {
            counts[pe].fetch_sub(1, Ordering::AcqRel);
            Ok(())
        };
        match post() {
            Ok(done) => {
                done.then(down);
                Ok(())
            }
            Err(e) => {
                let _ = down();
                Err(e)
            }
        }
    }

    /// Sends atomic `op` on `pe`'s word at `off` as a message that the
    /// target applies with a CPU atomic ([`Inner::on_amo`]); the answer
    /// completes it with the word's previous value in the returned cell.
    fn post_amo_msg(
        &self,
        pe: PeId,
        at: AmoAt,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<(Completion, Arc<AtomicU64>)> {
        let (off, exposed) = match at {
            AmoAt::Heap(off) => (off as u64, 0),
            AmoAt::Exposed(addr) => (addr, AMO_EXPOSED),
        };
        // No wait for earlier atomics: the target applies atomic messages
        // in the order they were numbered.
        let i = &*self.inner;
        let p = i.peer(pe)?;
        let done = Completion::pending(1);
        let out = Arc::new(AtomicU64::new(0));
        let ctx = i.track(Track {
            pe,
            done: done.clone(),
            out: Some(out.clone()),
            bounce: 0,
            wake: None,
            posted: Instant::now(),
            collective: false,
        });
        let id = ctx.id;
        drop(ctx);
        let (code, operand, compare) = crate::wire::amo_code(op);
        let head =
            AMO_TAG | code << 16 | exposed | (width.bytes() as u64) << 24 | (i.my_pe as u64) << 32;
        let ep = i.raw.ep;
        let r = {
            let mut seq = p.amo_sent.lock().unwrap_or_else(|e| e.into_inner());
            let mut m = [0u8; AMO_LEN];
            put_words(&mut m, &[head, id, off, operand, compare, *seq]);
            let r = i.post(pe, || {
                // SAFETY: open endpoint; inject copies the bytes before returning.
                unsafe { ((*(*ep).msg).inject)(ep, m.as_ptr().cast(), AMO_LEN, p.addr) }
            });
            if r.is_ok() {
                *seq += 1;
            }
            r
        };
        if let Err(why) = r {
            i.finish(id, 0, Some(why.clone()));
            return Err(Error::PeerExited { pe, detail: why });
        }
        Ok((done, out))
    }

    /// Posts `data` as an `FI_ATOMIC_WRITE` of bytes (copied first; at most
    /// [`NativeAmo::byte_write_max`] bytes) with delivery completion.
    fn post_atomic_bytes(&self, pe: PeId, off: usize, data: &[u8]) -> Result<Completion> {
        let i = &*self.inner;
        let p = i.peer(pe)?;
        let done = Completion::pending(1);
        let mut ctx = i.track(Track {
            pe,
            done: done.clone(),
            out: None,
            bounce: 0,
            wake: None,
            posted: Instant::now(),
            collective: false,
        });
        ctx.bounce = data.to_vec();
        let buf = ctx.bounce.as_mut_ptr();
        let len = data.len();
        let remote = i.remote(p, off);
        let ep = i.raw.ep;
        let desc = i.local_desc(&mut ctx, buf, len);
        let raw_ctx = Box::into_raw(ctx);
        let r = desc.and_then(|local| {
            i.post(pe, || {
                // SAFETY: open endpoint; the bytes live in the context until its
                // completion.
                unsafe {
                    atomic_write_delivered(
                        ep,
                        buf.cast(),
                        len,
                        local,
                        p,
                        remote,
                        FI_UINT8,
                        FI_ATOMIC_WRITE,
                        raw_ctx,
                    )
                }
            })
        });
        if let Err(why) = r {
            i.unpost(raw_ctx, &why);
            return Err(Error::PeerExited { pe, detail: why });
        }
        Ok(done)
    }

    fn fetch_op(&self, pe: PeId, off: usize, width: AmoWidth, op: c_int, v: u64) -> Result<u64> {
        let (done, out) = self.post_atomic(pe, off, width, op, v, None, true, None, false)?;
        self.inner.wait(&done)?;
        Ok(out.load(Ordering::Acquire) & mask(width))
    }

    fn cswap(&self, pe: PeId, off: usize, width: AmoWidth, cond: u64, v: u64) -> Result<u64> {
        let (done, out) =
            self.post_atomic(pe, off, width, FI_CSWAP, v, Some(cond), true, None, false)?;
        self.inner.wait(&done)?;
        Ok(out.load(Ordering::Acquire) & mask(width))
    }

    fn wake_after(&self, pe: PeId, spans: Spans) {
        self.inner.queue_wake(pe, spans);
        self.inner.flush_wakes();
    }

    /// Waits for every posted operation (quiet without the error report),
    /// driving progress all along: a manual-progress provider sends the
    /// rest of a large write only from inside libfabric calls.
    fn drain(&self) -> Result<()> {
        let i = &*self.inner;
        let c = &i.counters;
        let target = c.issued.load(Ordering::Acquire);
        if c.completed.load(Ordering::Acquire) >= target {
            // Nothing to wait for. Acknowledgements this PE owes stay
            // queued, to ride on its next message (a barrier's signal right
            // after this quiet) or leave from the progress thread's next
            // round, instead of going as messages of their own.
            i.flush_wake_msgs();
            return Ok(());
        }
        i.progress_until(|| c.completed.load(Ordering::Acquire) >= target);
        Ok(())
    }
}

fn mask(w: AmoWidth) -> u64 {
    match w {
        AmoWidth::W32 => u32::MAX as u64,
        AmoWidth::W64 => u64::MAX,
    }
}

fn apply(op: AmoOp, old: u64, w: AmoWidth) -> u64 {
    let v = match op {
        AmoOp::Fetch => old,
        AmoOp::Set(v) | AmoOp::Swap(v) => v,
        AmoOp::CompareSwap { cond, value } => {
            if old == cond & mask(w) {
                value
            } else {
                old
            }
        }
        AmoOp::Add(v) => old.wrapping_add(v),
        AmoOp::And(v) => old & v,
        AmoOp::Or(v) => old | v,
        AmoOp::Xor(v) => old ^ v,
    };
    v & mask(w)
}

impl Drop for Ofi {
    fn drop(&mut self) {
        let _ = self.drain();
        // Collectives' signals too (the last barrier's): a manual-progress
        // provider may still hold them, and the peer waits for them. Each
        // ends by its acknowledgement or the watchdog's link timeout; the
        // acknowledgements this PE owes its peers leave first.
        let i = &*self.inner;
        i.flush_acks();
        i.progress_until(|| i.collective_in_flight.load(Ordering::Acquire) == 0);
        // Acknowledgements this PE owes (queued, or injected but not yet
        // sent by a manual-progress provider) leave before the endpoint
        // closes: a few progress rounds after the last flush.
        self.inner.flush_wakes();
        for _ in 0..100 {
            if self.inner.poll_cq(None) == 0 {
                std::thread::yield_now();
            }
        }
        self.inner.flush_wakes();
        self.inner.stopping.store(true, Ordering::SeqCst);
        if let Some(h) = self
            .progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = h.join();
        }
        // The progress thread is gone; `inner` is ours alone unless a
        // completion callback still holds it (it does not: they run inline).
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            // Registrations of memory outside the heap go before the domain.
            for m in inner
                .exposed_mrs
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                close(m.cast());
            }
            // Registrations of pooled bounce buffers go before the domain.
            for b in inner
                .bounce_pool
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                close(b.mr.cast());
            }
            inner.raw.close_all();
            for r in inner.rx.drain(..) {
                // SAFETY: the endpoint is closed, so the provider no longer
                // holds the receive contexts.
                drop(unsafe { Box::from_raw(r) });
            }
        }
    }
}

impl Transport for Ofi {
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

    fn wants_progress(&self) -> bool {
        !self.inner.auto_progress
    }

    fn progress(&self) {
        let i = &self.inner;
        // At most once a microsecond: a wait checks its condition more often
        // than that while it spins, and a poll is a system call here.
        let now = i.epoch.elapsed().as_nanos() as u64;
        if now.saturating_sub(i.driven_at.load(Ordering::Relaxed)) < 1_000 {
            return;
        }
        i.driven_at.store(now, Ordering::Relaxed);
        // Acknowledgements queued by earlier polls leave now, after what
        // this thread did since (see `Inner::defer_ack`); those this poll
        // queues leave on the next call or from the progress thread.
        i.flush_acks();
        if i.try_poll_cq() > 0 {
            // Wake messages the completions owe.
            i.flush_wake_msgs();
        }
    }

    unsafe fn put(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        let wake = [(dst as u64, len as u64), (0, 0)];
        // SAFETY: as for this function.
        unsafe { self.put_at(pe, Place::Heap(dst), src, len, wake) }
    }

    unsafe fn get(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: as for this function.
        unsafe { self.get_at(pe, Place::Heap(src), dst, len) }
    }

    unsafe fn put_to_address(
        &self,
        pe: PeId,
        addr: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let place = self.exposed_place(pe, addr, len)?;
        // Waiters on memory outside the heap watch everything: the empty
        // range rings them (and only them).
        // SAFETY: as for this function.
        unsafe { self.put_at(pe, place, src, len, [(0, 0), (0, 0)]) }
    }

    unsafe fn get_from_address(
        &self,
        pe: PeId,
        addr: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        let place = self.exposed_place(pe, addr, len)?;
        // SAFETY: as for this function.
        unsafe { self.get_at(pe, place, dst, len) }
    }

    unsafe fn atomic_at_address(
        &self,
        pe: PeId,
        addr: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<u64> {
        if !self.amo_msg {
            // The provider's atomics are not atomic with the CPU atomics
            // the target's node applies to the same word.
            return Err(Error::Unsupported(format!(
                "the libfabric provider's atomics on PE {pe}'s memory outside the heap would not be \
                 atomic with its node's CPU atomics (atomic messages are off)"
            )));
        }
        // The message carries the word's address (whatever the provider's
        // addressing of the region), once `pe` is known to have exposed it.
        self.inner.exposed.find(pe, addr, width.bytes())?;
        // The target applies it with a CPU atomic and rings its waiters.
        let (done, out) = self.post_amo_msg(pe, AmoAt::Exposed(addr as u64), width, op)?;
        self.inner.wait(&done)?;
        Ok(out.load(Ordering::Acquire) & mask(width))
    }

    unsafe fn expose_memory(&self, regions: &[(usize, usize)]) -> Result<Vec<u8>> {
        let i = &*self.inner;
        let mut card = Vec::with_capacity(regions.len());
        for &(start, len) in regions.iter().filter(|r| r.1 > 0) {
            let key = i.next_key.fetch_add(1, Ordering::Relaxed);
            let access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
            let at = start as *const u8;
            let what = "region outside the heap";
            // SAFETY: the caller keeps the region mapped for the engine's
            // life; the registration is closed before the domain (drop).
            let mr = unsafe { register(i.api, &i.raw, i.mr_endpoint, key, at, len, access, what) }
                .map_err(err)?;
            i.exposed_mrs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mr);
            let region = ExposedRegion {
                start: start as u64,
                len: len as u64,
                // SAFETY: an open region; fi_mr_key reads this field.
                key: unsafe { (*mr).key },
            };
            i.exposed_here.add(0, region);
            card.push(region);
        }
        if card.is_empty() {
            return Ok(Vec::new());
        }
        shmem_log!(
            Info,
            "ROCE/ofi: {} region(s) outside the symmetric heap ({} bytes) registered for the peers' reads and writes",
            card.len(),
            card.iter().map(|r| r.len).sum::<u64>()
        );
        Ok(Regions::card(&card))
    }

    fn learn_exposed_memory(&self, cards: &[&[u8]]) -> Result<()> {
        self.inner.exposed.learn(cards)
    }

    unsafe fn put_nbi(&self, pe: PeId, dst: usize, src: *const u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let wake = Some([(dst as u64, len as u64), (0, 0)]);
        self.post_rma(pe, true, Place::Heap(dst), src as *mut u8, len, false, wake)
            .map(|_| ())
    }

    unsafe fn get_nbi(&self, pe: PeId, src: usize, dst: *mut u8, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.post_rma(pe, false, Place::Heap(src), dst, len, false, None)
            .map(|_| ())
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
        let wake = Some([(dst as u64, len as u64), (0, 0)]);
        self.post_rma(pe, true, Place::Heap(dst), src as *mut u8, len, false, wake)
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
        self.post_rma(pe, false, Place::Heap(src), dst, len, false, None)
    }

    unsafe fn atomic(&self, pe: PeId, offset: usize, width: AmoWidth, op: AmoOp) -> Result<u64> {
        let m = mask(width);
        if self.amo_msg {
            // The target applies it and rings its own waiters.
            let (done, out) = self.post_amo_msg(pe, AmoAt::Heap(offset), width, op)?;
            self.inner.wait(&done)?;
            return Ok(out.load(Ordering::Acquire) & m);
        }
        let old = if let AmoOp::CompareSwap { cond, value } = op {
            self.cswap(pe, offset, width, cond & m, value & m)?
        } else if let Some((code, v)) = self.native_op(width, op) {
            self.fetch_op(pe, offset, width, code, v)?
        } else {
            // Emulated with a compare-and-swap loop (the provider lacks the op).
            let mut old = self.cswap(pe, offset, width, 0, 0)?;
            loop {
                let new = apply(op, old, width);
                if op == AmoOp::Fetch || new == old {
                    break old;
                }
                let seen = self.cswap(pe, offset, width, old, new)?;
                if seen == old {
                    break old;
                }
                old = seen;
            }
        };
        if op != AmoOp::Fetch {
            self.wake_after(pe, [(offset as u64, width.bytes() as u64), (0, 0)]);
        }
        Ok(old)
    }

    unsafe fn atomic_post(
        &self,
        pe: PeId,
        offset: usize,
        width: AmoWidth,
        op: AmoOp,
    ) -> Result<()> {
        let non_fetching = matches!(
            op,
            AmoOp::Set(_) | AmoOp::Add(_) | AmoOp::And(_) | AmoOp::Or(_) | AmoOp::Xor(_)
        );
        if self.amo_msg && non_fetching {
            // Returns once posted; its answer completes it for `quiet`, and
            // a later write, read or signal to this peer waits for it.
            return self.post_counted(pe, || {
                self.post_amo_msg(pe, AmoAt::Heap(offset), width, op)
                    .map(|(done, _)| done)
            });
        }
        let native = self
            .native_op(width, op)
            .filter(|_| self.post_amos && non_fetching);
        let Some((code, v)) = native else {
            // SAFETY: forwarded contract.
            return unsafe { self.atomic(pe, offset, width, op) }.map(|_| ());
        };
        // Atomics after atomics are ordered by the provider; anything else
        // to this peer waits for this one first (`after_amos`). `quiet`
        // waits for it like any posted operation, and its completion
        // sends the target's wake.
        let wake = Some([(offset as u64, width.bytes() as u64), (0, 0)]);
        self.post_counted(pe, || {
            self.post_atomic(pe, offset, width, code, v, None, false, wake, false)
                .map(|(done, _)| done)
        })
    }

    unsafe fn signal(&self, pe: PeId, sig: usize, op: SignalOp, value: u64) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.signal_with(pe, sig, op, value, false) }
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
        nbi: bool,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.put_signal_with(pe, dst, src, len, sig, op, value, nbi, false) }
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
        if len == 0 {
            // SAFETY: forwarded contract.
            return unsafe { self.signal_with(pe, sig, op, value, true) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.put_signal_with(pe, dst, src, len, sig, op, value, false, true) }
    }

    fn fence(&self) -> Result<()> {
        if self.inner.ordered {
            return Ok(());
        }
        // Without write-after-write ordering, later operations start only
        // after the earlier ones completed.
        self.drain()
    }

    fn quiet(&self) -> Result<()> {
        self.drain()?;
        match self
            .inner
            .counters
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            None => Ok(()),
            Some(e) => Err(err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_descriptor_trust_is_learnt_towards_trust_only_and_confirmed_once() {
        use FdLook::{Rearmed, Stuck, Unknown};
        // Trusted at start: the first re-armed look confirms it, once;
        // stuck looks (busy sockets over tcp;ofi_rxm) never distrust it.
        let mut t = WaitFdTrust::new(true);
        assert!(t.wants_looks());
        assert_eq!(t.observe(Unknown), Verdict::Same);
        assert_eq!(t.observe(Stuck), Verdict::Same);
        assert_eq!(t.observe(Rearmed), Verdict::Confirmed(true));
        assert!(!t.wants_looks());
        for _ in 0..100 {
            assert_eq!(t.observe(Stuck), Verdict::Same);
        }
        assert!(t.trusted());
        // Distrusted at start (libfabric's TCP RDM endpoint): a stuck look
        // confirms it; re-armed looks trust it only REARMS_TO_TRUST in a
        // row (a stuck look breaks the row, an unknown one does not).
        let mut t = WaitFdTrust::new(false);
        assert_eq!(t.observe(Stuck), Verdict::Confirmed(false));
        assert_eq!(t.observe(Stuck), Verdict::Same);
        for _ in 1..REARMS_TO_TRUST {
            assert_eq!(t.observe(Rearmed), Verdict::Same);
        }
        assert_eq!(t.observe(Stuck), Verdict::Same);
        assert!(!t.trusted() && t.wants_looks());
        for _ in 1..REARMS_TO_TRUST {
            assert_eq!(t.observe(Rearmed), Verdict::Same);
            assert_eq!(t.observe(Unknown), Verdict::Same);
        }
        assert_eq!(t.observe(Rearmed), Verdict::Changed(true));
        assert!(t.trusted() && !t.wants_looks());
        // After a change, agreeing looks are not announced again.
        assert_eq!(t.observe(Rearmed), Verdict::Same);
    }

    #[test]
    fn peer_card_round_trips_through_postcard() {
        let c = PeerCard {
            provider: "tcp;ofi_rxm".into(),
            addr: vec![2, 0, 0x1f, 0x90, 10, 0, 0, 1],
            key: 0xDEAD_BEEF_0000_0001,
            base: 0x7f00_0000_0000,
            size: 1 << 30,
            signal_msg: true,
            remote_data: true,
            amo_msg: true,
        };
        let b = postcard::to_stdvec(&c).unwrap();
        assert_eq!(postcard::from_bytes::<PeerCard>(&b).unwrap(), c);
        assert!(postcard::from_bytes::<PeerCard>(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn a_spinning_sockets_provider_on_few_cores_is_named() {
        let w = sockets_spin_warning("sockets", false, 2, 2).expect("warned");
        assert!(w.contains("FI_SOCKETS_PE_WAITTIME=0"), "{w}");
        // Set by the user, another provider, or cores to spare: quiet.
        assert!(sockets_spin_warning("sockets", true, 2, 2).is_none());
        assert!(sockets_spin_warning("tcp;ofi_rxm", false, 2, 2).is_none());
        assert!(sockets_spin_warning("sockets", false, 2, 16).is_none());
        assert!(sockets_spin_warning("sockets", false, 8, 16).is_some());
    }

    #[test]
    fn merged_wakes_cover_every_range() {
        let covers = |s: &Spans, off: u64, len: u64| {
            s.iter()
                .any(|&(o, l)| l > 0 && o <= off && off + len <= o + l)
        };
        // Same and touching ranges join; a distant one takes the free slot.
        let mut s: Spans = [(4096, 8), (0, 0)];
        merge_spans(&mut s, &[(4096, 8), (0, 0)]);
        assert_eq!(s, [(4096, 8), (0, 0)]);
        merge_spans(&mut s, &[(4104, 8), (0, 0)]);
        assert_eq!(s, [(4096, 16), (0, 0)]);
        merge_spans(&mut s, &[(1 << 20, 64), (0, 0)]);
        assert_eq!(s, [(4096, 16), (1 << 20, 64)]);
        // With both slots taken, a third range widens the nearest one.
        merge_spans(&mut s, &[(8192, 8), (9000, 100)]);
        for (off, len) in [(4096, 16), (1 << 20, 64), (8192, 8), (9000, 100)] {
            assert!(covers(&s, off, len), "{s:?} misses {off}+{len}");
        }
        assert_eq!(s[1], (1 << 20, 64), "{s:?}");
        // Empty ranges change nothing.
        let before = s;
        merge_spans(&mut s, &[(0, 0), (0, 0)]);
        assert_eq!(s, before);
    }

    #[test]
    fn mr_modes_are_named() {
        assert_eq!(mr_mode_names(0), "none (offsets, requested keys)");
        assert_eq!(
            mr_mode_names(FI_MR_VIRT_ADDR | FI_MR_PROV_KEY),
            "FI_MR_VIRT_ADDR|FI_MR_PROV_KEY"
        );
    }

    #[test]
    fn atomic_messages_name_every_op() {
        let ops = [
            AmoOp::Fetch,
            AmoOp::Set(7),
            AmoOp::Swap(9),
            AmoOp::CompareSwap { cond: 5, value: 6 },
            AmoOp::CompareSwap { cond: 1, value: 6 },
            AmoOp::Add(u64::MAX),
            AmoOp::And(4),
            AmoOp::Or(8),
            AmoOp::Xor(5),
        ];
        for op in ops {
            let (code, operand, compare) = crate::wire::amo_code(op);
            assert_eq!(crate::wire::amo_decode(code, operand, compare), Some(op));
        }
        assert_eq!(crate::wire::amo_decode(8, 0, 0), None);
    }

    #[test]
    fn remote_data_names_the_written_range() {
        let heap = 1 << 30;
        assert_eq!(remote_range(remote_data(4096, 8), heap), Some((4096, 8)));
        // Long writes ring to the end of the heap.
        assert_eq!(
            remote_range(remote_data(4096, 1 << 26), heap),
            Some((4096, heap - 4096))
        );
        assert_eq!(remote_range(remote_data(heap - 8, 16), heap), None);
    }

    #[test]
    fn emulated_atomics_compute_like_the_cpu() {
        let w = AmoWidth::W32;
        assert_eq!(apply(AmoOp::Add(1), 0xFFFF_FFFF, w), 0);
        assert_eq!(apply(AmoOp::And(0xF0), 0xFF, w), 0xF0);
        assert_eq!(apply(AmoOp::Or(0x0F), 0xF0, w), 0xFF);
        assert_eq!(apply(AmoOp::Xor(0xFF), 0x0F, w), 0xF0);
        assert_eq!(apply(AmoOp::Swap(7), 3, w), 7);
        let cas = AmoOp::CompareSwap { cond: 3, value: 9 };
        assert_eq!(apply(cas, 3, AmoWidth::W64), 9);
        assert_eq!(apply(cas, 4, AmoWidth::W64), 4);
    }

    /// With libfabric installed, probing finds a provider and names it;
    /// a bogus `FI_PROVIDER` is reported clearly (checked in a child
    /// process, since libfabric reads its environment once).
    #[test]
    fn probe_names_the_provider_or_says_why_not() {
        match probe(None) {
            Ok(f) => assert!(!f.provider.is_empty()),
            Err(why) => {
                assert!(
                    why.contains("libfabric") || why.contains("fi_getinfo"),
                    "{why}"
                );
                eprintln!("libfabric not usable here: {why}");
            }
        }
    }
}
