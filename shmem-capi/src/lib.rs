//! The OpenSHMEM 1.5 C ABI of `shmem`: `libshmem.so` with `include/shmem.h`
//! (and `include/shmemx.h` for extensions), plus the `oshcc` and `oshrun`
//! wrapper scripts in `bin/`.
//!
//! The shared object is built as `libshmem_capi.so` (the name `shmem` is
//! taken by the facade crate) with the SONAME `libshmem.so`; `oshcc` puts a
//! `libshmem.so` link next to it, so C programs link with `-lshmem`:
//!
//! ```sh
//! cargo build --release -p shmem-capi -p shmem-launch
//! shmem-capi/bin/oshcc -o hello hello.c
//! shmem-capi/bin/oshrun -np 4 ./hello
//! ```
//!
//! ```c
//! #include <shmem.h>
//! #include <stdio.h>
//! static long counter;                     /* static data is symmetric too */
//! int main(void) {
//!     shmem_init();
//!     shmem_long_atomic_inc(&counter, 0);  /* every PE bumps PE 0's copy */
//!     shmem_barrier_all();
//!     if (shmem_my_pe() == 0) printf("%ld\n", counter);
//!     shmem_finalize();
//!     return 0;
//! }
//! ```
//!
//! How it maps onto the Rust library:
//!
//! * A symmetric address is either in the symmetric heap (an offset for the
//!   runtime's checked byte API) or in the main program's writable
//!   `PT_LOAD` segments (data and bss), whose bounds every PE exchanges at
//!   init; a static address on another PE is reached with the SDMA
//!   engine's `process_vm_writev`/`readv`, and atomics on it are served by
//!   the owning PE's AMO service thread (see [`statics`]).
//! * Typed families are generated once by macros (`typed_*!`) from the type
//!   tables that `shmem.h` also uses; every typed entry point converts to
//!   bytes and calls one generic function.
//! * Contexts share the PE's runtime; a context made from a team numbers
//!   PEs within that team, as the standard requires.
//! * Whatever the standard leaves undefined (a non-symmetric address, a PE
//!   out of range, a call before `shmem_init`) prints one line naming the
//!   call and ends the job with `shmem_global_exit(1)`. A Rust panic never
//!   crosses the C boundary: it is caught and reported the same way.

pub mod statics;

mod active;
mod amo;
mod coll;
mod ext;
mod rma;
mod setup;
mod state;
mod sync;
mod types;

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) use state::State;

/// A C `shmem_team_t`: 0 invalid, 1 world, 2 shared, else a leaked box.
pub(crate) type TeamHandle = *mut c_void;
/// A C `shmem_ctx_t`: 0 invalid, 1 the default context, else a leaked box.
pub(crate) type CtxHandle = *mut c_void;

pub(crate) const TEAM_INVALID: TeamHandle = std::ptr::null_mut();
pub(crate) const TEAM_WORLD: TeamHandle = 1 as TeamHandle;
pub(crate) const TEAM_SHARED: TeamHandle = 2 as TeamHandle;
pub(crate) const CTX_DEFAULT: CtxHandle = 1 as CtxHandle;

/// Runs the body of a C entry point: looks up the initialised PE, and turns
/// an error or a panic into a message and `shmem_global_exit(1)`.
// Always inlined: each exported function gets its own copy (the closure
// differs anyway), without a call between the C entry and the body.
#[inline(always)]
pub(crate) fn ffi<R>(name: &'static str, body: impl FnOnce(&State) -> shmem::Result<R>) -> R {
    match catch_unwind(AssertUnwindSafe(|| match state::current() {
        Ok(st) => body(st).map_err(|e| {
            state::quiet_if_aborted_elsewhere(st, &e);
            e.to_string()
        }),
        Err(()) => Err(state::not_initialized_text()),
    })) {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => state::fatal(name, &msg),
        Err(panic) => state::fatal(name, &panic_text(&panic)),
    }
}

/// Like [`ffi`] for calls that report failure with a status: an error is
/// printed and gives `-1`; only a panic or a missing `shmem_init` ends the job.
pub(crate) fn ffi_status(
    name: &'static str,
    body: impl FnOnce(&State) -> shmem::Result<()>,
) -> c_int {
    ffi(name, |st| {
        Ok(match body(st) {
            Ok(()) => 0,
            Err(e) => {
                state::quiet_if_aborted_elsewhere(st, &e);
                eprintln!("shmem: PE {}: {name}: {e}", st.rt.my_pe());
                -1
            }
        })
    })
}

/// Runs code that needs no initialised PE, catching panics.
pub(crate) fn ffi_bare<R>(name: &'static str, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(panic) => state::fatal(name, &panic_text(&panic)),
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error (panic): {what}")
}

/// Version of this library (`SHMEM_VENDOR_*_VERSION` in `shmem.h`).
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
