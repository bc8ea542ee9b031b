//! The conformance suite: what every engine must do, as scenarios that run
//! on every PE of a [`crate::run_pes`] job and check golden data.
//!
//! Each scenario names the PE count it runs at in [`SCENARIOS`];
//! [`crate::conformance_tests!`] turns the list into `#[test]`s.

use shmem_core::{AmoOp, AmoWidth, Cmp, Error, Runtime, SignalOp};

use crate::{check, sync, Outcome};

/// A scenario: runs on every PE of a job.
pub type Scenario = fn(&Runtime) -> Outcome;

/// Every scenario with the PE count it runs at.
pub const SCENARIOS: &[(&str, usize, Scenario)] = &[
    ("one_pe_put_get", 1, put_get_sizes_and_alignments),
    (
        "put_get_sizes_and_alignments",
        3,
        put_get_sizes_and_alignments,
    ),
    ("typed_and_strided_rma", 2, typed_and_strided_rma),
    ("atomics_every_op_and_width", 3, atomics_every_op_and_width),
    ("atomics_under_contention", 4, atomics_under_contention),
    ("signals_set_add_and_wait", 3, signals_set_add_and_wait),
    ("waits_every_comparison", 3, waits_every_comparison),
    ("ordering_fence_and_quiet", 2, ordering_fence_and_quiet),
    ("non_blocking_operations", 2, non_blocking_operations),
    ("errors_on_bad_arguments", 2, errors_on_bad_arguments),
];

/// Expands to one `#[test]` per conformance scenario, each running it with
/// `$engine` forced for every peer. `$link` is an expression that makes sure
/// the engine crate is linked (its `link()` function).
#[macro_export]
macro_rules! conformance_tests {
    ($engine:expr, $link:expr) => {
        $crate::conformance_tests!(@each $engine, $link;
            one_pe_put_get put_get_sizes_and_alignments typed_and_strided_rma
            atomics_every_op_and_width atomics_under_contention
            signals_set_add_and_wait waits_every_comparison
            ordering_fence_and_quiet non_blocking_operations errors_on_bad_arguments);
    };
    (@each $engine:expr, $link:expr; $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                $link;
                $crate::conformance::run_named(stringify!($name), $engine)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        )*
    };
}

/// Runs the scenario called `name` of [`SCENARIOS`] on `engine`.
///
/// # Errors
/// The job's failures, or a [`crate::Failure`] when no scenario has that name.
pub fn run_named(name: &str, engine: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (_, n, f) = SCENARIOS
        .iter()
        .find(|(s, _, _)| *s == name)
        .ok_or_else(|| crate::Failure(format!("no conformance scenario {name:?}")))?;
    crate::run_pes(*n, engine, f)?;
    Ok(())
}

/// Runs every scenario on `engine`, one after the other.
///
/// # Errors
/// The first scenario that fails, named.
pub fn run_all(engine: &str) -> Result<(), Box<dyn std::error::Error>> {
    run_all_with(&crate::Job::new(1, engine))
}

/// Runs every scenario with `job`'s engine, heap, timeout and settings
/// (its PE count is replaced by each scenario's).
///
/// # Errors
/// The first scenario that fails, named.
pub fn run_all_with(job: &crate::Job) -> Result<(), Box<dyn std::error::Error>> {
    for (name, n, f) in SCENARIOS {
        let job = crate::Job {
            n_pes: *n,
            ..job.clone()
        };
        job.run(f).map_err(|e| format!("scenario {name}: {e}"))?;
    }
    Ok(())
}

fn pattern(from: usize, size: usize, skew: usize, i: usize) -> u8 {
    (from.wrapping_mul(131) ^ size.wrapping_mul(7) ^ skew.wrapping_mul(29)).wrapping_add(i) as u8
}

const SLOT: usize = (1 << 20) + 64;

/// put and get of 1 B to 1 MiB, at offsets 0, 1, 3 and 8 bytes past a cache
/// line, to the next PE (itself when alone); golden data on both sides.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn put_get_sizes_and_alignments(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let buf = rt.calloc::<u8>(SLOT * n)?;
    for size in [1, 2, 7, 8, 9, 63, 64, 65, 4095, 4096, 65_539, 1 << 20] {
        for skew in [0usize, 1, 3, 8] {
            if size + skew > SLOT {
                continue;
            }
            let at = me * SLOT + skew;
            let src: Vec<u8> = (0..size).map(|i| pattern(me, size, skew, i)).collect();
            rt.put(buf.slice(at..at + size)?, &src, next)?;
            sync(rt)?;
            let from = prev * SLOT + skew;
            let got = rt.read_local(buf.slice(from..from + size)?)?;
            let bad = (0..size).find(|&i| got[i] != pattern(prev, size, skew, i));
            check!(
                bad.is_none(),
                "PE {me}: put of {size} B at skew {skew} from PE {prev}: byte {bad:?} wrong"
            );
            let mut back = vec![0u8; size];
            rt.get(&mut back, buf.slice(at..at + size)?, next)?;
            check!(
                back == src,
                "PE {me}: get of {size} B at skew {skew} from PE {next} differs"
            );
            sync(rt)?;
        }
    }
    rt.free(buf)?;
    Ok(())
}

/// `p`/`g` of several element types and strided `iput`/`iget`.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn typed_and_strided_rma(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let w64 = rt.calloc::<u64>(4)?;
    let w16 = rt.calloc::<i16>(4)?;
    let f = rt.calloc::<f64>(4)?;
    rt.p(w64.at(1)?, 0xdead_0000 + me as u64, next)?;
    rt.p(w16.at(3)?, -(me as i16) - 1, next)?;
    rt.p(f.at(2)?, me as f64 + 0.5, next)?;
    sync(rt)?;
    check!(
        rt.read_local(&w64)?[1] == 0xdead_0000 + prev as u64,
        "PE {me}: p u64"
    );
    check!(
        rt.read_local(&w16)?[3] == -(prev as i16) - 1,
        "PE {me}: p i16"
    );
    check!(rt.read_local(&f)?[2] == prev as f64 + 0.5, "PE {me}: p f64");
    check!(
        rt.g(w64.at(1)?, next)? == 0xdead_0000 + me as u64,
        "PE {me}: g u64"
    );
    check!(rt.g(f.at(2)?, next)? == me as f64 + 0.5, "PE {me}: g f64");
    sync(rt)?;

    let strided = rt.calloc::<u32>(64)?;
    let src: Vec<u32> = (0..30).map(|i| (me as u32) << 16 | i).collect();
    // dst[i*4] = src[i*3] for 10 elements.
    rt.iput(&strided, &src, 4, 3, 10, next)?;
    sync(rt)?;
    let got = rt.read_local(&strided)?;
    for (i, &g) in got.iter().enumerate() {
        let want = if i % 4 == 0 && i / 4 < 10 {
            (prev as u32) << 16 | (i / 4 * 3) as u32
        } else {
            0
        };
        check!(
            g == want,
            "PE {me}: iput element {i} is {g:#x}, want {want:#x}"
        );
    }
    let mut back = vec![0u32; 20];
    // back[i*2] = remote[i*4] for 10 elements.
    rt.iget(&mut back, &strided, 2, 4, 10, next)?;
    for (i, &b) in back.iter().enumerate() {
        let want = if i % 2 == 0 {
            (me as u32) << 16 | (i / 2 * 3) as u32
        } else {
            0
        };
        check!(
            b == want,
            "PE {me}: iget element {i} is {b:#x}, want {want:#x}"
        );
    }
    sync(rt)?;
    rt.free(w64)?;
    rt.free(w16)?;
    rt.free(f)?;
    rt.free(strided)?;
    Ok(())
}

macro_rules! every_op {
    ($rt:expr, $t:ty, $target:expr) => {{
        let rt: &Runtime = $rt;
        let me = rt.my_pe();
        let t = $target;
        let w = rt.calloc::<$t>(2)?;
        let x = w.at(1)?;
        let v = |k: u64| -> $t { (k.wrapping_mul(0x0101_0101_0101_0101) ^ me as u64) as $t };
        let (a, b, c) = (v(3), v(5), v(9));
        rt.atomic_set(x, a, t)?;
        check!(rt.atomic_fetch(x, t)? == a, "{}: set/fetch", stringify!($t));
        check!(
            rt.atomic_swap(x, b, t)? == a,
            "{}: swap returns the old value",
            stringify!($t)
        );
        check!(
            rt.atomic_compare_swap(x, a, c, t)? == b,
            "{}: failed cswap returns the value",
            stringify!($t)
        );
        check!(
            rt.atomic_fetch(x, t)? == b,
            "{}: failed cswap must not store",
            stringify!($t)
        );
        check!(
            rt.atomic_compare_swap(x, b, c, t)? == b,
            "{}: cswap",
            stringify!($t)
        );
        check!(
            rt.atomic_fetch(x, t)? == c,
            "{}: cswap stores",
            stringify!($t)
        );
        let mut want = c;
        check!(
            rt.atomic_fetch_add(x, a, t)? == want,
            "{}: fetch_add",
            stringify!($t)
        );
        want = want.wrapping_add(a);
        rt.atomic_add(x, b, t)?;
        want = want.wrapping_add(b);
        check!(
            rt.atomic_fetch_inc(x, t)? == want,
            "{}: fetch_inc",
            stringify!($t)
        );
        want = want.wrapping_add(1);
        rt.atomic_inc(x, t)?;
        want = want.wrapping_add(1);
        check!(
            rt.atomic_fetch_and(x, c, t)? == want,
            "{}: fetch_and",
            stringify!($t)
        );
        want &= c;
        rt.atomic_and(x, b, t)?;
        want &= b;
        check!(
            rt.atomic_fetch_or(x, a, t)? == want,
            "{}: fetch_or",
            stringify!($t)
        );
        want |= a;
        rt.atomic_or(x, c, t)?;
        want |= c;
        check!(
            rt.atomic_fetch_xor(x, b, t)? == want,
            "{}: fetch_xor",
            stringify!($t)
        );
        want ^= b;
        rt.atomic_xor(x, a, t)?;
        want ^= a;
        // Wrapping at the type's edge.
        let max = <$t>::MAX;
        let before = rt.atomic_swap(x, max, t)?;
        check!(
            before == want,
            "{}: after every op the word is {before}, want {want}",
            stringify!($t)
        );
        rt.atomic_add(x, 1 as $t, t)?;
        check!(
            rt.atomic_fetch(x, t)? == <$t>::MIN,
            "{}: add wraps",
            stringify!($t)
        );
        // The neighbour word is untouched.
        check!(
            rt.atomic_fetch(w.at(0)?, t)? == 0 as $t,
            "{}: neighbour word changed",
            stringify!($t)
        );
        sync(rt)?;
        rt.free(w)?;
    }};
}

macro_rules! float_ops {
    ($rt:expr, $t:ty, $target:expr) => {{
        let rt: &Runtime = $rt;
        let me = rt.my_pe() as $t;
        let t = $target;
        let x = rt.calloc::<$t>(1)?;
        rt.atomic_set(x.at(0)?, me + 0.25, t)?;
        check!(
            rt.atomic_fetch(x.at(0)?, t)? == me + 0.25,
            "{}: set/fetch",
            stringify!($t)
        );
        check!(
            rt.atomic_swap(x.at(0)?, -1.5, t)? == me + 0.25,
            "{}: swap",
            stringify!($t)
        );
        check!(
            rt.atomic_fetch(x.at(0)?, t)? == -1.5,
            "{}: swap stores",
            stringify!($t)
        );
        sync(rt)?;
        rt.free(x)?;
    }};
}

/// Every atomic operation at 32 and 64 bits, signed and unsigned (and the
/// float set/fetch/swap), on the next PE, checked against the same
/// operations done locally; plus the raw op enum on both widths.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn atomics_every_op_and_width(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let next = (me + 1) % n;
    every_op!(rt, u32, next);
    every_op!(rt, i32, next);
    every_op!(rt, u64, next);
    every_op!(rt, i64, next);
    every_op!(rt, usize, next);
    float_ops!(rt, f32, next);
    float_ops!(rt, f64, next);

    let raw = rt.calloc::<u64>(2)?;
    for (i, width) in [AmoWidth::W32, AmoWidth::W64].into_iter().enumerate() {
        let off = raw.offset() + i * 8;
        let mask = if width == AmoWidth::W32 {
            u32::MAX as u64
        } else {
            u64::MAX
        };
        let big = 0xf0f0_f0f0_f0f0_f0f0u64 & mask;
        rt.atomic_raw(next, off, width, AmoOp::Set(big))?;
        let old = rt.atomic_raw(next, off, width, AmoOp::Add(0x10))?;
        check!(old == big, "raw {width:?}: add returned {old:#x}");
        let now = rt.atomic_raw(next, off, width, AmoOp::Fetch)?;
        check!(now == (big + 0x10) & mask, "raw {width:?}: {now:#x}");
        // Operands wider than the word are truncated to it.
        let old = rt.atomic_raw(next, off, width, AmoOp::Swap(u64::MAX))?;
        check!(
            old == (big + 0x10) & mask,
            "raw {width:?}: swap returned {old:#x}"
        );
        let now = rt.atomic_raw(next, off, width, AmoOp::Fetch)?;
        check!(
            now == mask,
            "raw {width:?}: swap of all ones gives {now:#x}"
        );
    }
    sync(rt)?;
    rt.free(raw)?;
    Ok(())
}

/// Every PE hammers PE 0's words (add, inc, or, and, xor, cswap claims);
/// PE 0 checks the totals.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn atomics_under_contention(rt: &Runtime) -> Outcome {
    const ROUNDS: u64 = 200;
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let w = rt.calloc::<u64>(8)?;
    let w32 = rt.calloc::<u32>(8)?;
    if me == 0 {
        rt.atomic_set(w.at(3)?, u64::MAX, 0)?;
    }
    sync(rt)?;
    let mut last = None;
    for _ in 0..ROUNDS {
        let got = rt.atomic_fetch_add(w.at(0)?, 1, 0)?;
        check!(
            last.is_none_or(|l| got > l),
            "PE {me}: fetch_add went back: {got} after {last:?}"
        );
        last = Some(got);
        rt.atomic_inc(w32.at(0)?, 0)?;
        rt.atomic_add(w32.at(1)?, 3, 0)?;
    }
    rt.atomic_or(w.at(2)?, 1 << me, 0)?;
    rt.atomic_and(w.at(3)?, !(1u64 << me), 0)?;
    rt.atomic_xor(w32.at(2)?, 1 << me, 0)?;
    rt.atomic_xor(w32.at(2)?, 1 << (me + 8), 0)?;
    // Exactly one PE claims the word.
    let claimed = rt.atomic_compare_swap(w.at(4)?, 0, me as u64 + 1, 0)? == 0;
    if claimed {
        rt.atomic_inc(w.at(5)?, 0)?;
    }
    sync(rt)?;
    if me == 0 {
        let v = rt.read_local(&w)?;
        let v32 = rt.read_local(&w32)?;
        let all = (1u64 << n) - 1;
        check!(v[0] == ROUNDS * n as u64, "fetch_add total {}", v[0]);
        check!(v32[0] == (ROUNDS * n as u64) as u32, "inc total {}", v32[0]);
        check!(
            v32[1] == (3 * ROUNDS * n as u64) as u32,
            "add total {}",
            v32[1]
        );
        check!(v[2] == all, "or gives {:#x}", v[2]);
        check!(v[3] == !all, "and gives {:#x}", v[3]);
        check!(v32[2] == (all | all << 8) as u32, "xor gives {:#x}", v32[2]);
        check!(
            (1..=n as u64).contains(&v[4]) && v[5] == 1,
            "cswap claim {} by {} PEs",
            v[4],
            v[5]
        );
    }
    sync(rt)?;
    rt.free(w)?;
    rt.free(w32)?;
    Ok(())
}

/// `put_signal` with add and set, bare `signal_op`, `signal_wait_until` with
/// every comparison, `signal_fetch`; the data is in place when the signal is.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn signals_set_add_and_wait(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let data = rt.calloc::<u64>(n * 512)?;
    let sig = rt.calloc::<u64>(4)?;
    sync(rt)?;
    // Every PE sends 4 KiB to every other PE, each adding 1 to its counter.
    for peer in (0..n).filter(|&p| p != me) {
        let src: Vec<u64> = (0..512).map(|i| (me * 1000 + i) as u64).collect();
        rt.put_signal(
            data.slice(me * 512..(me + 1) * 512)?,
            &src,
            sig.at(0)?,
            1,
            SignalOp::Add,
            peer,
        )?;
    }
    let seen = rt.signal_wait_until(sig.at(0)?, Cmp::Ge, n as u64 - 1)?;
    check!(seen == n as u64 - 1, "PE {me}: counter {seen}");
    let got = rt.read_local(&data)?;
    for from in (0..n).filter(|&p| p != me) {
        for i in 0..512 {
            check!(
                got[from * 512 + i] == (from * 1000 + i) as u64,
                "PE {me}: data from PE {from} at {i} not there with the signal"
            );
        }
    }
    // Set: a ring of put_signal with distinct values.
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let word = [0xabc0_0000u64 + me as u64];
    let ring = rt.calloc::<u64>(1)?;
    rt.put_signal(
        &ring,
        &word,
        sig.at(1)?,
        7000 + me as u64,
        SignalOp::Set,
        next,
    )?;
    let seen = rt.signal_wait_until(sig.at(1)?, Cmp::Eq, 7000 + prev as u64)?;
    check!(seen == 7000 + prev as u64, "PE {me}: set signal {seen}");
    check!(
        rt.read_local(&ring)?[0] == 0xabc0_0000 + prev as u64,
        "PE {me}: data of the set put_signal"
    );
    // Bare signal_op, then the comparisons on a known value.
    rt.signal_op(sig.at(2)?, 40, SignalOp::Set, next)?;
    rt.signal_op(sig.at(2)?, 2, SignalOp::Add, next)?;
    rt.signal_wait_until(sig.at(2)?, Cmp::Eq, 42)?;
    check!(rt.signal_fetch(sig.at(2)?)? == 42, "PE {me}: signal_fetch");
    for (cmp, v) in [
        (Cmp::Ne, 41),
        (Cmp::Gt, 41),
        (Cmp::Ge, 42),
        (Cmp::Lt, 43),
        (Cmp::Le, 42),
        (Cmp::Eq, 42),
    ] {
        check!(
            rt.signal_wait_until(sig.at(2)?, cmp, v)? == 42,
            "PE {me}: {cmp:?} {v}"
        );
    }
    sync(rt)?;
    // Non-blocking put_signal, completed by quiet.
    let src: Vec<u64> = (0..512).map(|i| !(i as u64) ^ me as u64).collect();
    // SAFETY: `src` outlives the quiet inside `sync` below.
    unsafe {
        rt.put_signal_nbi(
            data.slice(me * 512..(me + 1) * 512)?,
            &src,
            sig.at(3)?,
            1,
            SignalOp::Add,
            next,
        )?
    };
    rt.signal_wait_until(sig.at(3)?, Cmp::Eq, 1)?;
    let got = rt.read_local(data.slice(prev * 512..(prev + 1) * 512)?)?;
    check!(
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == !(i as u64) ^ prev as u64),
        "PE {me}: put_signal_nbi data"
    );
    sync(rt)?;
    rt.free(data)?;
    rt.free(sig)?;
    rt.free(ring)?;
    Ok(())
}

/// `wait_until`, `test` and the `_all`/`_any`/`_some` (and `_vector`)
/// forms, written by the other PEs' puts and atomics.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn waits_every_comparison(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let ivars = rt.calloc::<u64>(n)?;
    let i32s = rt.calloc::<i32>(4)?;
    sync(rt)?;
    for peer in (0..n).filter(|&p| p != me) {
        rt.p(ivars.at(me)?, me as u64 + 1, peer)?;
    }
    let mut skip = vec![false; n];
    skip[me] = true;
    rt.wait_until_all(ivars.as_sym(), Some(&skip), Cmp::Ge, 1)?;
    let v = rt.read_local(&ivars)?;
    for p in (0..n).filter(|&p| p != me) {
        check!(v[p] == p as u64 + 1, "PE {me}: ivar {p} = {}", v[p]);
        rt.wait_until(ivars.at(p)?, Cmp::Eq, p as u64 + 1)?;
        check!(
            rt.test(ivars.at(p)?, Cmp::Eq, p as u64 + 1)?,
            "PE {me}: test ivar {p}"
        );
        check!(
            !rt.test(ivars.at(p)?, Cmp::Gt, p as u64 + 1)?,
            "PE {me}: test must fail"
        );
    }
    let any = rt.wait_until_any(ivars.as_sym(), Some(&skip), Cmp::Ne, 0)?;
    check!(
        any.is_some_and(|i| i != me),
        "PE {me}: wait_until_any gave {any:?}"
    );
    let some = rt.wait_until_some(ivars.as_sym(), Some(&skip), Cmp::Gt, 0)?;
    let want: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    check!(some == want, "PE {me}: wait_until_some gave {some:?}");
    let values: Vec<u64> = (0..n as u64).map(|p| p + 1).collect();
    rt.wait_until_all_vector(ivars.as_sym(), Some(&skip), Cmp::Eq, &values)?;
    check!(
        rt.test_all(ivars.as_sym(), Some(&skip), Cmp::Le, n as u64)?,
        "PE {me}: test_all"
    );
    let all_masked = vec![true; n];
    check!(
        rt.wait_until_any(ivars.as_sym(), Some(&all_masked), Cmp::Eq, 0)?
            .is_none(),
        "PE {me}: all masked"
    );
    // A signed word moved by the next PE's atomics: every comparison.
    let next = (me + 1) % n;
    sync(rt)?;
    rt.atomic_set(i32s.at(1)?, -5, next)?;
    rt.wait_until(i32s.at(1)?, Cmp::Lt, 0)?;
    for (cmp, v) in [
        (Cmp::Eq, -5),
        (Cmp::Ne, 0),
        (Cmp::Gt, -6),
        (Cmp::Ge, -5),
        (Cmp::Lt, -4),
        (Cmp::Le, -5),
    ] {
        rt.wait_until(i32s.at(1)?, cmp, v)?;
        check!(rt.test(i32s.at(1)?, cmp, v)?, "PE {me}: i32 {cmp:?} {v}");
    }
    sync(rt)?;
    rt.free(ivars)?;
    rt.free(i32s)?;
    Ok(())
}

/// Data put before a `fence` is in place when a flag put after it is seen;
/// non-blocking puts are complete at `quiet`.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn ordering_fence_and_quiet(rt: &Runtime) -> Outcome {
    const ROUNDS: usize = 100;
    const WORDS: usize = 16;
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let data = rt.calloc::<u64>(ROUNDS * WORDS)?;
    let flag = rt.calloc::<u64>(2)?;
    let big = rt.calloc::<u8>(1 << 20)?;
    let srcs: Vec<Vec<u64>> = (0..ROUNDS)
        .map(|r| {
            (0..WORDS)
                .map(|i| ((me * ROUNDS + r) * WORDS + i) as u64)
                .collect()
        })
        .collect();
    sync(rt)?;
    for (r, src) in srcs.iter().enumerate() {
        let dst = data.slice(r * WORDS..(r + 1) * WORDS)?;
        match r % 3 {
            0 => rt.put(dst, src, next)?,
            // SAFETY: `srcs` lives until the end, past the final quiet.
            _ => unsafe { rt.put_nbi(dst, src, next)? },
        }
        rt.fence()?;
        match r % 2 {
            0 => rt.atomic_set(flag.at(0)?, r as u64 + 1, next)?,
            _ => rt.signal_op(flag.at(0)?, r as u64 + 1, SignalOp::Set, next)?,
        }
        // The flag is overwritten each round: wait for this round's value
        // from the previous PE before checking its data.
        rt.wait_until(flag.at(0)?, Cmp::Ge, r as u64 + 1)?;
        let got = rt.read_local(data.slice(r * WORDS..(r + 1) * WORDS)?)?;
        for (i, &g) in got.iter().enumerate() {
            check!(
                g == ((prev * ROUNDS + r) * WORDS + i) as u64,
                "PE {me}: round {r} word {i} is {g} after the fenced flag"
            );
        }
        // Keep rounds in step so the next flag value is this round's + 1.
        rt.bootstrap().barrier()?;
    }
    // quiet completes a 1 MiB non-blocking put before the signal goes out.
    let src: Vec<u8> = (0..1 << 20).map(|i| pattern(me, 1 << 20, 5, i)).collect();
    // SAFETY: `src` lives until after the quiet below.
    unsafe { rt.put_nbi(&big, &src, next)? };
    rt.quiet()?;
    rt.signal_op(flag.at(1)?, 1, SignalOp::Set, next)?;
    rt.signal_wait_until(flag.at(1)?, Cmp::Eq, 1)?;
    let got = rt.read_local(&big)?;
    let bad = (0..1 << 20).find(|&i| got[i] != pattern(prev, 1 << 20, 5, i));
    check!(
        bad.is_none(),
        "PE {me}: byte {bad:?} of the quieted put is wrong"
    );
    // Non-fetching atomics may return once posted (a remote engine), but
    // this PE's later reads, writes and signals to the same PE still come
    // after them, and `quiet` completes them.
    const POSTED: u64 = 40;
    let w = rt.calloc::<u64>(4)?;
    sync(rt)?;
    for r in 0..POSTED {
        rt.atomic_add(w.at(0)?, 1, next)?;
        check!(
            rt.g(w.at(0)?, next)? == r + 1,
            "PE {me}: a get right after posted add {r} missed it"
        );
        rt.atomic_set(w.at(1)?, r, next)?;
        rt.put(w.slice(1..2)?, &[r + 1000], next)?;
        let seen = rt.atomic_fetch(w.at(1)?, next)?;
        check!(
            seen == r + 1000,
            "PE {me}: a put after a posted set was overtaken by it ({seen})"
        );
        rt.atomic_or(w.at(2)?, 1 << r, next)?;
        rt.atomic_xor(w.at(2)?, 1 << (r + 1), next)?;
        rt.atomic_inc(w.at(3)?, next)?;
    }
    rt.signal_op(flag.at(1)?, 2, SignalOp::Set, next)?;
    rt.signal_wait_until(flag.at(1)?, Cmp::Eq, 2)?;
    rt.quiet()?;
    sync(rt)?;
    let v = rt.read_local(&w)?;
    let bits = (0..POSTED).fold(0u64, |acc, r| (acc | 1 << r) ^ 1 << (r + 1));
    check!(
        v == [POSTED, POSTED + 999, bits, POSTED],
        "PE {me}: after quiet the posted atomics left {v:?}, want {:?}",
        [POSTED, POSTED + 999, bits, POSTED]
    );
    sync(rt)?;
    rt.free(w)?;
    drop(srcs);
    rt.free(data)?;
    rt.free(flag)?;
    rt.free(big)?;
    Ok(())
}

/// `put_nbi`/`get_nbi` at several sizes, `put_handle`/`get_handle` giving
/// the buffer back, completion by `quiet`.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn non_blocking_operations(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let buf = rt.calloc::<u8>(2 * SLOT)?;
    for size in [1usize, 100, 8192, (1 << 20) + 7] {
        let srcs: Vec<Vec<u8>> = (0..2)
            .map(|k| (0..size).map(|i| pattern(me, size, k, i)).collect())
            .collect();
        for (k, src) in srcs.iter().enumerate() {
            let at = k * SLOT;
            // SAFETY: `srcs` lives until after the quiet in `sync`.
            unsafe { rt.put_nbi(buf.slice(at..at + size)?, src, next)? };
        }
        sync(rt)?;
        for k in 0..2 {
            let at = k * SLOT;
            let got = rt.read_local(buf.slice(at..at + size)?)?;
            let bad = (0..size).find(|&i| got[i] != pattern(prev, size, k, i));
            check!(
                bad.is_none(),
                "PE {me}: put_nbi {size} B #{k}: byte {bad:?}"
            );
        }
        let mut back = vec![0u8; size];
        // SAFETY: `back` is not touched until after the quiet.
        unsafe { rt.get_nbi(&mut back, buf.slice(0..size)?, next)? };
        rt.quiet()?;
        check!(back == srcs[0], "PE {me}: get_nbi {size} B");
        sync(rt)?;
    }
    let src: Vec<u64> = (0..4096).map(|i| i * 3 + me as u64).collect();
    let words = rt.calloc::<u64>(4096)?;
    let h = rt.put_handle(&words, src.clone(), next)?;
    let returned = h.wait().map_err(shmem_core::Error::from)?;
    check!(
        returned == src,
        "PE {me}: put_handle gave back a different buffer"
    );
    sync(rt)?;
    let h = rt.get_handle(vec![0u64; 4096], &words, next)?;
    let got = h.wait().map_err(shmem_core::Error::from)?;
    check!(
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == i as u64 * 3 + me as u64),
        "PE {me}: get_handle data"
    );
    let local = rt.read_local(&words)?;
    check!(
        local
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u64 * 3 + prev as u64),
        "PE {me}: put_handle data"
    );
    sync(rt)?;
    rt.free(words)?;
    rt.free(buf)?;
    Ok(())
}

/// Bad PEs, offsets outside the heap, misaligned atomics and signals,
/// freed objects and oversized copies are errors naming what was wrong, and
/// the job goes on afterwards.
///
/// # Errors
/// A [`crate::Failure`] naming the PE and the check, or the library error, when the engine
/// misbehaves.
pub fn errors_on_bad_arguments(rt: &Runtime) -> Outcome {
    let (me, n) = (rt.my_pe(), rt.n_pes());
    let next = (me + 1) % n;
    let size = rt.heap_size();
    let w = rt.calloc::<u64>(4)?;
    let r = rt.put(&w, &[1u64], n);
    check!(
        matches!(r, Err(Error::PeOutOfRange { pe, .. }) if pe == n),
        "put to PE {n}: {r:?}"
    );
    let r = rt.atomic_fetch(w.at(0)?, usize::MAX);
    check!(
        matches!(r, Err(Error::PeOutOfRange { .. })),
        "atomic on PE MAX: {r:?}"
    );
    for (off, len) in [
        (size - 4, 8),
        (size, 1),
        (usize::MAX - 2, 8),
        (0, 8),
        (100, 8),
    ] {
        let r = rt.put_bytes(next, off, &vec![0u8; len]);
        check!(
            matches!(r, Err(Error::OutOfHeap { .. })),
            "put at {off}+{len}: {r:?}"
        );
        let mut dst = vec![0u8; len];
        let r = rt.get_bytes(next, off, &mut dst);
        check!(
            matches!(r, Err(Error::OutOfHeap { .. })),
            "get at {off}+{len}: {r:?}"
        );
    }
    let r = rt.atomic_raw(next, w.offset() + 4, AmoWidth::W64, AmoOp::Fetch);
    check!(
        matches!(r, Err(Error::Misaligned { width: 8, .. })),
        "misaligned 64-bit AMO: {r:?}"
    );
    let r = rt.atomic_raw(next, w.offset() + 2, AmoWidth::W32, AmoOp::Add(1));
    check!(
        matches!(r, Err(Error::Misaligned { width: 4, .. })),
        "misaligned 32-bit AMO: {r:?}"
    );
    let odd = shmem_core::SymRef::<u64>::from_raw_parts(w.offset() + 4, rt.instance());
    let r = rt.signal_op(odd, 1, SignalOp::Set, next);
    check!(
        matches!(r, Err(Error::Misaligned { width: 8, .. })),
        "misaligned signal: {r:?}"
    );
    let outside = shmem_core::SymRef::<u64>::from_raw_parts(size, rt.instance());
    let r = rt.signal_op(outside, 1, SignalOp::Add, next);
    check!(
        matches!(r, Err(Error::OutOfHeap { .. })),
        "signal past the heap: {r:?}"
    );
    let r = rt.put_signal(w.slice(0..1)?, &[1u64], odd, 1, SignalOp::Set, next);
    check!(r.is_err(), "put_signal with a misaligned signal: {r:?}");
    let r = rt.atomic_raw(next, size - 4, AmoWidth::W64, AmoOp::Fetch);
    check!(r.is_err(), "AMO past the heap end: {r:?}");
    let r = rt.put(w.slice(0..2)?, &[1u64, 2, 3], next);
    check!(
        matches!(r, Err(Error::InvalidArgument { .. })),
        "3 elements into 2: {r:?}"
    );
    check!(
        w.slice(0..5).is_err() && w.at(4).is_err(),
        "views past the object's end"
    );
    let r = rt.iput(&w, &[1u64, 2], 0, 1, 2, next);
    check!(r.is_err(), "stride 0: {r:?}");
    sync(rt)?;
    let stale = w.at(0)?;
    rt.free(w)?;
    let r = rt.atomic_fetch(stale, next);
    check!(
        matches!(r, Err(Error::UseAfterFree { .. })),
        "AMO on a freed object: {r:?}"
    );
    let r = rt.signal_op(stale, 1, SignalOp::Set, next);
    check!(
        matches!(r, Err(Error::UseAfterFree { .. })),
        "signal on a freed object: {r:?}"
    );
    // Nothing above disturbed the job: a clean round trip still works.
    let ok = rt.calloc::<u64>(1)?;
    rt.p(ok.at(0)?, 99 + me as u64, next)?;
    sync(rt)?;
    check!(
        rt.read_local(&ok)?[0] == 99 + ((me + n - 1) % n) as u64,
        "PE {me}: put after errors"
    );
    rt.free(ok)?;
    Ok(())
}
