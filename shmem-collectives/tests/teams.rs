//! Team management: predefined teams, strided and 2-D splits, translation,
//! configuration, destruction and reuse of scratch slots.

mod common;

use shmem_collectives::{CollectivesOptions, TeamConfig};
use shmem_core::{Error, Result};

#[test]
fn predefined_teams() {
    for n in common::PE_COUNTS {
        common::run_ok(n, common::config(|_| {}), move |rt, coll| {
            let (w, s) = (coll.world(), coll.shared());
            assert_eq!((w.my_pe(), w.n_pes()), (rt.my_pe(), n));
            assert!(w.is_world() && !w.is_shared() && s.is_shared());
            // One process: every PE shares the node.
            assert_eq!(s.members(), rt.topology().local_pes().as_slice());
            assert_eq!(s.n_pes(), n);
            for pe in 0..n {
                assert_eq!(w.translate_pe(pe, &s), Some(pe));
            }
            assert_eq!(w.translate_pe(n, &s), None);
            assert_eq!(w, coll.world());
            assert_ne!(w, s);
            assert!(
                coll.team_destroy(w).is_err(),
                "the world team cannot be destroyed"
            );
            Ok(())
        });
    }
}

#[test]
fn strided_splits_and_translation() {
    common::run_ok(8, common::config(|_| {}), |rt, coll| {
        let me = rt.my_pe();
        let world = coll.world();
        let cfg = TeamConfig { num_contexts: 3 };
        let evens = coll.team_split_strided(&world, 0, 2, 4, Some(cfg))?;
        assert_eq!(evens.is_some(), me & 1 == 0);
        let reversed = coll.team_split_strided(&world, 7, -3, 3, None)?;
        // Members of `reversed`: world 7, 4, 1.
        match me {
            7 | 4 | 1 => {
                let r = reversed.as_ref().expect("member");
                assert_eq!(r.members(), &[7, 4, 1]);
                assert_eq!(r.my_pe(), [7, 4, 1].iter().position(|&p| p == me).unwrap());
                assert_eq!(r.translate_pe(0, &world), Some(7));
                assert_eq!(world.translate_pe(4, r), Some(1));
                assert_eq!(world.translate_pe(5, r), None);
            }
            _ => assert!(reversed.is_none()),
        }
        if let Some(e) = &evens {
            assert_eq!((e.my_pe(), e.n_pes()), (me / 2, 4));
            assert_eq!(e.config(), cfg);
            assert_eq!(e.translate_pe(3, &world), Some(6));
            assert_eq!(world.translate_pe(3, e), None);
            // A split of a split: evens 1 and 3 = world 2 and 6.
            let sub = coll.team_split_strided(e, 1, 2, 2, None)?;
            assert_eq!(sub.is_some(), me == 2 || me == 6);
            if let Some(sub) = sub {
                assert_eq!(sub.members(), &[2, 6]);
                assert_eq!(sub.translate_pe(1, e), Some(3));
                coll.barrier(&sub)?;
                coll.team_destroy(sub)?;
            }
        }
        if let Some(r) = reversed {
            coll.team_destroy(r)?;
        }
        if let Some(e) = evens {
            let clone = e.clone();
            coll.team_destroy(e)?;
            assert!(clone.is_destroyed());
            let err = coll.barrier(&clone).unwrap_err();
            assert!(
                matches!(err, Error::InvalidArgument { arg: "team", .. }),
                "{err}"
            );
        }
        Ok(())
    });
}

#[test]
fn two_dimensional_split() {
    for n in common::PE_COUNTS {
        for xrange in [1, 2, 3, 8] {
            common::run_ok(n, common::config(|_| {}), move |rt, coll| {
                let me = rt.my_pe();
                let xr = xrange.min(n);
                let x_cfg = TeamConfig { num_contexts: 1 };
                let (x, y) = coll.team_split_2d(&coll.world(), xrange, Some(x_cfg), None)?;
                let row: Vec<usize> = (me / xr * xr..((me / xr + 1) * xr).min(n)).collect();
                let col: Vec<usize> = (me % xr..n).step_by(xr).collect();
                assert_eq!(
                    x.members(),
                    row.as_slice(),
                    "row of PE {me}, xrange {xrange}"
                );
                assert_eq!(
                    y.members(),
                    col.as_slice(),
                    "column of PE {me}, xrange {xrange}"
                );
                assert_eq!((x.my_pe(), y.my_pe()), (me % xr, me / xr));
                assert_eq!(x.config(), x_cfg);
                assert_eq!(y.config(), TeamConfig::default());
                // Both teams work, rows and columns at the same time.
                let s = rt.malloc::<u32>(1)?;
                let d = rt.malloc::<u32>(1)?;
                rt.write_local(&s, &[me as u32])?;
                coll.sum_reduce(&x, d.as_sym(), s.as_sym(), 1)?;
                assert_eq!(rt.read_local(&d)?[0], row.iter().sum::<usize>() as u32);
                coll.sum_reduce(&y, d.as_sym(), s.as_sym(), 1)?;
                assert_eq!(rt.read_local(&d)?[0], col.iter().sum::<usize>() as u32);
                coll.team_destroy(x)?;
                coll.team_destroy(y)?;
                Ok(())
            });
        }
    }
}

#[test]
fn destroyed_slots_are_reused_many_times() {
    common::run_ok(5, common::config(|_| {}), |rt, coll| {
        let s = rt.malloc::<i64>(3)?;
        let d = rt.malloc::<i64>(3)?;
        let world = coll.world();
        // Far more teams than slots, each used by a few collectives.
        for round in 0..100usize {
            let size = round % 5 + 1;
            let team = coll.team_split_strided(&world, 0, 1, size, None)?;
            if let Some(t) = team {
                rt.write_local(&s, &[round as i64, t.my_pe() as i64, 1])?;
                for _ in 0..(round % 3 + 1) {
                    coll.sum_reduce(&t, d.as_sym(), s.as_sym(), 3)?;
                    let m = t.n_pes() as i64;
                    assert_eq!(
                        rt.read_local(&d)?,
                        vec![round as i64 * m, m * (m - 1) / 2, m]
                    );
                }
                coll.barrier(&t)?;
                coll.team_destroy(t)?;
            }
        }
        Ok(())
    });
}

#[test]
fn running_out_of_slots_is_an_error_everywhere() {
    let cfg = common::config(|_| {});
    common::run_ok(3, cfg, |rt, coll| {
        let _ = rt;
        let world = coll.world();
        let mut teams = Vec::new();
        // The default pool has 32 slots, 2 taken by world and shared.
        let err = loop {
            match coll.team_split_strided(&world, 0, 1, 3, None) {
                Ok(t) => teams.push(t.expect("every PE is a member")),
                Err(e) => break e,
            }
            assert!(teams.len() <= 30, "the pool should be exhausted by now");
        };
        assert_eq!(teams.len(), CollectivesOptions::default().max_teams - 2);
        assert!(err.to_string().contains("no free team slot"), "{err}");
        for t in teams {
            coll.team_destroy(t)?;
        }
        // Space again.
        let t = coll.team_split_strided(&world, 2, 1, 1, None)?;
        if let Some(t) = t {
            coll.team_destroy(t)?;
        }
        Ok(())
    });
}

#[test]
fn pool_options_are_honoured() {
    shmem_transport_hccs::link();
    let out: Vec<Result<()>> = common::run(2, common::config(|_| {}), |rt, _| {
        let coll = shmem_collectives::Collectives::with_options(
            rt.clone(),
            CollectivesOptions {
                max_teams: 3,
                stage_bytes: Some(4096),
            },
        )?;
        assert_eq!(coll.stage_bytes(), 4096);
        let t = coll
            .team_split_strided(&coll.world(), 0, 1, 2, None)?
            .expect("member");
        assert!(coll
            .team_split_strided(&coll.world(), 0, 1, 2, None)
            .is_err());
        // Large reductions go through the small stage in many chunks.
        let s = rt.malloc::<f64>(5000)?;
        let d = rt.malloc::<f64>(5000)?;
        rt.write_local(&s, &vec![1.5; 5000])?;
        coll.sum_reduce(&t, d.as_sym(), s.as_sym(), 5000)?;
        assert_eq!(rt.read_local(&d)?, vec![3.0; 5000]);
        coll.team_destroy(t)?;
        let bad = shmem_collectives::Collectives::with_options(
            rt.clone(),
            CollectivesOptions {
                max_teams: 65,
                stage_bytes: None,
            },
        );
        assert!(bad.is_err());
        Ok(())
    });
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
}
