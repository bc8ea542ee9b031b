//! Every collective against golden data at 1, 2, 3, 4, 5 and 8 PEs, on the
//! world team and on split teams (strided, reversed, 2-D, size 1, shared),
//! with the automatic choice and with each algorithm forced in turn.

mod common;

use std::sync::Arc;

use shmem_collectives::{
    AlltoallAlgorithm, BarrierAlgorithm, BroadcastAlgorithm, Collectives, GatherAlgorithm,
    ReduceAlgorithm, ReduceOp, Reducible, ScanAlgorithm, ScanKind, Team,
};
use shmem_core::{Config, Element, Result, Runtime, SymBuf, SymSlice};

/// Largest element count any check below moves per PE buffer.
const CAP: usize = 8 * 6000;

/// Symmetric buffers allocated once per job (allocation is collective over
/// the world, so it cannot happen inside a team's checks).
struct Bufs<T: Element> {
    src: SymBuf<T>,
    dst: SymBuf<T>,
}

impl<T: Element> Bufs<T> {
    fn new(rt: &Runtime) -> Result<Bufs<T>> {
        Bufs::with_capacity(rt, CAP)
    }
    fn with_capacity(rt: &Runtime, cap: usize) -> Result<Bufs<T>> {
        Ok(Bufs {
            src: rt.malloc(cap)?,
            dst: rt.malloc(cap)?,
        })
    }
    fn src(&self, n: usize) -> SymSlice<T> {
        self.src.slice(..n).unwrap()
    }
    fn dst(&self, n: usize) -> SymSlice<T> {
        self.dst.slice(..n).unwrap()
    }
}

/// Numbers the golden data is built from, with an independent reference
/// implementation of each operator.
trait Num: Reducible + std::fmt::Debug {
    fn of(v: i64) -> Self;
    fn reference(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! int_num {
    ($($t:ty),*) => { $(
        impl Num for $t {
            fn of(v: i64) -> Self { v as $t }
            fn reference(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::And => a & b,
                    ReduceOp::Or => a | b,
                    ReduceOp::Xor => a ^ b,
                    ReduceOp::Min => if b < a { b } else { a },
                    ReduceOp::Max => if b > a { b } else { a },
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                }
            }
        }
    )* };
}
int_num!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! float_num {
    ($($t:ty),*) => { $(
        impl Num for $t {
            fn of(v: i64) -> Self { v as $t }
            fn reference(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Min => if b < a { b } else { a },
                    ReduceOp::Max => if b > a { b } else { a },
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    _ => unreachable!("bitwise op on a float"),
                }
            }
        }
    )* };
}
float_num!(f32, f64);

/// Input of team PE `t`, element `k`: small positive numbers (so float sums
/// and products are exact) with varied bits.
fn input<T: Num>(op: ReduceOp, t: usize, k: usize) -> T {
    match op {
        ReduceOp::Prod => T::of(((t + k) % 3 + 1) as i64),
        ReduceOp::And | ReduceOp::Or | ReduceOp::Xor => {
            T::of(((t * 37 + k * 11) ^ (k << 2) ^ (t << 5)) as i64 & 0x7f)
        }
        _ => T::of(((t * 7 + k * 3) % 23 + 1) as i64 - if k & 1 == 0 { 0 } else { 5 }),
    }
}

fn team_list(coll: &Collectives, n: usize) -> Result<Vec<(String, Team, bool)>> {
    let world = coll.world();
    let mut out = vec![("world".to_string(), world.clone(), false)];
    out.push(("shared".into(), coll.shared(), false));
    if n >= 2 {
        if let Some(t) = coll.team_split_strided(&world, 1, 2, n / 2, None)? {
            out.push(("odd".into(), t, true));
        }
    }
    if let Some(t) = coll.team_split_strided(&world, n - 1, -1, n, None)? {
        out.push(("reversed".into(), t, true));
    }
    let (x, y) = coll.team_split_2d(&world, 2, None, None)?;
    out.push(("row".into(), x, true));
    out.push(("column".into(), y, true));
    if let Some(t) = coll.team_split_strided(&world, 0, 1, 1, None)? {
        out.push(("single".into(), t, true));
    }
    Ok(out)
}

fn check_sync(coll: &Collectives, team: &Team) -> Result<()> {
    for _ in 0..3 {
        coll.barrier(team)?;
        coll.sync(team)?;
    }
    Ok(())
}

fn check_broadcast(rt: &Runtime, coll: &Collectives, team: &Team, b: &Bufs<i64>) -> Result<()> {
    let (t, m) = (team.my_pe(), team.n_pes());
    let mut roots = vec![0, m - 1, m / 2];
    roots.dedup();
    for &root in &roots {
        for ne in [0usize, 1, 7, 5000] {
            rt.write_local(b.dst(ne + 1), &vec![-1i64; ne + 1])?;
            let data: Vec<i64> = (0..ne).map(|k| (root * 100_000 + k) as i64).collect();
            rt.write_local(
                b.src(ne),
                &if t == root {
                    data.clone()
                } else {
                    vec![-2; ne]
                },
            )?;
            coll.broadcast(team, b.dst(ne + 1), b.src(ne), ne, root)?;
            let got = rt.read_local(b.dst(ne + 1))?;
            assert_eq!(
                &got[..ne],
                &data[..],
                "broadcast root {root} ne {ne} on team PE {t}/{m}"
            );
            assert_eq!(got[ne], -1, "broadcast wrote past nelems");
        }
    }
    // In place on the root.
    let ne = 33;
    if t == 0 {
        rt.write_local(b.dst(ne), &(0..ne as i64).collect::<Vec<_>>())?;
    }
    coll.broadcast(team, b.dst(ne), b.dst(ne), ne, 0)?;
    assert_eq!(
        rt.read_local(b.dst(ne))?,
        (0..ne as i64).collect::<Vec<_>>()
    );
    Ok(())
}

fn check_fcollect(rt: &Runtime, coll: &Collectives, team: &Team, b: &Bufs<i64>) -> Result<()> {
    let (t, m) = (team.my_pe(), team.n_pes());
    for ne in [0usize, 1, 5, 3000] {
        rt.write_local(
            b.src(ne),
            &(0..ne).map(|k| (t * 10_000 + k) as i64).collect::<Vec<_>>(),
        )?;
        rt.write_local(b.dst(m * ne + 1), &vec![-1i64; m * ne + 1])?;
        coll.fcollect(team, b.dst(m * ne + 1), b.src(ne), ne)?;
        let got = rt.read_local(b.dst(m * ne + 1))?;
        let want: Vec<i64> = (0..m)
            .flat_map(|i| (0..ne).map(move |k| (i * 10_000 + k) as i64))
            .collect();
        assert_eq!(
            &got[..m * ne],
            &want[..],
            "fcollect ne {ne} on team PE {t}/{m}"
        );
        assert_eq!(got[m * ne], -1);
    }
    Ok(())
}

fn check_collect(rt: &Runtime, coll: &Collectives, team: &Team, b: &Bufs<i64>) -> Result<()> {
    let (t, m) = (team.my_pe(), team.n_pes());
    for scale in [1usize, 700] {
        let count = |i: usize| ((i * 3 + 1) % 5) * scale;
        let ne = count(t);
        rt.write_local(
            b.src(ne),
            &(0..ne).map(|k| (t * 10_000 + k) as i64).collect::<Vec<_>>(),
        )?;
        let total: usize = (0..m).map(count).sum();
        rt.write_local(b.dst(total + 1), &vec![-1i64; total + 1])?;
        let got_total = coll.collect(team, b.dst(total + 1), b.src(ne), ne)?;
        assert_eq!(got_total, total);
        let got = rt.read_local(b.dst(total + 1))?;
        let want: Vec<i64> = (0..m)
            .flat_map(|i| (0..count(i)).map(move |k| (i * 10_000 + k) as i64))
            .collect();
        assert_eq!(
            &got[..total],
            &want[..],
            "collect scale {scale} on team PE {t}/{m}"
        );
        assert_eq!(got[total], -1);
    }
    Ok(())
}

fn check_alltoall(rt: &Runtime, coll: &Collectives, team: &Team, b: &Bufs<i64>) -> Result<()> {
    let (t, m) = (team.my_pe(), team.n_pes());
    let val = |from: usize, to: usize, k: usize| (from * 1_000_000 + to * 1000 + k) as i64;
    for ne in [0usize, 1, 4, 900] {
        let src: Vec<i64> = (0..m)
            .flat_map(|j| (0..ne).map(move |k| val(t, j, k)))
            .collect();
        rt.write_local(b.src(m * ne), &src)?;
        rt.write_local(b.dst(m * ne + 1), &vec![-1i64; m * ne + 1])?;
        coll.alltoall(team, b.dst(m * ne + 1), b.src(m * ne), ne)?;
        let got = rt.read_local(b.dst(m * ne + 1))?;
        let want: Vec<i64> = (0..m)
            .flat_map(|i| (0..ne).map(move |k| val(i, t, k)))
            .collect();
        assert_eq!(
            &got[..m * ne],
            &want[..],
            "alltoall ne {ne} on team PE {t}/{m}"
        );
        assert_eq!(got[m * ne], -1);
    }
    // Strided: dst stride 2, source stride 3.
    for (dst, sst, ne) in [(2usize, 3usize, 3usize), (1, 2, 5), (3, 1, 2)] {
        let slen = sst * (m * ne - 1) + 1;
        let dlen = dst * (m * ne - 1) + 1;
        let mut src = vec![-7i64; slen];
        for j in 0..m {
            for k in 0..ne {
                src[sst * (j * ne + k)] = val(t, j, k);
            }
        }
        rt.write_local(b.src(slen), &src)?;
        rt.write_local(b.dst(dlen + 1), &vec![-1i64; dlen + 1])?;
        coll.alltoalls(team, b.dst(dlen + 1), b.src(slen), dst, sst, ne)?;
        let got = rt.read_local(b.dst(dlen + 1))?;
        let mut want = vec![-1i64; dlen + 1];
        for i in 0..m {
            for k in 0..ne {
                want[dst * (i * ne + k)] = val(i, t, k);
            }
        }
        assert_eq!(
            got, want,
            "alltoalls dst {dst} sst {sst} on team PE {t}/{m}"
        );
    }
    Ok(())
}

fn check_reduce<T: Num>(
    rt: &Runtime,
    coll: &Collectives,
    team: &Team,
    b: &Bufs<T>,
    ops: &[ReduceOp],
    sizes: &[usize],
) -> Result<()> {
    let (t, m) = (team.my_pe(), team.n_pes());
    for &op in ops {
        for &ne in sizes {
            let mine: Vec<T> = (0..ne).map(|k| input(op, t, k)).collect();
            let want: Vec<T> = (0..ne)
                .map(|k| {
                    (1..m).fold(input::<T>(op, 0, k), |acc, i| {
                        T::reference(op, acc, input(op, i, k))
                    })
                })
                .collect();
            rt.write_local(b.src(ne), &mine)?;
            rt.write_local(b.dst(ne + 1), &vec![T::of(99); ne + 1])?;
            coll.reduce(team, op, b.dst(ne + 1), b.src(ne), ne)?;
            let got = rt.read_local(b.dst(ne + 1))?;
            assert_eq!(
                &got[..ne],
                &want[..],
                "{} reduce of {ne} x {} on team PE {t}/{m}",
                op.name(),
                std::any::type_name::<T>()
            );
            assert_eq!(got[ne], T::of(99));
            assert_eq!(rt.read_local(b.src(ne))?, mine, "reduce changed its source");
            // In place.
            coll.reduce(team, op, b.src(ne), b.src(ne), ne)?;
            assert_eq!(
                rt.read_local(b.src(ne))?,
                want,
                "in-place {} reduce",
                op.name()
            );
        }
    }
    Ok(())
}

fn check_scan<T: Num>(
    rt: &Runtime,
    coll: &Collectives,
    team: &Team,
    b: &Bufs<T>,
    sizes: &[usize],
) -> Result<()> {
    let (t, m) = (team.my_pe(), team.n_pes());
    let _ = m;
    let op = ReduceOp::Sum;
    for &ne in sizes {
        let mine: Vec<T> = (0..ne).map(|k| input(op, t, k)).collect();
        let prefix = |upto: usize, k: usize| -> T {
            (0..upto).fold(T::of(0), |acc, i| T::reference(op, acc, input(op, i, k)))
        };
        for kind in [ScanKind::Inclusive, ScanKind::Exclusive] {
            let upto = if kind == ScanKind::Inclusive {
                t + 1
            } else {
                t
            };
            let want: Vec<T> = (0..ne).map(|k| prefix(upto, k)).collect();
            rt.write_local(b.src(ne), &mine)?;
            rt.write_local(b.dst(ne + 1), &vec![T::of(99); ne + 1])?;
            coll.scan(team, op, kind, b.dst(ne + 1), b.src(ne), ne)?;
            let got = rt.read_local(b.dst(ne + 1))?;
            assert_eq!(
                &got[..ne],
                &want[..],
                "{kind:?} scan of {ne} on team PE {t}/{m}"
            );
            assert_eq!(got[ne], T::of(99));
            // In place.
            coll.scan(team, op, kind, b.src(ne), b.src(ne), ne)?;
            assert_eq!(rt.read_local(b.src(ne))?, want, "in-place {kind:?} scan");
        }
    }
    Ok(())
}

/// The whole suite on every team this PE belongs to.
fn suite(rt: &Arc<Runtime>, coll: &Collectives) -> Result<usize> {
    let n = rt.n_pes();
    let bi = Bufs::<i64>::new(rt)?;
    let bi32 = Bufs::<i32>::new(rt)?;
    let bf = Bufs::<f64>::new(rt)?;
    let bf32 = Bufs::<f32>::new(rt)?;
    let teams = team_list(coll, n)?;
    let mut checked = 0;
    for (name, team, _) in &teams {
        let _ = name;
        check_sync(coll, team)?;
        check_broadcast(rt, coll, team, &bi)?;
        check_fcollect(rt, coll, team, &bi)?;
        check_collect(rt, coll, team, &bi)?;
        check_alltoall(rt, coll, team, &bi)?;
        // 20001 x i32 is past the direct (mapped-memory) reduction threshold.
        check_reduce(rt, coll, team, &bi32, &ReduceOp::ALL, &[1, 17, 3000, 20001])?;
        check_reduce(
            rt,
            coll,
            team,
            &bf,
            &[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod],
            // 9000 x f64 takes the direct reduction too (float order kept).
            &[1, 6000, 9000],
        )?;
        check_scan(rt, coll, team, &bi, &[1, 9, 5000])?;
        check_scan(rt, coll, team, &bf32, &[3])?;
        checked += 1;
    }
    for (_, team, split) in teams {
        if split {
            coll.team_destroy(team)?;
        }
    }
    coll.barrier_all()?;
    Ok(checked)
}

fn run_suite(tweak: impl Fn(&mut Config) + Copy) {
    for n in common::PE_COUNTS {
        let t0 = std::time::Instant::now();
        let teams = common::run_ok(n, common::config(tweak), suite);
        eprintln!(
            "{n} PEs: teams checked per PE {teams:?} in {:?}",
            t0.elapsed()
        );
        assert!(
            teams.iter().all(|&t| t >= 4),
            "every PE checks at least world, shared, reversed, row, column"
        );
    }
}

#[test]
fn automatic_algorithms() {
    run_suite(|_| {});
}

#[test]
fn first_algorithms_forced() {
    run_suite(|c| {
        c.barrier_algorithm = BarrierAlgorithm::Dissemination.name().into();
        c.broadcast_algorithm = BroadcastAlgorithm::Direct.name().into();
        c.fcollect_algorithm = GatherAlgorithm::Direct.name().into();
        c.collect_algorithm = GatherAlgorithm::Direct.name().into();
        c.alltoall_algorithm = AlltoallAlgorithm::Direct.name().into();
        c.reduce_algorithm = ReduceAlgorithm::RecursiveDoubling.name().into();
        c.scan_algorithm = ScanAlgorithm::Linear.name().into();
    });
}

#[test]
fn second_algorithms_forced() {
    run_suite(|c| {
        c.barrier_algorithm = BarrierAlgorithm::Linear.name().into();
        c.broadcast_algorithm = BroadcastAlgorithm::Binomial.name().into();
        c.fcollect_algorithm = GatherAlgorithm::Ring.name().into();
        c.collect_algorithm = GatherAlgorithm::Ring.name().into();
        c.alltoall_algorithm = AlltoallAlgorithm::Pairwise.name().into();
        c.reduce_algorithm = ReduceAlgorithm::Ring.name().into();
        c.scan_algorithm = ScanAlgorithm::RecursiveDoubling.name().into();
    });
}

#[test]
fn every_algorithm_is_covered() {
    // The two forced suites above cover each variant exactly once.
    assert_eq!(BarrierAlgorithm::ALL.len(), 2);
    assert_eq!(BroadcastAlgorithm::ALL.len(), 2);
    assert_eq!(GatherAlgorithm::ALL.len(), 2);
    assert_eq!(AlltoallAlgorithm::ALL.len(), 2);
    assert_eq!(ReduceAlgorithm::ALL.len(), 2);
    assert_eq!(ScanAlgorithm::ALL.len(), 2);
}

macro_rules! every_type {
    ($rt:expr, $coll:expr, $team:expr; ints: $($i:ty),*; floats: $($f:ty),*) => {{
        $( check_reduce::<$i>($rt, $coll, $team, &Bufs::<$i>::with_capacity($rt, 64)?, &ReduceOp::ALL, &[1, 5])?;
           check_scan::<$i>($rt, $coll, $team, &Bufs::<$i>::with_capacity($rt, 64)?, &[4])?; )*
        $( check_reduce::<$f>($rt, $coll, $team, &Bufs::<$f>::with_capacity($rt, 64)?,
               &[ReduceOp::Min, ReduceOp::Max, ReduceOp::Sum, ReduceOp::Prod], &[1, 5])?;
           check_scan::<$f>($rt, $coll, $team, &Bufs::<$f>::with_capacity($rt, 64)?, &[4])?; )*
    }};
}

#[test]
fn every_standard_type_reduces_and_scans() {
    for n in [3, 8] {
        for algo in ReduceAlgorithm::ALL {
            let cfg = common::config(|c| c.reduce_algorithm = algo.name().into());
            common::run_ok(n, cfg, |rt, coll| {
                let world = coll.world();
                every_type!(rt, coll, &world;
                    ints: i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize;
                    floats: f32, f64);
                // Element-generic collectives on odd sizes.
                let b = Bufs::<u16>::with_capacity(rt, 64)?;
                let m = rt.n_pes();
                rt.write_local(b.src(3), &[rt.my_pe() as u16; 3])?;
                coll.fcollect(&world, b.dst(3 * m), b.src(3), 3)?;
                let want: Vec<u16> = (0..m).flat_map(|i| [i as u16; 3]).collect();
                assert_eq!(rt.read_local(b.dst(3 * m))?, want);
                Ok(())
            });
        }
    }
}
