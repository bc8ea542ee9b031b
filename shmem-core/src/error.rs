//! The error type every crate of the library returns.

use std::io;
use std::sync::Arc;

use crate::PeId;

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a shmem call.
///
/// Messages name the PE, offset, size or key involved so that a failure in a
/// job of many processes can be traced to its cause from one line.
///
/// Errors clone (an OS error's source is shared), so that one failure can
/// reach every waiter of a completion with its kind intact.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument is outside what the call accepts.
    #[error("invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The argument's name as the caller sees it.
        arg: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A PE number outside `0..n_pes`.
    #[error("PE {pe} is out of range: the job has {n_pes} PEs (valid 0..{n_pes})")]
    PeOutOfRange {
        /// The PE that was named.
        pe: PeId,
        /// Number of PEs in the job (or team).
        n_pes: usize,
    },
    /// An access that falls outside the symmetric heap.
    #[error(
        "address range [{offset:#x}, {offset:#x}+{len}) is outside the symmetric heap of {heap_size} bytes"
    )]
    OutOfHeap {
        /// Offset into the heap where the access starts.
        offset: usize,
        /// Length of the access in bytes.
        len: usize,
        /// Size of the symmetric heap.
        heap_size: usize,
    },
    /// A pointer that does not point into the symmetric heap.
    #[error("address {addr:#x} is not in the symmetric heap [{base:#x}, {base:#x}+{heap_size})")]
    NotSymmetric {
        /// The offending address.
        addr: usize,
        /// Base of this PE's symmetric heap.
        base: usize,
        /// Size of the symmetric heap.
        heap_size: usize,
    },
    /// An atomic on an address that is not aligned to its width.
    #[error("atomic of {width} bytes at heap offset {offset:#x} is misaligned (needs {width}-byte alignment)")]
    Misaligned {
        /// Heap offset of the access.
        offset: usize,
        /// Required alignment in bytes.
        width: usize,
    },
    /// The symmetric heap cannot satisfy an allocation.
    #[error("symmetric heap exhausted: asked for {requested} bytes (alignment {align}), {free} bytes free of {heap_size}, largest free block {largest} bytes; raise SHMEM_SYMMETRIC_SIZE")]
    OutOfMemory {
        /// Bytes requested.
        requested: usize,
        /// Alignment requested.
        align: usize,
        /// Free bytes in total.
        free: usize,
        /// Largest contiguous free block.
        largest: usize,
        /// Size of the symmetric heap.
        heap_size: usize,
    },
    /// `free` (or `realloc`) of an offset that is not a live allocation.
    #[error("free of heap offset {offset:#x}, which is not a live allocation (double free or not allocated by shmem)")]
    InvalidFree {
        /// Offset that was passed.
        offset: usize,
    },
    /// A handle (or a view of it) used after its object was freed.
    #[error("symmetric object at heap offset {offset:#x} was freed: this handle and every view of it are stale (use after free)")]
    UseAfterFree {
        /// Heap offset the stale handle names.
        offset: usize,
    },
    /// A heap range outside every live allocation (`SHMEM_DEBUG=1` checks).
    #[error("heap range [{offset:#x}, +{len}) is not inside a live allocation: use after free, or never allocated (SHMEM_DEBUG)")]
    NotAllocated {
        /// Start of the range.
        offset: usize,
        /// Its length.
        len: usize,
    },
    /// PEs called a collective with different arguments.
    #[error("collective `{op}` called with different arguments across PEs: {details}")]
    CollectiveMismatch {
        /// The collective operation.
        op: &'static str,
        /// Which PEs passed what.
        details: String,
    },
    /// The library has not been initialised (or has been finalised).
    #[error("shmem is not initialized (call init first; finalize ends the runtime)")]
    NotInitialized,
    /// `init` was called twice for the same instance.
    #[error("shmem instance {0} is already initialized")]
    AlreadyInitialized(u32),
    /// A symmetric object used with a runtime instance that did not allocate it.
    #[error("symmetric object belongs to instance {object} but was used with instance {runtime}")]
    WrongInstance {
        /// Instance that allocated the object.
        object: u32,
        /// Instance it was used with.
        runtime: u32,
    },
    /// A configuration variable could not be parsed or is out of range.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Config {
        /// Variable name.
        name: &'static str,
        /// The value found.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// `SHMEM_TEST_ENGINE` or a route names an engine that is not usable.
    #[error(
        "transport engine {requested:?} is not available: {reason}; linked engines: {available}"
    )]
    EngineUnavailable {
        /// What was asked for.
        requested: String,
        /// Why it cannot be used.
        reason: String,
        /// The engines linked into this program.
        available: String,
    },
    /// No linked transport can reach a PE.
    #[error("no transport can reach PE {pe} (linked engines: {available})")]
    Unreachable {
        /// The PE that cannot be reached.
        pe: PeId,
        /// Engines linked into this program.
        available: String,
    },
    /// A peer process exited or lost its connection while the job was running.
    #[error("PE {pe} exited: {detail}")]
    PeerExited {
        /// The PE that is gone.
        pe: PeId,
        /// How it ended, as far as is known.
        detail: String,
    },
    /// The job was ended by `global_exit` on some PE.
    #[error("job aborted by PE {pe} with status {status}: {message}")]
    Aborted {
        /// PE that called `global_exit`.
        pe: PeId,
        /// Status it passed.
        status: i32,
        /// Its message.
        message: String,
    },
    /// A wait ended because the check a binding installed with
    /// [`crate::wait::interruptible`] asked it to (a signal handler raised
    /// in Python); the call that waited did not complete.
    #[error("interrupted while it waited: {what} did not complete")]
    Interrupted {
        /// What was waiting.
        what: String,
    },
    /// A bootstrap operation did not complete in time.
    #[error("timed out after {secs:.1}s: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// Seconds waited.
        secs: f64,
    },
    /// The config store rejected this PE or spoke an unexpected protocol.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A UniqueId or URL could not be parsed.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being parsed ("UniqueId", "bootstrap URL").
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A control-plane message or id from a peer (or a store, or a
    /// UniqueId) speaks another version of the control-plane protocol.
    #[error("{what}: the peer speaks control-plane protocol version {theirs}, this library speaks version {ours}; run the same shmem build on every PE")]
    ProtocolMismatch {
        /// What was being decoded.
        what: &'static str,
        /// The version found in the message.
        theirs: u16,
        /// The version this library speaks.
        ours: u16,
    },
    /// A system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The call or step that failed.
        call: String,
        /// The OS error.
        #[source]
        source: Arc<io::Error>,
    },
    /// A transport reported a failure of its own.
    #[error("transport {engine}: {reason}")]
    Transport {
        /// Engine name.
        engine: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// An operation inside a stream failed (reported at synchronize).
    #[error("stream operation #{seq} ({op}) failed: {reason}")]
    StreamOp {
        /// Position of the operation in the stream.
        seq: u64,
        /// What it was.
        op: String,
        /// Why it failed.
        reason: String,
    },
    /// A transport plugin could not be loaded (`SHMEM_TRANSPORT_PLUGINS`).
    #[error("transport plugin {path}: {reason}")]
    Plugin {
        /// The shared library.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// An operation this transport or build does not support.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl Error {
    /// Builds [`Error::InvalidArgument`].
    pub fn invalid(arg: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            arg,
            reason: reason.into(),
        }
    }

    /// Builds [`Error::Os`] from the last OS error.
    pub fn last_os(call: impl Into<String>) -> Self {
        Error::Os {
            call: call.into(),
            source: Arc::new(io::Error::last_os_error()),
        }
    }

    /// Builds [`Error::Os`] from an `io::Error`.
    pub fn os(call: impl Into<String>, source: io::Error) -> Self {
        Error::Os {
            call: call.into(),
            source: Arc::new(source),
        }
    }
}
