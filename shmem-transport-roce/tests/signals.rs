//! Loading libfabric leaves the process's signal handlers as they were.
//! (Debian's libfabric links PSM, whose `libinfinipath` installs SIGINT,
//! SIGTERM, SIGSEGV and SIGBUS handlers of its own when it is loaded; its
//! SIGINT handler exits the process with status 1.) A test binary of its
//! own: the check needs a process that has not loaded libfabric yet.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: c_int) {
    CAUGHT.store(sig, Ordering::SeqCst);
}

fn disposition(sig: c_int) -> libc::sighandler_t {
    // SAFETY: reads the disposition into a zeroed sigaction we own.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut now), 0);
        now.sa_sigaction
    }
}

#[test]
fn loading_libfabric_keeps_the_applications_signal_handlers() {
    let handler = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
    // SAFETY: installs a handler that only stores to an atomic, and ignores
    // SIGTERM; neither has memory-safety implications.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    // Rust's own (stack overflow report) or the default.
    let segv = disposition(libc::SIGSEGV);
    let bus = disposition(libc::SIGBUS);
    // Loads the library and lists its providers (every provider's init).
    if let Err(why) = shmem_transport_roce::ofi::probe(None) {
        if why.contains("libfabric not found") {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test with libfabric installed: {why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
    }
    assert_eq!(
        disposition(libc::SIGINT),
        handler,
        "SIGINT handler replaced"
    );
    assert_eq!(
        disposition(libc::SIGTERM),
        libc::SIG_IGN,
        "SIGTERM no longer ignored"
    );
    assert_eq!(disposition(libc::SIGSEGV), segv, "SIGSEGV handler replaced");
    assert_eq!(disposition(libc::SIGBUS), bus, "SIGBUS handler replaced");
    // And the handler still runs: under libinfinipath's, this exits with 1.
    // SAFETY: raising a signal whose handler is ours.
    unsafe { libc::raise(libc::SIGINT) };
    assert_eq!(CAUGHT.load(Ordering::SeqCst), libc::SIGINT);
}
