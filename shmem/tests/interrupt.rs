//! `shmem_core::wait::interruptible`: the check a binding installs ends a
//! sleeping wait with `Error::Interrupted`, is never consulted by a wait
//! that does not sleep, and is gone once the scope ends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmem::{Builder, Config};
use shmem_core::transport::Cmp;
use shmem_core::wait::interruptible;
use shmem_core::{Error, SymRef};

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Asks the wait to end on its third consultation.
fn third_time() -> bool {
    CALLS.fetch_add(1, Ordering::SeqCst) + 1 >= 3
}

#[test]
fn a_sleeping_wait_ends_when_the_installed_check_asks() {
    let job = shmem_testkit::InProcessJob::new(1, Duration::from_secs(60));
    let config = Config::from_lookup(|name| match name {
        // Sleeps of 5 ms between consultations; a wait that is not
        // interrupted gives up after 300 ms.
        "SHMEM_WAIT_POLL" => Some("0.005".into()),
        "SHMEM_WAIT_TIMEOUT" => Some("0.3".into()),
        _ => None,
    })
    .unwrap();
    let sh = Builder::new()
        .bootstrap(Arc::new(job.member(0).unwrap()))
        .instance(91)
        .config(config)
        .init()
        .unwrap();
    let x = sh.calloc::<u64>(1).unwrap();
    let r = SymRef::from(&x);

    // Met at once: the wait never sleeps, so the check is never consulted.
    sh.write_local(&x, &[7]).unwrap();
    interruptible(third_time, || sh.wait_until(r, Cmp::Eq, 7)).unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 0);

    // Never met: consulted while it sleeps, and the third answer ends it.
    let t = Instant::now();
    let e = interruptible(third_time, || sh.wait_until(r, Cmp::Eq, 8)).unwrap_err();
    assert!(matches!(e, Error::Interrupted { .. }), "{e}");
    assert!(e.to_string().contains("did not complete"), "{e}");
    assert_eq!(CALLS.load(Ordering::SeqCst), 3);
    assert!(
        t.elapsed() < Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );

    // Outside the scope the check is gone: the same wait times out.
    let e = sh.wait_until(r, Cmp::Eq, 8).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(CALLS.load(Ordering::SeqCst), 3);

    // Scopes nest: the inner check applies inside, the outer one after it.
    fn never() -> bool {
        false
    }
    let e = interruptible(never, || {
        interruptible(third_time, || sh.wait_until(r, Cmp::Eq, 8))
    })
    .unwrap_err();
    assert!(matches!(e, Error::Interrupted { .. }), "{e}");
    let e = interruptible(never, || sh.wait_until(r, Cmp::Eq, 8)).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");

    sh.free(x).unwrap();
    sh.finalize().unwrap();
}
