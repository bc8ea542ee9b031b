//! Mismatched or invalid arguments are errors on every PE, never corruption
//! or a hang, and the team stays usable afterwards.

mod common;

use shmem_collectives::ReduceOp;
use shmem_core::{Error, Result};

fn is_mismatch(e: &Error) -> bool {
    matches!(e, Error::CollectiveMismatch { .. })
}

/// Runs `bad` then a correct barrier + broadcast on every PE of a job of `n`;
/// returns what `bad` returned on each PE.
fn after_recovery<F>(n: usize, bad: F) -> Vec<Result<()>>
where
    F: Fn(&shmem_core::Runtime, &shmem_collectives::Collectives) -> Result<()>
        + Send
        + Sync
        + 'static,
{
    common::run_ok(n, common::config(|_| {}), move |rt, coll| {
        let outcome = bad(rt, coll);
        // The team is still in step: a barrier and a checked broadcast work.
        coll.barrier_all()?;
        let buf = rt.malloc::<u32>(4)?;
        let src = rt.malloc::<u32>(4)?;
        rt.write_local(&src, &[7, 8, 9, 10])?;
        coll.broadcast(&coll.world(), buf.as_sym(), src.as_sym(), 4, rt.n_pes() - 1)?;
        assert_eq!(rt.read_local(&buf)?, vec![7, 8, 9, 10]);
        Ok(outcome)
    })
}

#[test]
fn different_roots_fail_everywhere() {
    // PE 0 names itself the root, the others name PE 1. Broadcasts on one
    // node are published by their root, so a PE whose broadcast returned
    // Ok (a small broadcast's root, or a member that agreed with its root)
    // learns of the mismatch at its next collective call; nobody hangs,
    // and a member whose broadcast failed has its dest untouched.
    for (n, count) in [
        (2, 8),
        (3, 8),
        (5, 8),
        (8, 8),
        (2, 4096),
        (3, 4096),
        (5, 4096),
    ] {
        let out = after_recovery(n, move |rt, coll| {
            let d = rt.malloc::<i64>(count)?;
            let s = rt.malloc::<i64>(count)?;
            let me = rt.my_pe();
            let root = if me == 0 { 0 } else { 1 };
            rt.write_local(&d, &vec![5; count])?;
            rt.write_local(&s, &vec![100 + me as i64; count])?;
            let r = coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, root);
            let got = rt.read_local(&d)?;
            match &r {
                Err(_) if me != root => {
                    assert_eq!(got, vec![5; count], "a failed broadcast wrote data")
                }
                Err(_) => {}
                Ok(()) => assert_eq!(
                    got,
                    vec![100 + root as i64; count],
                    "PE {me}: a broadcast that returned Ok holds its root's data"
                ),
            }
            let next = coll.barrier_all();
            match r {
                Err(e) => Err(e),
                Ok(()) => next,
            }
        });
        for (pe, r) in out.iter().enumerate() {
            // A large broadcast's roots wait for their members and fail in
            // the call; the members that agreed with PE 1 then have nothing
            // to learn (their data is PE 1's, as they asked).
            if count > 256 && pe >= 2 {
                assert!(r.is_ok(), "n {n}, count {count}, PE {pe}: {r:?}");
                continue;
            }
            let e = r
                .as_ref()
                .expect_err("mismatched roots must fail, at the latest at the next call");
            assert!(is_mismatch(e), "n {n}, count {count}, PE {pe}: {e}");
        }
    }
}

#[test]
fn members_with_another_count_fail_at_once_and_the_root_at_its_next_call() {
    // PE 0 broadcasts 2 longs as the root; the others ask for 3: they fail
    // at once without copying, PE 0 at its next call, and the team is in
    // step afterwards.
    for n in [2, 4, 8] {
        let out = after_recovery(n, |rt, coll| {
            let d = rt.malloc::<i64>(4)?;
            let s = rt.malloc::<i64>(4)?;
            rt.write_local(&d, &[5; 4])?;
            rt.write_local(&s, &[9; 4])?;
            let count = if rt.my_pe() == 0 { 2 } else { 3 };
            let r = coll.broadcast(&coll.world(), d.as_sym(), s.as_sym(), count, 0);
            if rt.my_pe() == 0 {
                r?;
                return coll.barrier_all();
            }
            assert_eq!(
                rt.read_local(&d)?,
                vec![5; 4],
                "a failed broadcast wrote data"
            );
            // The others' next call fails too: PE 0 joins it as a PE with
            // invalid arguments.
            assert!(is_mismatch(&coll.barrier_all().expect_err("next call")));
            r
        });
        for (pe, r) in out.iter().enumerate() {
            let e = r.as_ref().expect_err("different counts must fail");
            assert!(is_mismatch(e), "PE {pe}: {e}");
            assert!(e.to_string().contains("broadcast"), "PE {pe}: {e}");
        }
    }
}

#[test]
fn different_counts_fail_everywhere() {
    let out = after_recovery(4, |rt, coll| {
        let d = rt.malloc::<f32>(16)?;
        let s = rt.malloc::<f32>(16)?;
        let count = if rt.my_pe() == 2 { 15 } else { 16 };
        coll.sum_reduce(&coll.world(), d.as_sym(), s.as_sym(), count)
    });
    assert!(
        out.iter().all(|r| r.as_ref().is_err_and(is_mismatch)),
        "{out:?}"
    );
}

#[test]
fn alltoalls_with_different_counts_or_a_short_buffer_fail_everywhere() {
    // At two PEs a small alltoall rides on the handshake; a count too big
    // to ride there on one PE (3200 bytes per block) and not on the other
    // still meets it on the same words.
    for (c0, c1) in [(2, 3), (2, 400)] {
        let out = after_recovery(2, move |rt, coll| {
            let d = rt.malloc::<u64>(1024)?;
            let s = rt.malloc::<u64>(1024)?;
            let count = if rt.my_pe() == 0 { c0 } else { c1 };
            coll.alltoall(&coll.world(), d.as_sym(), s.as_sym(), count)
        });
        assert!(
            out.iter().all(|r| r.as_ref().is_err_and(is_mismatch)),
            "{c0} and {c1}: {out:?}"
        );
    }
    let out = after_recovery(2, |rt, coll| {
        let d = rt.malloc::<u32>(4)?;
        let s = rt.malloc::<u32>(4)?;
        rt.write_local(&d, &[9; 4])?;
        let dest = if rt.my_pe() == 1 {
            d.slice(..3)?
        } else {
            d.as_sym()
        };
        let r = coll.alltoall(&coll.world(), dest, s.as_sym(), 2);
        // Neither dest was written.
        assert_eq!(rt.read_local(&d)?, vec![9; 4]);
        r
    });
    assert!(
        matches!(&out[1], Err(Error::InvalidArgument { arg: "dest", .. })),
        "{out:?}"
    );
    assert!(out[0].as_ref().is_err_and(is_mismatch), "{out:?}");
}

#[test]
fn different_collectives_fail_everywhere() {
    let out = after_recovery(3, |rt, coll| {
        let d = rt.malloc::<u64>(3)?;
        let s = rt.malloc::<u64>(1)?;
        if rt.my_pe() == 1 {
            coll.fcollect(&coll.world(), d.as_sym(), s.as_sym(), 1)
        } else {
            coll.barrier_all()
        }
    });
    assert!(
        out.iter().all(|r| r.as_ref().is_err_and(is_mismatch)),
        "{out:?}"
    );
}

#[test]
fn different_types_fail_everywhere() {
    let out = after_recovery(2, |rt, coll| {
        let a = rt.malloc::<u32>(2)?;
        let b = rt.malloc::<i32>(2)?;
        let c = rt.malloc::<u32>(2)?;
        let d = rt.malloc::<i32>(2)?;
        if rt.my_pe() == 0 {
            coll.max_reduce(&coll.world(), a.as_sym(), c.as_sym(), 2)
        } else {
            coll.max_reduce(&coll.world(), b.as_sym(), d.as_sym(), 2)
        }
    });
    assert!(
        out.iter().all(|r| r.as_ref().is_err_and(is_mismatch)),
        "{out:?}"
    );
}

#[test]
fn one_bad_buffer_fails_everywhere() {
    let out = after_recovery(4, |rt, coll| {
        let d = rt.malloc::<u8>(4 * 10)?;
        let s = rt.malloc::<u8>(10)?;
        let dest = if rt.my_pe() == 3 {
            d.slice(..39)?
        } else {
            d.as_sym()
        };
        coll.fcollect(&coll.world(), dest, s.as_sym(), 10)
    });
    for (pe, r) in out.iter().enumerate() {
        let e = r.as_ref().expect_err("must fail");
        if pe == 3 {
            assert!(
                matches!(e, Error::InvalidArgument { arg: "dest", .. }),
                "{e}"
            );
        } else {
            assert!(is_mismatch(e), "PE {pe}: {e}");
        }
    }
}

#[test]
fn invalid_arguments_everywhere_are_local_errors() {
    let out = after_recovery(3, |rt, coll| {
        let d = rt.malloc::<f64>(4)?;
        coll.reduce(&coll.world(), ReduceOp::Xor, d.as_sym(), d.as_sym(), 4)
    });
    assert!(
        out.iter()
            .all(|r| matches!(r, Err(Error::InvalidArgument { arg: "op", .. }))),
        "{out:?}"
    );
    let out = after_recovery(3, |rt, coll| {
        let d = rt.malloc::<f64>(4)?;
        coll.broadcast(&coll.world(), d.as_sym(), d.as_sym(), 4, 3)
    });
    assert!(
        out.iter()
            .all(|r| matches!(r, Err(Error::PeOutOfRange { pe: 3, n_pes: 3 }))),
        "{out:?}"
    );
    let out = after_recovery(2, |rt, coll| {
        let d = rt.malloc::<i32>(8)?;
        // Overlapping, not identical.
        coll.alltoall(&coll.world(), d.slice(1..5)?, d.slice(0..4)?, 2)
    });
    assert!(
        out.iter()
            .all(|r| matches!(r, Err(Error::InvalidArgument { .. }))),
        "{out:?}"
    );
}

#[test]
fn collect_with_a_small_dest_fails_everywhere() {
    let out = after_recovery(4, |rt, coll| {
        let d = rt.malloc::<i16>(16)?;
        let s = rt.malloc::<i16>(4)?;
        // 4 + 3 + 2 + 1 = 10 elements; PE 2's dest holds 9.
        let dest = if rt.my_pe() == 2 {
            d.slice(..9)?
        } else {
            d.as_sym()
        };
        let n = coll.collect(&coll.world(), dest, s.as_sym(), 4 - rt.my_pe())?;
        Err(Error::invalid("test", format!("collect of {n} succeeded")))
    });
    for r in &out {
        let e = r.as_ref().expect_err("must fail");
        assert!(is_mismatch(e) && e.to_string().contains("team PE 2"), "{e}");
    }
}

#[test]
fn different_forced_algorithms_fail_at_setup() {
    let configs = (0..3)
        .map(|pe| {
            common::config(|c| {
                c.reduce_algorithm = if pe == 0 {
                    "ring"
                } else {
                    "recursive_doubling"
                }
                .into();
            })
        })
        .collect();
    let out = common::run_each(configs, |_, _| Ok(()));
    for r in out {
        let e = r.expect_err("setup must fail");
        assert!(
            is_mismatch(&e) && e.to_string().contains("SHMEM_*_ALGORITHM"),
            "{e}"
        );
    }
}

#[test]
fn bad_split_arguments_fail_everywhere() {
    let out = after_recovery(4, |_, coll| {
        let w = coll.world();
        let start = if coll.runtime().my_pe() == 0 { 0 } else { 1 };
        coll.team_split_strided(&w, start, 1, 2, None).map(|_| ())
    });
    assert!(
        out.iter().all(|r| r.as_ref().is_err_and(is_mismatch)),
        "{out:?}"
    );
    let out = after_recovery(4, |_, coll| {
        // Parent PEs 1, 3, 5: outside a team of 4.
        coll.team_split_strided(&coll.world(), 1, 2, 3, None)
            .map(|_| ())
    });
    assert!(
        out.iter()
            .all(|r| matches!(r, Err(Error::InvalidArgument { .. }))),
        "{out:?}"
    );
    let out = after_recovery(2, |_, coll| {
        coll.team_split_2d(&coll.world(), 0, None, None).map(|_| ())
    });
    assert!(
        out.iter()
            .all(|r| matches!(r, Err(Error::InvalidArgument { .. }))),
        "{out:?}"
    );
}

#[test]
fn bad_algorithm_name_fails_at_setup() {
    common::run_ok(1, common::config(|_| {}), |rt, _| {
        let mut cfg = rt.config().clone();
        cfg.scan_algorithm = "bitonic".into();
        let err = shmem_collectives::AlgorithmChoice::from_config(&cfg)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SHMEM_SCAN_ALGORITHM") && err.contains("bitonic"),
            "{err}"
        );
        Ok(())
    });
}

/// Element counts whose byte size (or team-wide total) overflows `usize`
/// are an `InvalidArgument` on every PE, not a panic on the multiply (debug
/// builds check arithmetic), and the team goes on.
#[test]
fn element_counts_that_overflow_are_errors_not_panics() {
    for n in [1, 2, 3] {
        let out = after_recovery(n, |rt, coll| {
            let d = rt.malloc::<u64>(8)?;
            let s = rt.malloc::<u64>(8)?;
            let w = coll.world();
            let huge = usize::MAX / 4;
            let mut errs = vec![
                coll.alltoall(&w, d.as_sym(), s.as_sym(), huge),
                coll.alltoalls(&w, d.as_sym(), s.as_sym(), 1, 1, huge),
                coll.fcollect(&w, d.as_sym(), s.as_sym(), huge),
                coll.broadcast(&w, d.as_sym(), s.as_sym(), huge, 0),
            ];
            // Counts whose bytes overflow although the count times the PE
            // count does not (n = 1), and the other way round.
            errs.push(coll.alltoall(&w, d.as_sym(), s.as_sym(), usize::MAX / 8 + 1));
            errs.push(coll.fcollect(&w, d.as_sym(), s.as_sym(), usize::MAX / 2 + 1));
            for (i, e) in errs.into_iter().enumerate() {
                match e {
                    Err(shmem_core::Error::InvalidArgument { .. }) => {}
                    other => panic!("call {i}: {other:?}"),
                }
            }
            Ok(())
        });
        for (pe, r) in out.iter().enumerate() {
            assert!(r.is_ok(), "PE {pe}: {r:?}");
        }
    }
}
