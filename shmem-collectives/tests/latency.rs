//! Collectives stay fast with more PEs than cores: nothing on the hot path
//! sleeps or goes through the TCP bootstrap. Bounds are loose (debug
//! builds, shared CI machines); the timings are printed for reading.

mod common;

use std::time::{Duration, Instant};

fn per_op(n: usize, iters: u32, op: &'static str) -> Duration {
    let times = common::run_ok(n, common::config(|_| {}), move |rt, coll| {
        let world = coll.world();
        let s = rt.malloc::<f64>(8)?;
        let d = rt.malloc::<f64>(8 * rt.n_pes())?;
        coll.barrier_all()?;
        let t0 = Instant::now();
        for _ in 0..iters {
            match op {
                "barrier" => coll.barrier(&world)?,
                "sum_reduce" => coll.sum_reduce(&world, d.slice(..8)?, s.as_sym(), 8)?,
                "fcollect" => coll.fcollect(&world, d.as_sym(), s.as_sym(), 8)?,
                "broadcast" => coll.broadcast(&world, d.slice(..8)?, s.as_sym(), 8, 0)?,
                _ => unreachable!(),
            }
        }
        Ok(t0.elapsed() / iters)
    });
    let worst = times.into_iter().max().unwrap_or_default();
    eprintln!("{op:>10} on {n} PEs: {worst:?} per call");
    worst
}

#[test]
fn two_pe_barrier_is_a_ping_pong() {
    let t = per_op(2, 20_000, "barrier");
    assert!(t < Duration::from_micros(200), "2-PE barrier takes {t:?}");
}

#[test]
fn eight_pes_on_few_cores_stay_fast() {
    for op in ["barrier", "sum_reduce", "fcollect", "broadcast"] {
        let t = per_op(8, 500, op);
        assert!(t < Duration::from_millis(5), "{op} on 8 PEs takes {t:?}");
    }
}
