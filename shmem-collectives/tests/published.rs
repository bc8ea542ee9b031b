//! Broadcasts on one node are published by the root and copied by the
//! members (`src/push.rs`): interleavings with other collectives and with
//! other roots, and every way the PEs can disagree, end in data or errors,
//! never a hang (each wait has a hard timeout here).

mod common;

use std::time::Duration;

use shmem_core::{Error, Result};

fn cfg(dissemination: bool) -> shmem_core::Config {
    common::config(move |c| {
        if dissemination {
            // As on a machine with a core per PE: the dissemination
            // handshake, which reuses its words by call parity.
            c.barrier_algorithm = "dissemination".into();
            c.node_cores = 64;
        }
        c.wait_timeout = Duration::from_secs(20);
    })
}

fn is_mismatch(r: &Result<()>) -> bool {
    matches!(r, Err(Error::CollectiveMismatch { .. }))
}

#[test]
fn barriers_and_broadcasts_alternate_under_the_dissemination_handshake() {
    for n in [3, 4, 5] {
        let out = common::run(n, cfg(true), |rt, coll| -> Result<()> {
            let d = rt.malloc::<u64>(1)?;
            let s = rt.malloc::<u64>(1)?;
            for i in 0..3000u64 {
                rt.write_local(&s, &[i * 7 + 1])?;
                coll.barrier_all()?;
                coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, (i % 3) as usize)?;
                assert_eq!(rt.read_local(&d)?, vec![i * 7 + 1]);
            }
            coll.barrier_all()
        });
        assert!(out.iter().all(|r| r.is_ok()), "{n} PEs: {out:?}");
    }
}

#[test]
fn back_to_back_broadcasts_from_one_root_deliver_every_value() {
    // The root checks a publish's receipts only after its next publish
    // (the buffers alternate), so it may run a call ahead of its members.
    for (n, dissemination, count) in [(2, true, 1), (2, true, 64), (3, false, 1), (4, true, 7)] {
        let out = common::run(n, cfg(dissemination), move |rt, coll| -> Result<()> {
            let d = rt.malloc::<u64>(count)?;
            let s = rt.malloc::<u64>(count)?;
            let me = rt.my_pe() as u64;
            let root = rt.n_pes() - 1;
            for i in 0..4000u64 {
                rt.write_local(&s, &vec![i * 1000 + me; count])?;
                coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, root)?;
                assert_eq!(rt.read_local(&d)?, vec![i * 1000 + root as u64; count]);
            }
            coll.barrier_all()
        });
        assert!(out.iter().all(|r| r.is_ok()), "{n} PEs x {count}: {out:?}");
    }
}

#[test]
fn a_root_broadcasting_again_reports_a_members_mismatch_two_calls_late() {
    // Call 3 of 8 from root 0: PE 1 passes another count and fails at once.
    // Root 0's call 4 is another small publish, which waits only for the
    // receipts of call 2; call 5 checks call 3's, fails on the root and,
    // published with "invalid arguments", on every member. Then all agree
    // again.
    for n in [2, 3] {
        let out = common::run(n, cfg(true), |rt, coll| -> Result<Vec<bool>> {
            let d = rt.malloc::<u64>(4)?;
            let s = rt.malloc::<u64>(4)?;
            let me = rt.my_pe();
            let mut oks = vec![];
            for k in 0..8u64 {
                rt.write_local(&s, &[k; 4])?;
                let count = if k == 3 && me == 1 { 2 } else { 1 };
                let r = coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, 0);
                if r.is_ok() {
                    assert_eq!(rt.read_local(&d)?[0], k, "PE {me}, call {k}");
                }
                oks.push(r.is_ok());
            }
            coll.barrier_all()?;
            Ok(oks)
        });
        let out: Vec<Vec<bool>> = out.into_iter().map(|r| r.unwrap()).collect();
        for (pe, oks) in out.iter().enumerate() {
            for (k, ok) in oks.iter().enumerate() {
                let want = !(k == 5 || (k == 3 && pe == 1));
                assert_eq!(*ok, want, "{n} PEs: PE {pe}, call {k}: {out:?}");
            }
        }
    }
}

#[test]
fn back_to_back_broadcasts_from_rotating_roots_deliver_every_value() {
    for (n, count) in [(3, 1), (4, 300), (8, 1), (3, 5000)] {
        let out = common::run(n, cfg(false), move |rt, coll| -> Result<()> {
            let d = rt.malloc::<u64>(count)?;
            let s = rt.malloc::<u64>(count)?;
            let me = rt.my_pe() as u64;
            for i in 0..300u64 {
                let root = (i as usize * 7) % rt.n_pes();
                rt.write_local(&s, &vec![i * 1000 + me; count])?;
                coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, root)?;
                assert_eq!(rt.read_local(&d)?, vec![i * 1000 + root as u64; count]);
            }
            coll.barrier_all()
        });
        assert!(out.iter().all(|r| r.is_ok()), "{n} PEs x {count}: {out:?}");
    }
}

#[test]
fn crossed_roots_fail_on_every_pe() {
    let out = common::run(3, cfg(false), |rt, coll| {
        let d = rt.malloc::<u64>(1)?;
        let s = rt.malloc::<u64>(1)?;
        let root = [1, 0, 1][rt.my_pe()];
        let r = coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, root);
        coll.barrier_all()?;
        Ok(r)
    });
    for (pe, r) in out.into_iter().enumerate() {
        assert!(is_mismatch(&r.expect("barrier after")), "PE {pe}");
    }
}

#[test]
fn a_named_root_that_names_a_root_outside_the_team_fails_everyone() {
    let out = common::run(3, cfg(false), |rt, coll| {
        let d = rt.malloc::<u64>(1)?;
        let s = rt.malloc::<u64>(1)?;
        let root = if rt.my_pe() == 1 { 7 } else { 1 };
        let r = coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, root);
        coll.barrier_all()?;
        Ok(r)
    });
    let out: Vec<Result<()>> = out.into_iter().map(|r| r.expect("barrier after")).collect();
    assert!(
        matches!(out[1], Err(Error::PeOutOfRange { pe: 7, .. })),
        "{out:?}"
    );
    assert!(is_mismatch(&out[0]) && is_mismatch(&out[2]), "{out:?}");
}

#[test]
fn counts_on_both_sides_of_the_published_size_fail_without_a_hang() {
    let out = common::run(2, cfg(false), |rt, coll| {
        let d = rt.malloc::<u64>(300)?;
        let s = rt.malloc::<u64>(300)?;
        let count = if rt.my_pe() == 0 { 256 } else { 257 };
        let r = coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, 0);
        let next = coll.barrier_all();
        Ok((r, next))
    });
    let out: Vec<(Result<()>, Result<()>)> = out.into_iter().map(|r| r.unwrap()).collect();
    // The member fails at once; the root (which returned) at its next call,
    // which then fails on the member too.
    assert!(out[0].0.is_ok() && is_mismatch(&out[0].1), "{out:?}");
    assert!(is_mismatch(&out[1].0) && is_mismatch(&out[1].1), "{out:?}");
}

#[test]
fn one_bad_call_fails_only_that_call_and_the_roots_next_one() {
    // PE 2 passes another count in call 0 (root 0); then the roots rotate.
    // The error must not travel on from root to root.
    let out = common::run(3, cfg(false), |rt, coll| -> Result<Vec<bool>> {
        let d = rt.malloc::<u64>(4)?;
        let s = rt.malloc::<u64>(4)?;
        let mut oks = vec![];
        let count = if rt.my_pe() == 2 { 2 } else { 1 };
        oks.push(
            coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, 0)
                .is_ok(),
        );
        for k in 1..12 {
            if rt.my_pe() == k % 3 {
                std::thread::sleep(Duration::from_millis(5));
            }
            oks.push(
                coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, k % 3)
                    .is_ok(),
            );
        }
        Ok(oks)
    });
    let out: Vec<Vec<bool>> = out.into_iter().map(|r| r.unwrap()).collect();
    // Call 0: PE 0 (root) and PE 1 agree; PE 2 fails. Call 1 is PE 0's
    // next call: as a member there it copies its data and then reports the
    // mismatch of call 0; nobody else fails. Every later call succeeds.
    for (pe, oks) in out.iter().enumerate() {
        for (k, ok) in oks.iter().enumerate() {
            let want = match k {
                0 => pe != 2,
                1 => pe != 0,
                _ => true,
            };
            assert_eq!(*ok, want, "PE {pe}, call {k}: {out:?}");
        }
    }
}

#[test]
fn a_slow_root_still_reports_a_members_mismatch() {
    // The root checks its receipts late, after the member has gone through
    // two more broadcasts under another root: the receipt must still be
    // there (it lives in the root's memory).
    for _ in 0..3 {
        let out = common::run(3, cfg(false), |rt, coll| -> Result<Vec<bool>> {
            let d = rt.malloc::<u64>(4)?;
            let s = rt.malloc::<u64>(4)?;
            let count = if rt.my_pe() == 2 { 2 } else { 1 };
            let mut oks = vec![coll
                .broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, 0)
                .is_ok()];
            if rt.my_pe() == 0 {
                std::thread::sleep(Duration::from_millis(50));
            }
            for _ in 0..3 {
                oks.push(
                    coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, 1)
                        .is_ok(),
                );
            }
            oks.push(coll.barrier_all().is_ok());
            Ok(oks)
        });
        let out: Vec<Vec<bool>> = out.into_iter().map(|r| r.unwrap()).collect();
        assert!(!out[2][0], "{out:?}");
        // Root 0's next call is the first broadcast under root 1: it fails
        // there (the call itself still completes for the others).
        assert!(!out[0][1], "the root lost the mismatch: {out:?}");
        assert!(
            out.iter().all(|o| o[4]),
            "the team is in step afterwards: {out:?}"
        );
    }
}

#[test]
fn a_root_with_bad_arguments_and_a_slow_member_do_not_hang() {
    let out = common::run(3, cfg(false), |rt, coll| -> Result<Vec<bool>> {
        let d = rt.malloc::<u64>(4)?;
        let s = rt.malloc::<u64>(4)?;
        let me = rt.my_pe();
        // Root 0's dest is too small in call 0.
        let dest = if me == 0 { d.slice(..0)? } else { d.as_sym() };
        if me == 2 {
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(vec![
            coll.broadcast(&coll.world(), dest, s.as_sym(), 1, 0)
                .is_ok(),
            coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, 1)
                .is_ok(),
            coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, 0)
                .is_ok(),
            coll.barrier_all().is_ok(),
        ])
    });
    let out: Vec<Vec<bool>> = out.into_iter().map(|r| r.unwrap()).collect();
    for (pe, o) in out.iter().enumerate() {
        assert_eq!(o, &vec![false, true, true, true], "PE {pe}: {out:?}");
    }
}

/// Whether every call on every PE returned (data or an error) instead of
/// timing out: a hang here would be `Error::Timeout`.
fn none_timed_out(out: &[Result<Vec<Result<()>>>]) -> bool {
    out.iter().all(|r| match r {
        Ok(v) => v.iter().all(|x| !matches!(x, Err(Error::Timeout { .. }))),
        Err(e) => !matches!(e, Error::Timeout { .. }),
    })
}

#[test]
fn a_member_with_bad_arguments_waits_before_it_writes_its_receipt() {
    // PE 0 checks the receipts of call 0 late; meanwhile PE 2 goes through
    // call 1 (root 1) and names PE 0 again in call 2 with a bad dest: its
    // receipt of call 2 must not replace the unread one of call 0.
    let out = common::run(3, cfg(false), |rt, coll| -> Result<Vec<Result<()>>> {
        let d = rt.malloc::<u64>(4)?;
        let s = rt.malloc::<u64>(4)?;
        let me = rt.my_pe();
        let mut r = vec![coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, 0)];
        if me == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        r.push(coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, 1));
        let dest = if me == 2 { d.slice(..0)? } else { d.as_sym() };
        r.push(coll.broadcast(&coll.world(), dest, s.as_sym(), 1, 0));
        r.push(coll.barrier_all());
        Ok(r)
    });
    assert!(none_timed_out(&out), "{out:?}");
    let out: Vec<Vec<Result<()>>> = out.into_iter().map(|r| r.unwrap()).collect();
    assert!(out.iter().all(|o| o[0].is_ok() && o[1].is_ok()), "{out:?}");
    assert!(out[2][2].is_err(), "{out:?}");
}

#[test]
fn a_pe_that_named_another_root_and_moved_on_is_still_reported() {
    // PE 2 names root 1 in call 0 (PEs 0 and 1 name root 0), then all go
    // through two broadcasts of root 1 while PE 0 is slow to check.
    let out = common::run(3, cfg(false), |rt, coll| -> Result<Vec<Result<()>>> {
        let d = rt.malloc::<u64>(4)?;
        let s = rt.malloc::<u64>(4)?;
        let me = rt.my_pe();
        let root = [0, 0, 1][me];
        let mut r = vec![coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, root)];
        if me == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        for _ in 0..2 {
            r.push(coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), 1, 1));
        }
        r.push(coll.barrier_all());
        Ok(r)
    });
    assert!(none_timed_out(&out), "{out:?}");
    let out: Vec<Vec<Result<()>>> = out.into_iter().map(|r| r.unwrap()).collect();
    assert!(
        out[2][0].is_err(),
        "PE 2 named a PE that is not the root: {out:?}"
    );
    assert!(
        out[0][1].is_err(),
        "the root reports PE 2 at its next call: {out:?}"
    );
    assert!(
        out.iter().all(|o| o[3].is_ok()),
        "in step afterwards: {out:?}"
    );
}

#[test]
fn an_invalid_root_and_a_member_naming_a_root_out_of_range_do_not_hang() {
    let out = common::run(3, cfg(false), |rt, coll| -> Result<Vec<Result<()>>> {
        let d = rt.malloc::<u64>(4)?;
        let s = rt.malloc::<u64>(4)?;
        let me = rt.my_pe();
        let root = [0, 0, 7][me];
        let dest = if me == 0 { d.slice(..0)? } else { d.as_sym() };
        Ok(vec![
            coll.broadcast(&coll.world(), dest, s.as_sym(), 1, root),
            coll.barrier_all(),
        ])
    });
    assert!(none_timed_out(&out), "{out:?}");
    let out: Vec<Vec<Result<()>>> = out.into_iter().map(|r| r.unwrap()).collect();
    assert!(out.iter().all(|o| o[0].is_err() && o[1].is_ok()), "{out:?}");
}
