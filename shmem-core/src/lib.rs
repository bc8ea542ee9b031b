//! Contracts and runtime of the `shmem` symmetric-memory library.
//!
//! This crate defines the three traits every other crate plugs into:
//!
//! * [`Bootstrap`]: the control plane (rank, size, allgather, barrier,
//!   broadcast, liveness), implemented by `shmem-bootstrap`;
//! * [`Heap`]: the symmetric heap's memory and how it is exported to peers
//!   ([`MemfdHeap`] is the Linux backing);
//! * [`Transport`]: one data engine (HCCS, SDMA, RoCE), registered at link
//!   time with [`inventory`] through a [`TransportRegistration`].
//!
//! On top of them, [`Runtime`] is one PE of a job: it builds the heap, asks
//! every linked engine whether it reaches each peer, fixes a per-peer route
//! once (or forces `SHMEM_TEST_ENGINE` for all), and offers checked, typed
//! put/get, atomics, signals and waits over [`SymBuf`] handles.
//!
//! Users normally depend on the facade crate `shmem`. A transport crate
//! registers itself like this:
//!
//! ```
//! use std::sync::Arc;
//! use shmem_core::{Result, Transport, TransportInit, TransportRegistration};
//!
//! fn create(_init: &TransportInit<'_>) -> Result<Arc<dyn Transport>> {
//!     Err(shmem_core::Error::Unsupported("example engine".into()))
//! }
//!
//! shmem_core::inventory::submit! {
//!     TransportRegistration { name: "EXAMPLE", priority: 1, create }
//! }
//!
//! assert!(shmem_core::transport::registered().iter().any(|r| r.name == "EXAMPLE"));
//! ```

#![warn(clippy::missing_errors_doc)]

pub mod bootstrap;
pub mod completion;
pub mod config;
pub mod error;
pub mod heap;
pub mod loadstore;
pub mod log;
pub mod net;
pub mod node_heaps;
pub mod placement;
pub mod plugin;
pub mod runtime;
pub mod stream;
pub mod sym;
pub mod topology;
pub mod transport;
pub mod wait;
pub mod wire;

pub use inventory;
pub use tracing;

pub use bootstrap::{
    Activity, ActivityGuard, ActivityState, Bootstrap, DeferGuard, HangPolicy, PeerHealth,
};
pub use completion::{Completion, Failed, Handle};
pub use config::Config;
pub use error::{Error, Result};
pub use heap::{Heap, HeapExport, HeapRegistration, MemfdHeap};
pub use runtime::{as_bytes, as_bytes_mut, MemType, Runtime, RuntimeOptions, RuntimeParts};
pub use stream::{Event, Stream};
pub use sym::{
    AtomicElement, AtomicInteger, Element, Signal, SymBuf, SymRef, SymSlice, WaitElement,
};
pub use topology::Topology;
pub use transport::{
    AmoOp, AmoWidth, Capabilities, Cmp, SignalOp, Transport, TransportInit, TransportRegistration,
};

/// Index of a PE (processing element, one process) in `0..n_pes`.
pub type PeId = usize;
