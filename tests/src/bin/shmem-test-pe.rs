//! One PE of an integration test: `shmem-test-pe SCENARIO`. Checks its
//! results against golden data and exits non-zero with a message naming the
//! PE and the mismatch otherwise. Run by the tests in `tests/tests/`.

use std::time::{Duration, Instant};

use shmem::{Cmp, Error, Result, Shmem, SignalOp};

macro_rules! check {
    ($pe:expr, $cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(Error::invalid("check", format!("PE {}: {}", $pe, format!($($msg)*))));
        }
    };
}

fn expect_err<T: std::fmt::Debug>(me: usize, r: Result<T>, needle: &str) -> Result<()> {
    match r {
        Ok(v) => Err(Error::invalid(
            "check",
            format!("PE {me}: expected an error containing {needle:?}, got Ok({v:?})"),
        )),
        Err(e) if e.to_string().contains(needle) => Ok(()),
        Err(e) => Err(Error::invalid(
            "check",
            format!("PE {me}: expected an error containing {needle:?}, got: {e}"),
        )),
    }
}

fn bootstrap(pe: &Shmem) -> Result<()> {
    let bs = pe.bootstrap();
    let (me, n) = (bs.rank(), bs.size());
    for round in 0..3u8 {
        let all = bs.allgather(&vec![me as u8 ^ round; me + 1])?;
        for (r, d) in all.iter().enumerate() {
            check!(
                me,
                *d == vec![r as u8 ^ round; r + 1],
                "allgather round {round} entry {r} = {d:?}"
            );
        }
        bs.barrier()?;
        let root = (round as usize) % n;
        let b = bs.broadcast(root, &[root as u8, 42, round])?;
        check!(
            me,
            b == vec![root as u8, 42, round],
            "broadcast from {root} gave {b:?}"
        );
    }
    Ok(())
}

fn rma(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    // u64 blocks: put to the right neighbour, get from the left.
    let a = pe.calloc::<u64>(1000)?;
    let data: Vec<u64> = (0..1000).map(|i| (me as u64) << 32 | i).collect();
    pe.put(&a, &data, right)?;
    pe.barrier_all()?;
    let got = pe.read_local(&a)?;
    check!(
        me,
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == (left as u64) << 32 | i as u64),
        "put from PE {left} wrong"
    );
    let mut back = vec![0u64; 1000];
    pe.get(&mut back, &a, right)?;
    check!(
        me,
        back == data,
        "get from PE {right} did not return my block"
    );
    // Other element types.
    let f = pe.calloc::<f64>(16)?;
    pe.put(f.slice(4..8)?, &[1.5, -2.0, me as f64, 1e300], right)?;
    let t = pe.calloc::<[u16; 3]>(4)?;
    pe.put(t.slice(1..2)?, &[[me as u16, 7, 9]], right)?;
    pe.barrier_all()?;
    check!(
        me,
        pe.read_local(f.slice(4..8)?)? == vec![1.5, -2.0, left as f64, 1e300],
        "f64 put"
    );
    check!(
        me,
        pe.read_local(t.slice(1..2)?)?[0] == [left as u16, 7, 9],
        "array put"
    );
    // p / g
    let x = pe.calloc::<i32>(n)?;
    for peer in 0..n {
        pe.p(x.at(me)?, -(me as i32) - 1, peer)?;
    }
    pe.barrier_all()?;
    for peer in 0..n {
        let v = pe.g(x.at(peer)?, (me + 3) % n)?;
        check!(me, v == -(peer as i32) - 1, "g of slot {peer} = {v}");
    }
    // Strided.
    let s = pe.calloc::<u32>(30)?;
    let src: Vec<u32> = (0..20).map(|i| me as u32 * 100 + i).collect();
    pe.iput(&s, &src, 3, 2, 10, right)?;
    pe.barrier_all()?;
    let got = pe.read_local(&s)?;
    for i in 0..10 {
        check!(
            me,
            got[i * 3] == left as u32 * 100 + (i as u32) * 2,
            "iput element {i}"
        );
        check!(me, i == 9 || got[i * 3 + 1] == 0, "iput touched a gap");
    }
    let mut gi = vec![0u32; 10];
    pe.iget(&mut gi, &s, 1, 3, 10, me)?;
    check!(
        me,
        gi.iter()
            .enumerate()
            .all(|(i, &v)| v == left as u32 * 100 + 2 * i as u32),
        "iget {gi:?}"
    );
    // Non-blocking.
    let nb = pe.calloc::<u8>(4096)?;
    let payload = vec![me as u8; 4096];
    // SAFETY: payload lives until quiet below.
    unsafe { pe.put_nbi(&nb, &payload, right)? };
    pe.quiet()?;
    pe.barrier_all()?;
    let mut into = vec![0u8; 4096];
    // SAFETY: `into` lives until quiet below.
    unsafe { pe.get_nbi(&mut into, &nb, left)? };
    pe.quiet()?;
    check!(
        me,
        into == vec![((left + n - 1) % n) as u8; 4096],
        "get_nbi"
    );
    // Zero-length copies are no-ops; overlapping copies on this PE act as memmove.
    pe.put(&a, &[] as &[u64], right)?;
    pe.barrier_all()?;
    pe.write_local(&s, &(0..30).collect::<Vec<u32>>())?;
    let ptr = pe.ptr(&s, me)?.expect("own heap is always mapped");
    // SAFETY: the source is the first 20 elements of our own symmetric object.
    let overlap = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), 20) }.to_vec();
    pe.put(s.slice(5..25)?, &overlap, me)?;
    pe.quiet()?; // delivery (not just source reuse) is guaranteed by quiet
    let got = pe.read_local(&s)?;
    check!(
        me,
        got[5..25] == (0..20).collect::<Vec<u32>>()[..],
        "overlapping self put {got:?}"
    );
    // shmem_ptr to a peer on this node.
    pe.barrier_all()?;
    if let Some(p) = pe.ptr(&a, right)? {
        // SAFETY: the peer's object is mapped here and nobody writes it now.
        let first = unsafe { *p.as_ptr() };
        check!(me, first == (me as u64) << 32, "ptr read {first:#x}");
    }
    pe.barrier_all()?;
    pe.free(nb)?;
    pe.free(s)?;
    pe.free(x)?;
    pe.free(t)?;
    pe.free(f)?;
    pe.free(a)?;
    Ok(())
}

fn atomics(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let target = 0;
    let c32 = pe.calloc::<i32>(8)?;
    let c64 = pe.calloc::<u64>(8)?;
    let fl = pe.calloc::<f64>(2)?;
    let f32s = pe.calloc::<f32>(2)?;
    pe.barrier_all()?;
    pe.atomic_add(c32.at(0)?, 2, target)?;
    pe.atomic_inc(c32.at(1)?, target)?;
    pe.atomic_fetch_add(c64.at(0)?, 1u64 << 33, target)?;
    pe.atomic_fetch_inc(c64.at(1)?, target)?;
    pe.atomic_or(c64.at(2)?, 1u64 << me, target)?;
    pe.atomic_fetch_or(c32.at(2)?, 1 << me, target)?;
    pe.atomic_xor(c64.at(3)?, 1u64 << me, target)?;
    pe.atomic_fetch_xor(c32.at(3)?, 1 << (me % 31), target)?;
    pe.barrier_all()?;
    if me == 0 {
        pe.atomic_set(c64.at(4)?, u64::MAX, me)?;
        pe.atomic_set(c32.at(4)?, -1, me)?;
    }
    pe.barrier_all()?;
    pe.atomic_and(c64.at(4)?, !(1u64 << me), target)?;
    pe.atomic_fetch_and(c32.at(4)?, !(1 << me), target)?;
    pe.barrier_all()?;
    let v32 = pe.read_local(&c32)?;
    let v64 = pe.read_local(&c64)?;
    if me == target {
        let all: u64 = (0..n).map(|i| 1u64 << i).sum();
        check!(
            me,
            v32[0] == 2 * n as i32 && v32[1] == n as i32,
            "add/inc {:?}",
            v32
        );
        check!(
            me,
            v64[0] == (n as u64) << 33 && v64[1] == n as u64,
            "fetch_add/fetch_inc {:?}",
            v64
        );
        check!(me, v64[2] == all && v32[2] as u64 == all, "or");
        check!(me, v64[3] == all, "xor");
        check!(
            me,
            v64[4] == !all && v32[4] == !(all as i32),
            "and {:#x}",
            v64[4]
        );
    }
    pe.barrier_all()?;
    // compare-swap election: exactly one PE wins.
    let lock = pe.calloc::<i64>(1)?;
    let old = pe.atomic_compare_swap(lock.at(0)?, 0, me as i64 + 1, 0)?;
    let winners = pe.calloc::<u32>(1)?;
    if old == 0 {
        pe.atomic_inc(winners.at(0)?, 0)?;
    }
    pe.barrier_all()?;
    if me == 0 {
        check!(me, pe.read_local(&winners)?[0] == 1, "compare_swap winners");
        let l = pe.atomic_fetch(lock.at(0)?, 0)?;
        check!(me, l >= 1 && l <= n as i64, "lock holder {l}");
    }
    // swap and float atomics.
    let prev = pe.atomic_swap(fl.at(0)?, me as f64 + 0.5, right(me, n))?;
    pe.atomic_set(f32s.at(1)?, 2.25f32, right(me, n))?;
    pe.barrier_all()?;
    check!(me, prev == 0.0, "float swap returned {prev}");
    check!(
        me,
        pe.atomic_fetch(fl.at(0)?, me)? == left(me, n) as f64 + 0.5,
        "float swap value"
    );
    check!(me, pe.atomic_fetch(f32s.at(1)?, me)? == 2.25, "f32 set");
    let sw = pe.atomic_swap(c64.at(5)?, 7, me)?;
    check!(me, sw == 0 && pe.atomic_fetch(c64.at(5)?, me)? == 7, "swap");
    // Misaligned atomics are errors.
    let raw = pe.runtime().atomic_raw(
        0,
        c64.offset() + 4,
        shmem_core::AmoWidth::W64,
        shmem_core::AmoOp::Fetch,
    );
    expect_err(me, raw, "misaligned")?;
    pe.barrier_all()?;
    Ok(())
}

fn right(me: usize, n: usize) -> usize {
    (me + 1) % n
}
fn left(me: usize, n: usize) -> usize {
    (me + n - 1) % n
}

fn fetch_add_stress(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let per_pe: u64 = std::env::var("STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let counter = pe.calloc::<u64>(1)?;
    let mut seen_max = 0;
    for _ in 0..per_pe {
        let old = pe.atomic_fetch_add(counter.at(0)?, 1, 0)?;
        check!(me, old >= seen_max, "fetch_add went backwards");
        seen_max = old;
    }
    pe.barrier_all()?;
    let total = pe.atomic_fetch(counter.at(0)?, 0)?;
    check!(
        me,
        total == per_pe * n as u64,
        "total {total}, expected {}",
        per_pe * n as u64
    );
    pe.barrier_all()?;
    pe.free(counter)
}

fn signals(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (r, l) = (right(me, n), left(me, n));
    let data = pe.calloc::<u64>(256)?;
    let sig = pe.calloc::<u64>(5)?;
    let s0 = sig.at(0)?;
    let block: Vec<u64> = (0..256).map(|i| i * 7 + me as u64).collect();
    pe.put_signal(&data, &block, s0, 1, SignalOp::Set, r)?;
    let v = pe.signal_wait_until(s0, Cmp::Eq, 1)?;
    check!(me, v == 1, "signal value {v}");
    let got = pe.read_local(&data)?;
    check!(
        me,
        got.iter()
            .enumerate()
            .all(|(i, &x)| x == i as u64 * 7 + l as u64),
        "data before signal"
    );
    // ADD from every PE.
    let s1 = sig.at(1)?;
    for peer in 0..n {
        pe.signal_op(s1, 10, SignalOp::Add, peer)?;
    }
    pe.signal_wait_until(s1, Cmp::Ge, 10 * n as u64)?;
    check!(
        me,
        pe.signal_fetch(s1)? == 10 * n as u64,
        "signal add total"
    );
    // Every comparison.
    let s2 = sig.at(2)?;
    pe.barrier_all()?;
    pe.signal_op(s2, 5, SignalOp::Set, r)?;
    check!(me, pe.signal_wait_until(s2, Cmp::Ne, 0)? == 5, "NE");
    check!(me, pe.signal_wait_until(s2, Cmp::Gt, 4)? == 5, "GT");
    check!(me, pe.signal_wait_until(s2, Cmp::Ge, 5)? == 5, "GE");
    check!(me, pe.signal_wait_until(s2, Cmp::Le, 5)? == 5, "LE");
    check!(me, pe.signal_wait_until(s2, Cmp::Lt, 6)? == 5, "LT");
    // Non-blocking put_signal with ADD.
    let s3 = sig.at(3)?;
    pe.barrier_all()?;
    let small = [me as u64; 4];
    // SAFETY: `small` lives until quiet.
    unsafe { pe.put_signal_nbi(data.slice(0..4)?, &small, s3, 3, SignalOp::Add, r)? };
    pe.quiet()?;
    pe.signal_wait_until(s3, Cmp::Eq, 3)?;
    check!(
        me,
        pe.read_local(data.slice(0..4)?)? == vec![l as u64; 4],
        "put_signal_nbi data"
    );
    // Completion: once quiet returns, the initiator's own gets find the
    // data and the signal in the target's memory (engines that apply
    // signals on the target's side complete them only when it has).
    pe.barrier_all()?;
    let mark = [0x5157_0000 + me as u64; 2];
    for (k, sig_word) in [(0usize, 40 + me as u64), (1, 41 + me as u64)] {
        pe.put_signal(
            data.slice(8 + 2 * k..10 + 2 * k)?,
            &mark,
            sig.at(4)?,
            sig_word,
            SignalOp::Set,
            r,
        )?;
        pe.quiet()?;
        let mut back = [0u64; 2];
        pe.get(&mut back, data.slice(8 + 2 * k..10 + 2 * k)?, r)?;
        check!(me, back == mark, "put_signal data after quiet: {back:?}");
        let mut word = [0u64; 1];
        pe.get(&mut word, sig.slice(4..5)?, r)?;
        check!(me, word[0] == sig_word, "signal after quiet: {}", word[0]);
    }
    pe.barrier_all()?;
    pe.free(sig)?;
    pe.free(data)
}

fn signal_stress(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let rounds: u64 = 2000;
    let slots = pe.calloc::<u64>(8)?;
    let sig = pe.calloc::<u64>(1)?;
    let s = sig.at(0)?;
    let (r, l) = (right(me, n), left(me, n));
    // Token ring: PE 0 starts each round; every PE waits for its left
    // neighbour's signal, checks the payload, and forwards to the right.
    for round in 1..=rounds {
        if me != 0 {
            pe.signal_wait_until(s, Cmp::Ge, round)?;
            let got = pe.read_local(&slots)?;
            check!(
                me,
                got == vec![round * 1000 + l as u64; 8],
                "round {round}: got {got:?}"
            );
        }
        pe.put_signal(
            &slots,
            &[round * 1000 + me as u64; 8],
            s,
            round,
            SignalOp::Set,
            r,
        )?;
        if me == 0 {
            pe.signal_wait_until(s, Cmp::Ge, round)?;
            let got = pe.read_local(&slots)?;
            check!(
                me,
                got == vec![round * 1000 + l as u64; 8],
                "round {round}: got {got:?}"
            );
        }
    }
    // Everyone adds to everyone: exact totals.
    pe.barrier_all()?;
    let counters = pe.calloc::<u64>(1)?;
    for i in 0..500u64 {
        pe.signal_op(
            counters.at(0)?,
            i % 3 + 1,
            SignalOp::Add,
            (me + i as usize) % n,
        )?;
    }
    // Each PE receives from every PE j the sum over i with (j+i)%n == me.
    let mut want = 0u64;
    for j in 0..n {
        want += (0..500u64)
            .filter(|&i| (j + i as usize) % n == me)
            .map(|i| i % 3 + 1)
            .sum::<u64>();
    }
    pe.signal_wait_until(counters.at(0)?, Cmp::Ge, want)?;
    pe.barrier_all()?;
    check!(
        me,
        pe.signal_fetch(counters.at(0)?)? == want,
        "signal add stress total"
    );
    pe.free(counters)?;
    pe.free(sig)?;
    pe.free(slots)
}

fn waits(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let flags = pe.calloc::<i32>(n)?;
    let longs = pe.calloc::<i64>(4)?;
    pe.barrier_all()?;
    for peer in 0..n {
        pe.p(flags.at(me)?, me as i32 + 1, peer)?;
    }
    pe.wait_until_all(flags.as_sym(), None, Cmp::Gt, 0)?;
    let v = pe.read_local(&flags)?;
    check!(
        me,
        v == (1..=n as i32).collect::<Vec<_>>(),
        "wait_until_all {v:?}"
    );
    check!(
        me,
        pe.test_all(flags.as_sym(), None, Cmp::Ge, 1)?,
        "test_all"
    );
    let any = pe.wait_until_any(flags.as_sym(), None, Cmp::Eq, n as i32)?;
    check!(me, any == Some(n - 1), "wait_until_any {any:?}");
    let mut mask = vec![false; n];
    mask[n - 1] = true;
    check!(
        me,
        pe.test_any(flags.as_sym(), Some(&mask), Cmp::Eq, n as i32)?
            .is_none(),
        "masked test_any"
    );
    let some = pe.wait_until_some(flags.as_sym(), None, Cmp::Le, 2)?;
    check!(
        me,
        some == (0..n.min(2)).collect::<Vec<_>>(),
        "wait_until_some {some:?}"
    );
    let vals: Vec<i32> = (1..=n as i32).collect();
    pe.wait_until_all_vector(flags.as_sym(), None, Cmp::Eq, &vals)?;
    check!(
        me,
        pe.test_all_vector(flags.as_sym(), None, Cmp::Eq, &vals)?,
        "test_all_vector"
    );
    check!(
        me,
        pe.wait_until_any_vector(flags.as_sym(), None, Cmp::Eq, &vals)? == Some(0),
        "any_vector"
    );
    check!(
        me,
        pe.wait_until_some_vector(flags.as_sym(), None, Cmp::Eq, &vals)?
            .len()
            == n,
        "some_vector"
    );
    check!(
        me,
        pe.test_some_vector(flags.as_sym(), None, Cmp::Ne, &vals)?
            .is_empty(),
        "test_some_vector"
    );
    check!(
        me,
        pe.test_any_vector(flags.as_sym(), None, Cmp::Ne, &vals)?
            .is_none(),
        "test_any_vector"
    );
    check!(me, !pe.test(flags.at(0)?, Cmp::Eq, 99)?, "test");
    check!(
        me,
        pe.test_some(flags.as_sym(), Some(&vec![true; n]), Cmp::Ge, 0)?
            .is_empty(),
        "all masked"
    );
    // A blocked waiter woken by a late put (the writer sleeps first so the waiter blocks on its futex).
    pe.barrier_all()?;
    if me == 0 && n > 1 {
        std::thread::sleep(Duration::from_millis(50));
        pe.p(longs.at(2)?, 1234, 1)?;
    }
    if me == 1 {
        pe.wait_until(longs.at(2)?, Cmp::Eq, 1234)?;
    }
    expect_err(
        me,
        pe.wait_until_all_vector(flags.as_sym(), None, Cmp::Eq, &vec![1; n + 1]),
        "cmp_values",
    )?;
    expect_err(
        me,
        pe.wait_until_all(flags.as_sym(), Some(&vec![true; n + 1]), Cmp::Eq, 1),
        "status",
    )?;
    pe.barrier_all()?;
    pe.free(longs)?;
    pe.free(flags)
}

fn alloc(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let a = pe.malloc::<u8>(100)?;
    let b = pe.align_alloc::<u8>(4096, 10)?;
    let dev = pe.malloc_mem::<u32>(16, shmem::MemType::Device)?;
    let host = pe.malloc_mem::<u32>(16, shmem::MemType::Host)?;
    pe.write_local(&dev, &[5; 16])?;
    check!(
        me,
        pe.read_local(&dev)? == vec![5; 16],
        "device-kind memory is usable"
    );
    pe.free(host)?;
    pe.free(dev)?;
    check!(me, b.offset() % 4096 == 0, "align");
    let offs = pe
        .bootstrap()
        .allgather(&(a.offset() as u64).to_le_bytes())?;
    check!(
        me,
        offs.iter()
            .all(|o| o[..] == (a.offset() as u64).to_le_bytes()),
        "offsets differ across PEs"
    );
    // realloc keeps contents and stays symmetric.
    pe.write_local(&a, &[me as u8; 100])?;
    let a = pe.realloc(a, 100_000)?;
    check!(
        me,
        pe.read_local(a.slice(0..100)?)? == vec![me as u8; 100],
        "realloc lost data"
    );
    pe.put(a.slice(99_000..99_010)?, &[9u8; 10], right(me, n))?;
    pe.barrier_all()?;
    check!(
        me,
        pe.read_local(a.slice(99_000..99_010)?)? == vec![9u8; 10],
        "realloc'd object not symmetric"
    );
    // calloc zeroes even reused memory.
    pe.free(a)?;
    let z = pe.calloc::<u8>(100_000)?;
    check!(
        me,
        pe.read_local(&z)?.iter().all(|&x| x == 0),
        "calloc not zeroed"
    );
    // Mismatched sizes: an error naming the PEs, on every PE.
    if n > 1 {
        let r = pe.malloc::<u8>(if me == n - 1 { 64 } else { 128 });
        expect_err(me, r, &format!("PE {}: malloc(size 64", n - 1))?;
    }
    // Out of memory names free space.
    let (free, _) = pe.heap_free();
    expect_err(me, pe.malloc::<u8>(free + 1), "symmetric heap exhausted")?;
    // Double free and non-symmetric free via the raw API.
    let off = z.offset();
    pe.free(z)?;
    expect_err(me, pe.runtime().free_bytes(off), "not a live allocation")?;
    expect_err(me, pe.runtime().free_bytes(12345), "not a live allocation")?;
    pe.free(b)?;
    Ok(())
}

fn errors(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let a = pe.calloc::<u64>(8)?;
    expect_err(me, pe.put(&a, &[1], n), "out of range")?;
    expect_err(
        me,
        pe.g(a.at(0)?, n + 5),
        &format!("PE {} is out of range", n + 5),
    )?;
    expect_err(me, pe.put(&a, &[0u64; 9], 0), "do not fit")?;
    expect_err(me, a.slice(0..9), "outside a symmetric object")?;
    let heap = pe.heap_size();
    expect_err(
        me,
        pe.put_bytes(0, heap - 4, &[0u8; 8]),
        "outside the symmetric heap",
    )?;
    // The first page holds the runtime's wait doorbell: not user memory.
    expect_err(
        me,
        pe.put_bytes(0, 0, &[0u8; 8]),
        "outside the symmetric heap",
    )?;
    let amo = pe
        .runtime()
        .atomic_raw(0, 8, shmem_core::AmoWidth::W64, shmem_core::AmoOp::Fetch);
    expect_err(me, amo, "outside")?;
    expect_err(
        me,
        pe.get_bytes(0, usize::MAX - 2, &mut [0u8; 8]),
        "outside the symmetric heap",
    )?;
    expect_err(
        me,
        pe.runtime()
            .require_offset(&me as *const usize as *const u8),
        "not in the symmetric heap",
    )?;
    let stranger = shmem::SymBuf::<u64>::from_raw_parts(a.offset(), 8, 7);
    expect_err(me, pe.put(&stranger, &[1], 0), "instance 7")?;
    expect_err(me, pe.iput(&a, &[1u64, 2], 0, 1, 2, 0), "stride")?;
    check!(
        me,
        !shmem::pe_accessible(n) && shmem::pe_accessible(0),
        "pe_accessible"
    );
    let p = pe.ptr(&a, me)?.map(|p| p.as_ptr() as *const u8);
    check!(
        me,
        p.is_some_and(|p| shmem::addr_accessible(p, 0)),
        "addr_accessible"
    );
    pe.barrier_all()?;
    pe.free(a)?;
    let handle = pe.clone();
    pe.finalize()?;
    expect_err(me, handle.put_bytes(0, 4096, &[1]), "not initialized")?;
    expect_err(me, shmem::my_pe(), "not initialized")?;
    expect_err(me, handle.finalize(), "not initialized")?;
    Ok(())
}

fn kill_in_barrier(pe: &Shmem) -> Result<()> {
    let me = pe.my_pe();
    // SIGTERM is held (`SURVIVORS_REPORT`): survivors report by themselves.
    pe.barrier_all()?;
    if me == 1 {
        // SAFETY: raising SIGKILL on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let t = Instant::now();
    let r = pe.barrier_all().and_then(|_| pe.barrier_all());
    let dt = t.elapsed();
    match r {
        Err(e) if e.to_string().contains("PE 1 exited") && dt < Duration::from_secs(2) => {
            eprintln!("PE {me}: failed as expected after {dt:?}: {e}");
            std::process::exit(3)
        }
        other => Err(Error::invalid(
            "check",
            format!("PE {me}: barrier after PE 1 died gave {other:?} after {dt:?}"),
        )),
    }
}

fn kill_in_wait(pe: &Shmem) -> Result<()> {
    let me = pe.my_pe();
    // SIGTERM is held (`SURVIVORS_REPORT`): survivors report by themselves.
    let sig = pe.calloc::<u64>(1)?;
    let left = pe.calloc::<u64>(1)?;
    pe.barrier_all()?;
    // PE 1 dies only once every other PE has left the barrier (each says so
    // with a signal to PE 1): a PE still in it could otherwise see the
    // death there, before the wait this scenario is about.
    if me == 1 {
        let others = pe.n_pes() as u64 - 1;
        pe.signal_wait_until(left.at(0)?, Cmp::Ge, others)?;
        // SAFETY: raising SIGKILL on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    // Where signals complete on the target's acknowledgement (libfabric's
    // auto-progress providers, such as `sockets`), PE 1 may see this one
    // and die before the acknowledgement is back: the signal then fails
    // naming PE 1, and the wait below must report the death all the same.
    match pe.signal_op(left.at(0)?, 1, SignalOp::Add, 1) {
        Err(e) if !e.to_string().contains("PE 1 exited") => return Err(e),
        _ => {}
    }
    let t = Instant::now();
    let r = pe.signal_wait_until(sig.at(0)?, Cmp::Eq, 1);
    let dt = t.elapsed();
    match r {
        Err(e) if e.to_string().contains("PE 1 exited") && dt < Duration::from_secs(2) => {
            std::process::exit(3)
        }
        other => Err(Error::invalid(
            "check",
            format!("PE {me}: wait after PE 1 died gave {other:?} after {dt:?}"),
        )),
    }
}

/// Sends this process's stderr to the file named by `HANG_LOG` (appending,
/// so every PE's lines land in one file the test reads).
fn stderr_to_log() -> Result<()> {
    use std::os::fd::AsRawFd;
    let Ok(path) = std::env::var("HANG_LOG") else {
        return Ok(());
    };
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::os(format!("opening {path}"), e))?;
    // SAFETY: dup2 onto fd 2 of two open descriptors.
    if unsafe { libc::dup2(f.as_raw_fd(), 2) } < 0 {
        return Err(Error::os("dup2", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// PE 1 stops itself (SIGSTOP); the others' blocking get from it and then
/// their barrier must fail within their timeouts, naming PE 1.
fn stop_in_barrier(pe: &Shmem) -> Result<()> {
    let me = pe.my_pe();
    // SIGTERM is held (`SURVIVORS_REPORT`): survivors report by themselves.
    let buf = pe.calloc::<u64>(1 << 10)?;
    pe.barrier_all()?;
    if me == 1 {
        // SAFETY: stopping ourselves; the launcher kills us at the end.
        unsafe { libc::raise(libc::SIGSTOP) };
        return Err(Error::invalid("check", "PE 1 was continued"));
    }
    let mut dst = vec![0u64; 1 << 10];
    // Over HCCS/SDMA the stopped PE's memory is mapped here and the get
    // completes; over ROCE its engine must give up after SHMEM_LINK_TIMEOUT.
    let r = pe
        .get(&mut dst, buf.slice(..)?, 1)
        .and_then(|_| pe.barrier_all());
    match r {
        Err(e)
            if e.to_string().contains("PE 1 has not answered")
                || e.to_string().contains("PE 1 did not answer")
                || e.to_string().contains("PE 1 at") =>
        {
            eprintln!("PE {me}: failed as expected: {e}");
            std::process::exit(3)
        }
        other => Err(Error::invalid(
            "check",
            format!("PE {me}: with PE 1 stopped, got {other:?}"),
        )),
    }
}

/// PE 0 allocates while the others enter a barrier: a deadlock the hang
/// report must explain.
fn hang_mismatch(pe: &Shmem) -> Result<()> {
    stderr_to_log()?;
    pe.barrier_all()?;
    if pe.my_pe() == 0 {
        let _stuck = pe.calloc::<u64>(4)?;
    } else {
        pe.barrier_all()?;
    }
    Err(Error::invalid(
        "check",
        format!("PE {}: the mismatched calls returned", pe.my_pe()),
    ))
}

/// PE 0 roots a small broadcast that PE 1 never calls (it waits for a
/// signal nobody sends); PE 0 returns from the broadcast (its root does
/// not wait where the PEs do not map each other) and its next call, a
/// barrier, waits for PE 1's part of the broadcast: the hang report must
/// name the broadcast's end, not the barrier.
fn hang_early_root(pe: &Shmem) -> Result<()> {
    stderr_to_log()?;
    let coll = pe.collectives().clone();
    let world = coll.world();
    let src = pe.calloc::<u64>(1)?;
    let dst = pe.calloc::<u64>(1)?;
    let never = pe.calloc::<u64>(1)?;
    coll.barrier_all()?;
    if pe.my_pe() == 0 {
        coll.broadcast(&world, &dst, &src, 1, 0)?;
        coll.barrier_all()?;
    } else {
        pe.signal_wait_until(never.at(0)?, Cmp::Eq, 1)?;
    }
    Err(Error::invalid(
        "check",
        format!("PE {}: the mismatched calls returned", pe.my_pe()),
    ))
}

/// Handles to freed objects, and views of them, are refused; so is local
/// access after finalize and an alignment of 0.
fn stale_handles(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let right = (me + 1) % n;
    let a = pe.calloc::<u64>(16)?;
    let view = a.slice(2..4)?;
    let one = a.at(0)?;
    let old_offset = a.offset();
    pe.free(a)?;
    const UAF: &str = "use after free";
    expect_err(me, pe.put(view, &[1, 2], right), UAF)?;
    let mut two = [0u64; 2];
    expect_err(me, pe.get(&mut two, view, right), UAF)?;
    expect_err(me, pe.read_local(view), UAF)?;
    expect_err(me, pe.write_local(view, &[5, 6]), UAF)?;
    expect_err(me, pe.p(one, 9, right), UAF)?;
    expect_err(me, pe.atomic_fetch_add(one, 1, right), UAF)?;
    expect_err(me, pe.test(one, Cmp::Eq, 0), UAF)?;
    // The space is reused by the next allocation; stale views still fail
    // and the new object works.
    let b = pe.calloc::<u64>(16)?;
    check!(
        me,
        b.offset() == old_offset,
        "expected reuse of offset {old_offset:#x}, got {:#x}",
        b.offset()
    );
    expect_err(me, pe.put(view, &[1, 2], right), UAF)?;
    pe.put(b.slice(2..4)?, &[me as u64, 77], right)?;
    pe.barrier_all()?;
    let left = (me + n - 1) % n;
    let got = pe.read_local(b.slice(..)?)?;
    let mut want = vec![0u64; 16];
    want[2] = left as u64;
    want[3] = 77;
    check!(me, got == want, "new object holds {got:?}, want {want:?}");
    // realloc retires the old handle's views too.
    let keep = b.slice(0..1)?;
    let c = pe.realloc(b, 8)?;
    expect_err(me, pe.read_local(keep), UAF)?;
    check!(
        me,
        pe.read_local(c.slice(2..4)?)? == vec![left as u64, 77],
        "realloc kept the prefix"
    );
    expect_err(me, pe.align_alloc::<u64>(0, 4), "alignment")?;
    expect_err(me, pe.align_alloc::<u64>(24, 4), "alignment")?;
    pe.finalize()?;
    expect_err(me, pe.read_local(c.slice(..)?), "not initialized")?;
    expect_err(me, pe.write_local(c.slice(0..1)?, &[1]), "not initialized")?;
    std::process::exit(0)
}

/// PE 1 is killed; every other PE keeps reading from it until an operation
/// fails, and then every kind of operation aimed at PE 1 (and `quiet`) must
/// fail naming it, while operations on live PEs still work.
fn rma_to_dead(pe: &Shmem) -> Result<()> {
    let me = pe.my_pe();
    // SIGTERM is held (`SURVIVORS_REPORT`): survivors report by themselves.
    let big = 1 << 20;
    let buf = pe.calloc::<u8>(big)?;
    let sig = pe.calloc::<u64>(1)?;
    pe.barrier_all()?;
    if me == 1 {
        // SAFETY: raising SIGKILL on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    // Blocking gets from PE 1 succeed until the control plane reports the
    // death; the safety net only keeps a broken build from looping forever.
    let t = Instant::now();
    let net = t + Duration::from_secs(30);
    let mut word = [0u8; 8];
    let mut gets = 0u64;
    let (first, dt) = loop {
        match pe.get(&mut word, buf.slice(0..8)?, 1) {
            Ok(()) => gets += 1,
            Err(e) => break (e.to_string(), t.elapsed()),
        }
        if Instant::now() > net {
            return Err(Error::invalid(
                "check",
                format!("PE {me}: {gets} gets from dead PE 1 all returned Ok"),
            ));
        }
    };
    // Over ROCE the engine's own link may notice first and say so its way.
    let roce = std::env::var("SHMEM_TEST_ENGINE").is_ok_and(|e| e.eq_ignore_ascii_case("roce"));
    let needle = if roce { "PE 1" } else { "PE 1 exited" };
    check!(me, first.contains(needle), "first error: {first}");
    let src = vec![7u8; big];
    let mut dst = vec![0u8; big];
    expect_err(me, pe.put(buf.slice(..)?, &src, 1), needle)?;
    expect_err(me, pe.get(&mut dst, buf.slice(..)?, 1), needle)?;
    expect_err(me, pe.p(sig.at(0)?, 1, 1), needle)?;
    expect_err(me, pe.atomic_fetch_add(sig.at(0)?, 1, 1), needle)?;
    expect_err(me, pe.signal_op(sig.at(0)?, 1, SignalOp::Set, 1), needle)?;
    expect_err(
        me,
        pe.put_signal(buf.slice(0..8)?, &[1u8; 8], sig.at(0)?, 1, SignalOp::Set, 1),
        needle,
    )?;
    expect_err(
        me,
        pe.put_handle(buf.slice(..)?, src.clone(), 1).map(|_| ()),
        needle,
    )?;
    // SAFETY: `src` outlives the quiet below.
    let nbi = unsafe { pe.put_nbi(buf.slice(..)?, &src, 1) };
    expect_err(me, nbi, needle)?;
    // Over ROCE the engine may have failed the operations above before the
    // store reported the death; quiet, which targets no PE, fails once that
    // report is in (polled, with the same safety net as the gets).
    let quiet = loop {
        match pe.quiet() {
            Ok(()) if Instant::now() < net => std::thread::yield_now(),
            other => break other,
        }
    };
    expect_err(me, quiet, needle)?;
    // This PE's own heap is still reachable (the other survivors may have
    // exited already).
    pe.put(buf.slice(0..8)?, &[me as u8; 8], me)?;
    pe.get(&mut word, buf.slice(0..8)?, me)?;
    check!(me, word == [me as u8; 8], "own heap read back {word:?}");
    eprintln!("PE {me}: {gets} gets in {dt:?} before PE 1's death was known; then: {first}");
    std::process::exit(3)
}

/// Large copies (split across engine threads), non-blocking large copies,
/// put_signal_nbi ordering, and memory outside the heap.
fn bulk(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (r, l) = (right(me, n), left(me, n));
    let len = 3 << 20;
    let big = pe.calloc::<u32>(len / 4)?;
    let data: Vec<u32> = (0..len as u32 / 4).map(|i| i ^ (me as u32) << 24).collect();
    pe.put(&big, &data, r)?;
    pe.barrier_all()?;
    let got = pe.read_local(&big)?;
    check!(
        me,
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == i as u32 ^ (l as u32) << 24),
        "large put"
    );
    let mut back = vec![0u32; len / 4];
    pe.get(&mut back, &big, r)?;
    check!(me, back == data, "large get");
    // put_nbi of a large block, completed by quiet.
    let other = pe.calloc::<u32>(len / 4)?;
    // SAFETY: `data` lives until quiet below.
    unsafe { pe.put_nbi(&other, &data, r)? };
    pe.quiet()?;
    pe.barrier_all()?;
    check!(me, pe.read_local(&other)? == got, "large put_nbi");
    // Blocking puts large enough that their bounce buffers are pooled (and,
    // where local buffers must be registered, registered once): reused
    // from one put to the next while earlier ones may still be in flight.
    // They overwrite `other`: every PE has checked its copy first. 64 KiB
    // each: under libfabric's SHMEM_ROCE_OFI_DIRECT_PUT (256K), so they
    // bounce, where the 3 MiB put above wrote straight from its source.
    pe.barrier_all()?;
    let chunk = 16 << 10;
    for round in 0..6u32 {
        let v: Vec<u32> = (0..chunk as u32)
            .map(|i| i ^ round << 20 ^ (me as u32) << 24)
            .collect();
        let at = round as usize * chunk;
        pe.put(other.slice(at..at + chunk)?, &v, r)?;
    }
    pe.quiet()?;
    pe.barrier_all()?;
    let pooled = pe.read_local(other.slice(..6 * chunk)?)?;
    check!(
        me,
        pooled.chunks(chunk).enumerate().all(|(round, c)| c
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u32 ^ (round as u32) << 20 ^ (l as u32) << 24)),
        "blocking puts through pooled bounce buffers"
    );
    // put_signal_nbi: the receiver sees the whole block once the signal is set.
    let sig = pe.calloc::<u64>(1)?;
    let payload: Vec<u32> = vec![0xC0DE_0000 | me as u32; len / 4];
    pe.barrier_all()?;
    // SAFETY: `payload` lives until quiet below.
    unsafe { pe.put_signal_nbi(&big, &payload, sig.at(0)?, 9, SignalOp::Set, r)? };
    pe.signal_wait_until(sig.at(0)?, Cmp::Eq, 9)?;
    let got = pe.read_local(&big)?;
    check!(
        me,
        got.iter().all(|&v| v == 0xC0DE_0000 | l as u32),
        "data was not complete when the signal arrived"
    );
    pe.quiet()?;
    // Static data of another PE (outside the heap), by address.
    static TARGET: std::sync::Mutex<[u8; 16]> = std::sync::Mutex::new([0; 16]);
    let addr = {
        let g = TARGET
            .lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?;
        g.as_ptr() as usize
    };
    // Another static that every PE exposes: engines that register memory
    // (libfabric's) then reach it on other nodes too.
    static EXPOSED: std::sync::Mutex<[u8; 64]> = std::sync::Mutex::new([0; 64]);
    let eaddr = {
        let g = EXPOSED
            .lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?;
        g.as_ptr() as usize
    };
    // And words for atomics on exposed memory.
    static WORDS: [std::sync::atomic::AtomicU64; 2] =
        [const { std::sync::atomic::AtomicU64::new(0) }; 2];
    let waddr = WORDS.as_ptr() as usize;
    let mut card = (addr as u64).to_le_bytes().to_vec();
    card.extend_from_slice(&(eaddr as u64).to_le_bytes());
    card.extend_from_slice(&(waddr as u64).to_le_bytes());
    let addrs = pe.bootstrap().allgather(&card)?;
    let word = |pe: usize, k: usize| {
        u64::from_le_bytes(addrs[pe][8 * k..8 * k + 8].try_into().unwrap_or_default()) as usize
    };
    let (raddr, readdr, rwaddr) = (word(r, 0), word(r, 1), word(r, 2));
    // SAFETY: statics of this program, mapped for the process's life.
    unsafe { pe.runtime().expose_memory(&[(eaddr, 64), (waddr, 16)])? };
    let topo = pe.runtime().topology();
    let same_node = topo.same_node(r) && topo.same_node(l);
    if !same_node && n > 1 {
        let peek = pe.runtime().get_from_address(r, raddr, &mut [0u8; 4]);
        if topo.same_node(r) {
            peek?;
        } else {
            expect_err(me, peek, "outside the symmetric heap")?;
        }
    }
    // Across nodes, the RoCE engine (either provider) reaches what its PE
    // exposed, and only that.
    let provider = std::env::var("SHMEM_ROCE_PROVIDER").unwrap_or_default();
    let roce = provider == "ofi" || provider == "sw";
    if roce && n > 1 && !topo.same_node(r) {
        let mine = [0xA0 | me as u8; 64];
        // SAFETY: the target is the live static EXPOSED of PE r.
        unsafe { pe.runtime().put_to_address(r, readdr, &mine)? };
        pe.quiet()?;
        let mut peek = [0u8; 16];
        pe.runtime().get_from_address(r, readdr + 8, &mut peek)?;
        check!(
            me,
            peek == [0xA0 | me as u8; 16],
            "get_from_address across nodes {peek:?}"
        );
        let past = pe.runtime().get_from_address(r, readdr + 60, &mut [0u8; 8]);
        expect_err(me, past, "outside what PE")?;
    }
    // Atomics on exposed memory across nodes: applied by the owner as CPU
    // atomics (the sw provider's target, or libfabric atomic messages, on
    // by default over tcp), atomic with the owner's own; elsewhere refused
    // as unsupported.
    let fi = std::env::var("FI_PROVIDER").unwrap_or_default();
    let amo_mode = match (provider.as_str(), fi.as_str()) {
        ("sw", _) | ("ofi", "tcp" | "net") => Some(true),
        ("ofi", "sockets") => Some(false),
        _ => None,
    };
    let amo_engine = amo_mode == Some(true);
    let (w64, w32) = (
        shmem_core::transport::AmoWidth::W64,
        shmem_core::transport::AmoWidth::W32,
    );
    use shmem_core::transport::AmoOp;
    let remote_amo = n > 1 && !topo.same_node(r);
    let owner_amo = n > 1 && !topo.same_node(l);
    pe.barrier_all()?;
    if amo_engine && owner_amo {
        for _ in 0..50 {
            WORDS[0].fetch_add(1000, std::sync::atomic::Ordering::SeqCst);
        }
    }
    if amo_mode.is_some() && remote_amo {
        // SAFETY: PE r's live static WORDS.
        let amo =
            |off: usize, w, op| unsafe { pe.runtime().atomic_at_address(r, rwaddr + off, w, op) };
        if amo_engine {
            let mut last = None;
            for _ in 0..50 {
                let old = amo(0, w64, AmoOp::Add(1))?;
                check!(
                    me,
                    last.is_none_or(|l| old > l),
                    "fetch_add olds not increasing: {last:?} then {old}"
                );
                last = Some(old);
            }
        } else {
            expect_err(me, amo(0, w64, AmoOp::Add(1)), "atomic messages are off")?;
        }
    }
    pe.barrier_all()?;
    if amo_engine && owner_amo {
        let v = WORDS[0].load(std::sync::atomic::Ordering::SeqCst);
        check!(me, v == 50_050, "remote and local atomics on a static: {v}");
    }
    pe.barrier_all()?;
    if amo_engine && remote_amo {
        // SAFETY: as above.
        let amo =
            |off: usize, w, op| unsafe { pe.runtime().atomic_at_address(r, rwaddr + off, w, op) };
        let old = amo(
            0,
            w64,
            AmoOp::CompareSwap {
                cond: 50_050,
                value: 7,
            },
        )?;
        check!(me, old == 50_050, "compare_swap on a static saw {old}");
        check!(
            me,
            amo(0, w64, AmoOp::Fetch)? == 7,
            "fetch after compare_swap"
        );
        check!(
            me,
            amo(8, w32, AmoOp::Add(5))? == 0,
            "32-bit add on a static"
        );
        expect_err(me, amo(4, w64, AmoOp::Fetch), "not aligned")?;
        expect_err(me, amo(16, w64, AmoOp::Fetch), "outside what PE")?;
    }
    pe.barrier_all()?;
    if amo_engine && owner_amo {
        let v = [0, 1].map(|k| WORDS[k].load(std::sync::atomic::Ordering::SeqCst));
        check!(me, v == [7, 5], "static words after the atomics: {v:?}");
    }
    pe.barrier_all()?;
    if roce && n > 1 && !topo.same_node(l) {
        let got = *EXPOSED
            .lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?;
        check!(
            me,
            got == [0xA0 | l as u8; 64],
            "put_to_address across nodes {got:?}"
        );
    }
    if pe.runtime().engines().contains(&"SDMA") && n > 1 && same_node {
        // SAFETY: the target is a live static of the same program on PE r.
        unsafe { pe.runtime().put_to_address(r, raddr, &[me as u8 + 1; 16])? };
        pe.barrier_all()?;
        let mine = *TARGET
            .lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?;
        check!(me, mine == [l as u8 + 1; 16], "put_to_address {mine:?}");
        let mut peek = [0u8; 16];
        pe.runtime().get_from_address(r, raddr, &mut peek)?;
        check!(me, peek == [me as u8 + 1; 16], "get_from_address {peek:?}");
        let bad = pe.runtime().get_from_address(r, 8, &mut peek);
        expect_err(me, bad, "process_vm_readv")?;
    }
    pe.barrier_all()?;
    pe.free(sig)?;
    pe.free(other)?;
    pe.free(big)
}

/// Stream ordering, error propagation, events, host callbacks, barriers.
fn streams(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (r, l) = (right(me, n), left(me, n));
    let rounds = 200u64;
    let slot = pe.calloc::<u64>(64)?;
    let src = pe.calloc::<u64>(64)?;
    let sig = pe.calloc::<u64>(2)?;
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = pe.create_stream()?;
    // Interleaved puts and signals: each round overwrites the slot, then
    // signals; the receiver's stream waits for each round in order.
    for round in 1..=rounds {
        s.put_owned(&slot, vec![round * 1000 + me as u64; 64], r)?;
        s.signal_op(sig.at(0)?, round, SignalOp::Set, r)?;
        s.signal_wait_until(sig.at(0)?, Cmp::Ge, round)?;
        let (lg, rt, sl) = (log.clone(), pe.runtime().clone(), slot.at(0)?);
        s.host_fn(move || {
            let first = rt.g(sl, rt.my_pe())?;
            lg.lock()
                .map_err(|_| Error::invalid("lock", "poisoned"))?
                .push(first);
            Ok(())
        })?;
        // The sender may not overwrite the slot before this round was read.
        s.signal_op(sig.at(1)?, round, SignalOp::Set, l)?;
        s.signal_wait_until(sig.at(1)?, Cmp::Ge, round)?;
    }
    s.synchronize()?;
    check!(me, s.query(), "stream idle after synchronize");
    let seen = log
        .lock()
        .map_err(|_| Error::invalid("lock", "poisoned"))?
        .clone();
    let want: Vec<u64> = (1..=rounds).map(|rd| rd * 1000 + l as u64).collect();
    check!(
        me,
        seen == want,
        "stream order: first mismatch at {:?}",
        seen.iter().zip(&want).position(|(a, b)| a != b)
    );
    // Symmetric-to-symmetric put, get and put_signal on the stream.
    pe.write_local(&src, &[me as u64 + 7; 64])?;
    pe.barrier_all()?;
    s.put_signal(&slot, &src, sig.at(0)?, rounds + 1, SignalOp::Set, r)?;
    s.signal_wait_until(sig.at(0)?, Cmp::Eq, rounds + 1)?;
    s.synchronize()?;
    check!(
        me,
        pe.read_local(&slot)? == vec![l as u64 + 7; 64],
        "stream put_signal"
    );
    pe.barrier_all()?;
    s.get(&slot, &src, r)?;
    s.synchronize()?;
    check!(
        me,
        pe.read_local(&slot)? == vec![r as u64 + 7; 64],
        "stream get"
    );
    // An error surfaces at synchronize, names the operation, and the stream stays usable.
    s.put_owned(&slot, vec![1u64; 4], n + 3)?;
    s.put_owned(&slot, vec![2u64; 4], me)?; // skipped: queued behind the failure
    let err = s.synchronize();
    expect_err(me, err, &format!("put of 32 bytes to PE {}", n + 3))?;
    check!(
        me,
        pe.read_local(slot.slice(0..4)?)? != vec![2u64; 4],
        "op behind a failure ran"
    );
    s.put_owned(&slot, vec![3u64; 4], me)?;
    s.synchronize()?;
    check!(
        me,
        pe.read_local(slot.slice(0..4)?)? == vec![3u64; 4],
        "stream unusable after an error"
    );
    // A transfer enqueued behind slower work waits for it, even one that
    // could run at once on an idle stream: the callback's store lands first.
    let (rt, first) = (pe.runtime().clone(), slot.at(0)?);
    s.host_fn(move || {
        std::thread::sleep(Duration::from_millis(20));
        rt.p(first, 5u64, rt.my_pe())
    })?;
    s.put_owned(slot.slice(0..1)?, vec![6u64], me)?;
    s.synchronize()?;
    check!(
        me,
        pe.read_local(slot.slice(0..1)?)? == vec![6u64],
        "a put overtook the host callback enqueued before it"
    );
    if pe.load_store_base(me).is_some() && pe.config().stream_inline.0 >= 8 {
        // On an idle stream a small transfer to a PE reached by load and
        // store has run when enqueue returns (SHMEM_STREAM_INLINE) ...
        s.put_owned(slot.slice(0..1)?, vec![7u64], me)?;
        check!(
            me,
            s.query() && pe.read_local(slot.slice(0..1)?)? == vec![7u64],
            "a small put on an idle stream was still pending when enqueue returned"
        );
        // ... and work enqueued while it runs waits for it on the worker.
        let (s2, rt) = (s.clone(), pe.runtime().clone());
        let (second, seen) = (
            slot.at(1)?,
            std::sync::Arc::new(std::sync::Mutex::new(None)),
        );
        let seen2 = seen.clone();
        s.enqueue_transfer(
            me,
            8,
            || "test transfer".into(),
            move |rt2| {
                let rt3 = rt.clone();
                s2.host_fn(move || {
                    let v = rt3.g(second, rt3.my_pe())?;
                    *seen2
                        .lock()
                        .map_err(|_| Error::invalid("lock", "poisoned"))? = Some(v);
                    Ok(())
                })?;
                std::thread::sleep(Duration::from_millis(20));
                rt2.p(second, 8u64, rt2.my_pe())
            },
        )?;
        s.synchronize()?;
        let got = *seen
            .lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?;
        check!(
            me,
            got == Some(8),
            "work enqueued during a transfer run at once overtook it (saw {got:?})"
        );
    }
    // Two threads enqueue on one stream at once, small transfers that may
    // run at once and host callbacks that queue: each thread's puts land in
    // its order, and the callbacks (in stream order) never see the other
    // thread's slot go backwards.
    pe.write_local(slot.slice(0..2)?, &[0, 0])?;
    let rounds = 2000u64;
    let went_back = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|sc| -> Result<()> {
        let writer = sc.spawn(|| -> Result<()> {
            for v in 1..=rounds {
                s.put_owned(slot.slice(0..1)?, vec![v], me)?;
            }
            Ok(())
        });
        let (rt, first) = (pe.runtime().clone(), slot.at(0)?);
        let last_seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        for v in 1..=rounds {
            s.put_owned(slot.slice(1..2)?, vec![v], me)?;
            if v % 16 == 0 {
                let (rt, seen, back) = (rt.clone(), last_seen.clone(), went_back.clone());
                s.host_fn(move || {
                    let now = rt.g(first, rt.my_pe())?;
                    if now < seen.swap(now, std::sync::atomic::Ordering::Relaxed) {
                        back.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(())
                })?;
            }
        }
        writer
            .join()
            .map_err(|_| Error::invalid("thread", "the writer panicked"))?
    })?;
    s.synchronize()?;
    check!(
        me,
        pe.read_local(slot.slice(0..2)?)? == vec![rounds, rounds]
            && !went_back.load(std::sync::atomic::Ordering::Relaxed),
        "two threads on one stream: a thread's puts landed out of order"
    );
    // Events: stream b waits for stream a's event.
    let a = pe.create_stream()?;
    let b = pe.create_stream()?;
    let ev = shmem::Event::new();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    a.host_fn(move || {
        std::thread::sleep(Duration::from_millis(20));
        o1.lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?
            .push("a");
        Ok(())
    })?;
    a.record(&ev)?;
    b.wait_event(&ev)?;
    b.host_fn(move || {
        o2.lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?
            .push("b");
        Ok(())
    })?;
    b.synchronize()?;
    ev.synchronize()?;
    check!(me, ev.query(), "event reached");
    check!(
        me,
        *order
            .lock()
            .map_err(|_| Error::invalid("lock", "poisoned"))?
            == vec!["a", "b"],
        "event order"
    );
    // A panicking callback is an error at synchronize, not a dead stream.
    // (The panic is expected: keep it out of the test log.)
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    s.host_fn(|| panic!("callback bug"))?;
    let r = s.synchronize();
    std::panic::set_hook(hook);
    expect_err(me, r, "panicked")?;
    // An event recorded behind a failed operation is still reached.
    let ev2 = shmem::Event::new();
    s.put_owned(&slot, vec![1u64; 4], n + 1)?;
    s.record(&ev2)?;
    ev2.synchronize()?;
    expect_err(me, s.synchronize(), "failed")?;
    // Work queued before the last handle is dropped still runs.
    {
        let t = pe.create_stream()?;
        t.put_owned(slot.slice(0..4)?, vec![77u64; 4], me)?;
        t.signal_op(sig.at(1)?, 1_000_000, SignalOp::Set, me)?;
    }
    pe.signal_wait_until(sig.at(1)?, Cmp::Eq, 1_000_000)?;
    check!(
        me,
        pe.read_local(slot.slice(0..4)?)? == vec![77u64; 4],
        "dropped stream's work"
    );
    // A barrier on a stream, then quiet.
    pe.barrier_all_on_stream(&a)?;
    a.quiet()?;
    a.synchronize()?;
    pe.barrier_all()?;
    pe.free(sig)?;
    pe.free(src)?;
    pe.free(slot)
}

fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// Non-blocking handles: wait, and `.await` through a minimal executor.
fn handles(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (r, l) = (right(me, n), left(me, n));
    let len = 1 << 20;
    let dst = pe.calloc::<u16>(len)?;
    let h = pe.put_handle(&dst, vec![me as u16; len], r)?;
    let buf = h.wait()?;
    check!(me, buf.len() == len, "handle returned the buffer");
    pe.barrier_all()?;
    check!(
        me,
        pe.read_local(&dst)?.iter().all(|&v| v == l as u16),
        "handle put"
    );
    let fetched = block_on(pe.get_handle(vec![0u16; len], &dst, r)?)?;
    check!(me, fetched.iter().all(|&v| v == me as u16), "awaited get");
    pe.barrier_all()?; // everyone has read before anyone overwrites below
    let small = block_on(pe.put_handle(dst.slice(0..3)?, vec![9u16, 8, 7], me)?)?;
    check!(
        me,
        small == vec![9, 8, 7] && pe.read_local(dst.slice(0..3)?)? == vec![9, 8, 7],
        "awaited put"
    );
    expect_err(
        me,
        pe.put_handle(&dst, vec![0u16; len + 1], r),
        "do not fit",
    )?;
    pe.barrier_all()?;
    pe.free(dst)
}

/// Two runtime instances of different sizes in one process, used concurrently.
fn instances(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (r, l) = (right(me, n), left(me, n));
    let second = shmem::init_with(shmem::JoinMethod::Environment, Some(8 << 20), 1, None)?;
    check!(
        me,
        second.instance() == 1 && second.heap_size() == 8 << 20,
        "second instance"
    );
    check!(
        me,
        pe.heap_size() != second.heap_size(),
        "instances share a heap"
    );
    let a = pe.calloc::<u64>(1024)?;
    let b = second.calloc::<u64>(1024)?;
    let (p1, p2) = (pe.clone(), second.clone());
    let t = std::thread::spawn(move || -> Result<()> {
        for i in 0..200u64 {
            p2.put(b.slice(0..8)?, &[i; 8], r)?;
        }
        p2.put(b.slice(8..16)?, &[0xB; 8], r)?;
        p2.barrier_all()?;
        let got = p2.read_local(b.slice(8..16)?)?;
        if got != vec![0xB; 8] {
            return Err(Error::invalid("check", format!("instance 1 data {got:?}")));
        }
        p2.free(b)
    });
    for i in 0..200u64 {
        p1.put(a.slice(0..8)?, &[i + 1000; 8], r)?;
    }
    pe.put(a.slice(8..16)?, &[0xA0 + l as u64; 8], r)?;
    pe.barrier_all()?;
    t.join()
        .map_err(|_| Error::invalid("thread", "instance 1 thread panicked"))??;
    check!(
        me,
        pe.read_local(a.slice(8..16)?)? == vec![0xA0 + ((l + n - 1) % n) as u64; 8],
        "instance 0 data"
    );
    // A buffer of one instance used with the other is an error.
    let wrong = second.put(&a, &[1u64], r);
    expect_err(
        me,
        wrong,
        "belongs to instance 0 but was used with instance 1",
    )?;
    shmem::set_instance(1)?;
    check!(me, shmem::current()?.instance() == 1, "set_instance");
    shmem::set_instance(0)?;
    pe.free(a)?;
    second.finalize()?;
    expect_err(me, shmem::instance(1), "not initialized")?;
    Ok(())
}

/// Every collective on world, a strided team, 2-D teams and a team of one,
/// checked against golden data (the collectives crate's own tests run PEs
/// as threads; this runs them as processes, under any engine).
fn collectives(pe: &Shmem) -> Result<()> {
    use shmem::ReduceOp;
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let coll = pe.collectives().clone();
    let world = coll.world();
    let odd = if n >= 2 {
        coll.team_split_strided(&world, 1, 2, n / 2, None)?
    } else {
        None
    };
    let (xteam, yteam) = coll.team_split_2d(&world, 2.min(n), None, None)?;
    let solo = coll.team_split_strided(&world, n - 1, 1, 1, None)?;
    check!(me, solo.is_some() == (me == n - 1), "team of one");
    let mut teams = vec![("world", world.clone()), ("x", xteam), ("y", yteam)];
    if let Some(t) = odd.clone() {
        teams.push(("odd", t));
    }
    if let Some(t) = solo {
        teams.push(("solo", t));
    }
    if odd.is_some() != (me % 2 == 1 && me < 2 * (n / 2)) {
        return Err(Error::invalid(
            "check",
            format!("PE {me}: wrong membership of the odd team"),
        ));
    }
    let src = pe.calloc::<i64>(64)?;
    let dst = pe.calloc::<i64>(64 * n + 8)?;
    for (name, team) in &teams {
        let (tme, tn) = (team.my_pe(), team.n_pes());
        let w = |tpe: usize| team.world_pe(tpe).unwrap_or(usize::MAX) as i64;
        coll.barrier(team)?;
        coll.sync(team)?;
        // broadcast from every root
        for root in 0..tn {
            pe.write_local(&src, &[w(tme) * 100 + root as i64; 64])?;
            coll.broadcast(team, &dst, &src, 16, root)?;
            let got = pe.read_local(dst.slice(0..16)?)?;
            check!(
                me,
                got == vec![w(root) * 100 + root as i64; 16],
                "{name}: broadcast root {root}: {got:?}"
            );
        }
        // fcollect
        pe.write_local(
            &src,
            &(0..64).map(|i| w(tme) * 1000 + i).collect::<Vec<_>>(),
        )?;
        coll.fcollect(team, &dst, &src, 5)?;
        let got = pe.read_local(dst.slice(0..5 * tn)?)?;
        let want: Vec<i64> = (0..tn)
            .flat_map(|t| (0..5).map(move |i| w(t) * 1000 + i))
            .collect();
        check!(me, got == want, "{name}: fcollect {got:?}");
        // collect with uneven sizes (PE t contributes t % 3 elements)
        let total = coll.collect(team, &dst, &src, tme % 3)?;
        let want: Vec<i64> = (0..tn)
            .flat_map(|t| (0..(t % 3) as i64).map(move |i| w(t) * 1000 + i))
            .collect();
        check!(me, total == want.len(), "{name}: collect total {total}");
        check!(
            me,
            pe.read_local(dst.slice(0..total)?)? == want,
            "{name}: collect data"
        );
        // alltoall: block j of PE t goes to PE j's slot t
        let blocks: Vec<i64> = (0..tn)
            .flat_map(|j| (0..3).map(move |i| w(tme) * 10000 + j as i64 * 10 + i))
            .collect();
        pe.write_local(src.slice(0..3 * tn)?, &blocks)?;
        coll.alltoall(team, &dst, &src, 3)?;
        let got = pe.read_local(dst.slice(0..3 * tn)?)?;
        let want: Vec<i64> = (0..tn)
            .flat_map(|t| (0..3).map(move |i| w(t) * 10000 + tme as i64 * 10 + i))
            .collect();
        check!(me, got == want, "{name}: alltoall {got:?}");
        // reductions
        pe.write_local(&src, &(0..64).map(|i| w(tme) + i + 1).collect::<Vec<_>>())?;
        for op in [
            ReduceOp::Sum,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Prod,
            ReduceOp::And,
            ReduceOp::Or,
            ReduceOp::Xor,
        ] {
            coll.reduce(team, op, &dst, &src, 40)?;
            let got = pe.read_local(dst.slice(0..40)?)?;
            let want: Vec<i64> = (0..40)
                .map(|i| {
                    let vals = (0..tn).map(|t| w(t) + i + 1);
                    match op {
                        ReduceOp::Sum => vals.sum(),
                        ReduceOp::Min => vals.min().unwrap_or(0),
                        ReduceOp::Max => vals.max().unwrap_or(0),
                        ReduceOp::Prod => vals.fold(1i64, |a, b| a.wrapping_mul(b)),
                        ReduceOp::And => vals.fold(-1i64, |a, b| a & b),
                        ReduceOp::Or => vals.fold(0, |a, b| a | b),
                        ReduceOp::Xor => vals.fold(0, |a, b| a ^ b),
                    }
                })
                .collect();
            check!(
                me,
                got == want,
                "{name}: reduce {op:?}: {got:?} vs {want:?}"
            );
        }
        // scans
        coll.sum_inscan(team, &dst, &src, 4)?;
        let inc: Vec<i64> = (0..4)
            .map(|i| (0..=tme).map(|t| w(t) + i + 1).sum())
            .collect();
        check!(
            me,
            pe.read_local(dst.slice(0..4)?)? == inc,
            "{name}: inclusive scan"
        );
        coll.sum_exscan(team, &dst, &src, 4)?;
        let exc: Vec<i64> = (0..4)
            .map(|i| (0..tme).map(|t| w(t) + i + 1).sum())
            .collect();
        check!(
            me,
            pe.read_local(dst.slice(0..4)?)? == exc,
            "{name}: exclusive scan"
        );
    }
    // Mismatched roots are an error on every PE, not corruption: in the
    // call, or (a small broadcast on one node, whose root does not wait,
    // and the members that agreed with their root) at the next call.
    if n > 1 {
        let r = coll.broadcast(&world, &dst, &src, 4, me % 2);
        let next = coll.barrier_all();
        expect_err(me, r.and(next), "")?;
        coll.barrier_all()?;
        // Different counts, too, where the root's call is small enough to
        // ride on the handshake and the others' is not (across nodes the
        // leaders then run different exchanges): an error, not a hang.
        let count = if me == 0 { 4 } else { 200.min(64 * n + 8) };
        let r = coll.broadcast(&world, &dst, &src, count, 0);
        let next = coll.barrier_all();
        expect_err(me, r.and(next), "")?;
        coll.barrier_all()?;
    }
    for (name, team) in teams {
        if name != "world" {
            coll.team_destroy(team)?;
        }
    }
    pe.free(dst)?;
    pe.free(src)
}

/// The root of a small broadcast across nodes returns once its data is on
/// its way: the members on other nodes call the broadcast only after the
/// root, back from its call, signals them (a root that waited for them
/// would wait until the job's timeout). Every root in turn, including
/// PEs that do not lead their node, with golden data each time; a
/// barrier then settles what the roots left owing.
fn early_root(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let coll = pe.collectives().clone();
    let world = coll.world();
    let topo = pe.runtime().topology();
    let src = pe.calloc::<i64>(8)?;
    let dst = pe.calloc::<i64>(8)?;
    let go = pe.calloc::<u64>(1)?;
    let golden = |round: usize, root: usize| -> Vec<i64> {
        (0..8)
            .map(|i| (round * 1000 + root * 10 + i) as i64)
            .collect()
    };
    // Signals from different roots are not ordered: each adds one, and a
    // member counts the roots on other nodes it has seen.
    let mut remote_roots = 0u64;
    for round in 0..20 {
        for root in 0..n {
            if me == root {
                pe.write_local(src.slice(0..8)?, &golden(round, root))?;
                coll.broadcast(&world, &dst, &src, 8, root)?;
                for other in (0..n).filter(|&p| !topo.same_node(p)) {
                    pe.signal_op(go.at(0)?, 1, SignalOp::Add, other)?;
                }
            } else {
                if !topo.same_node(root) {
                    remote_roots += 1;
                    pe.signal_wait_until(go.at(0)?, Cmp::Ge, remote_roots)?;
                }
                coll.broadcast(&world, &dst, &src, 8, root)?;
            }
            let got = pe.read_local(dst.slice(0..8)?)?;
            check!(
                me,
                got == golden(round, root),
                "round {round}, root {root}: got {got:?}"
            );
        }
    }
    coll.barrier_all()?;
    // The last PE passes another count once (call 0, root 0): it fails
    // there, and root 0, which did not wait, reports it at its next call
    // (call 1), which still completes. No call after that fails: a root
    // that did not wait must not take PE 0's late report for a difference
    // of its own call, and so on from root to root. A PE whose call
    // succeeds has the root's data.
    for k in 0..8usize {
        let root = k % 2;
        let count = if k == 0 && me == n - 1 { 4 } else { 8 };
        if me == root {
            pe.write_local(src.slice(0..8)?, &golden(100 + k, root))?;
        }
        pe.write_local(dst.slice(0..8)?, &[-1; 8])?;
        let r = coll.broadcast(&world, &dst, &src, count, root);
        match (k, &r) {
            (0, Ok(())) if me == n - 1 => {
                check!(me, false, "call 0 with another count succeeded")
            }
            (1, Ok(())) if me == 0 => {
                check!(me, false, "root 0 did not report call 0 at its next call")
            }
            // Naming the last PE, or the leader of its node.
            (1, Err(e)) if me == 0 => {
                let lead = (0..n)
                    .find(|&p| topo.node_of[p] == topo.node_of[n - 1])
                    .unwrap_or(n - 1);
                check!(
                    me,
                    e.to_string().contains(&format!("(PE {lead})")),
                    "root 0's report does not name PE {lead}: {e}"
                )
            }
            (2.., Err(e)) => check!(me, false, "call {k} failed: {e}"),
            _ => {}
        }
        if r.is_ok() {
            let got = pe.read_local(dst.slice(0..8)?)?;
            check!(me, got == golden(100 + k, root), "call {k}: got {got:?}");
        }
    }
    coll.barrier_all()?;
    // Root 0 leads its node. After a plain handshake (a barrier) and
    // after its own broadcasts it sends to the other nodes before its node
    // has arrived: the other PEs of its node call only once every PE on
    // another node is back from the broadcast (a root that gathered its
    // node first would wait until the job's timeout).
    let node0 = |p: usize| topo.node_of[p] == topo.node_of[0];
    let remote = (0..n).filter(|&p| !node0(p)).count() as u64;
    let back = pe.calloc::<u64>(1)?;
    let mut backs = 0u64;
    for k in 0..12usize {
        if k % 4 == 0 {
            coll.barrier_all()?;
        }
        if me == 0 {
            pe.write_local(src.slice(0..8)?, &golden(200 + k, 0))?;
        } else if node0(me) {
            backs += remote;
            pe.signal_wait_until(back.at(0)?, Cmp::Ge, backs)?;
        }
        coll.broadcast(&world, &dst, &src, 8, 0)?;
        if !node0(me) {
            for p in (1..n).filter(|&p| node0(p)) {
                pe.signal_op(back.at(0)?, 1, SignalOp::Add, p)?;
            }
        }
        let got = pe.read_local(dst.slice(0..8)?)?;
        check!(
            me,
            got == golden(200 + k, 0),
            "first-sent call {k}: got {got:?}"
        );
    }
    // A folded call whose result root 0's node reads from root 0's fold
    // buffer, then a broadcast from root 0, and so on: root 0 must not
    // send first after such a call (the other leaders would then be free
    // to write that buffer while its node may still be reading it).
    let gsrc = pe.calloc::<i64>(1)?;
    let gdst = pe.calloc::<i64>(n)?;
    for k in 0..20usize {
        pe.write_local(gsrc.slice(0..1)?, &[(300 + k * 100 + me) as i64])?;
        coll.fcollect(&world, &gdst, &gsrc, 1)?;
        let got = pe.read_local(gdst.slice(0..n)?)?;
        let want: Vec<i64> = (0..n).map(|p| (300 + k * 100 + p) as i64).collect();
        check!(me, got == want, "fcollect {k}: got {got:?}");
        if me == 0 {
            pe.write_local(src.slice(0..8)?, &golden(300 + k, 0))?;
        }
        coll.broadcast(&world, &dst, &src, 8, 0)?;
        let got = pe.read_local(dst.slice(0..8)?)?;
        check!(
            me,
            got == golden(300 + k, 0),
            "broadcast {k} after fcollect: got {got:?}"
        );
    }
    // A PE of root 0's node passes another count to a broadcast that root
    // 0 sent first: it fails, and so does root 0 (its node's state is a
    // mismatch), while the other nodes, whose calls matched the root's,
    // have its data. Later calls succeed.
    coll.barrier_all()?;
    let odd = (1..n).find(|&p| node0(p));
    for k in 0..3usize {
        let count = if k == 0 && Some(me) == odd { 4 } else { 8 };
        if me == 0 {
            pe.write_local(src.slice(0..8)?, &golden(400 + k, 0))?;
        }
        pe.write_local(dst.slice(0..8)?, &[-1; 8])?;
        let r = coll.broadcast(&world, &dst, &src, count, 0);
        let failing = k == 0 && odd.is_some() && node0(me);
        match &r {
            Ok(()) if failing => check!(me, false, "call {k} succeeded on root 0's node"),
            Err(e) if !failing => check!(me, false, "call {k} failed: {e}"),
            _ => {}
        }
        if r.is_ok() {
            let got = pe.read_local(dst.slice(0..8)?)?;
            check!(
                me,
                got == golden(400 + k, 0),
                "call {k} (odd count): got {got:?}"
            );
        }
    }
    coll.barrier_all()?;
    pe.free(gdst)?;
    pe.free(gsrc)?;
    pe.free(back)?;
    pe.free(go)?;
    pe.free(dst)?;
    pe.free(src)
}

/// PE 1 takes its host's link down while everyone waits; the others must
/// fail naming PE 1 within the link timeout.
fn link_cut(pe: &Shmem) -> Result<()> {
    let me = pe.my_pe();
    // SIGTERM is held (`SURVIVORS_REPORT`): survivors report by themselves.
    let sig = pe.calloc::<u64>(1)?;
    pe.barrier_all()?;
    if me == 1 {
        let links =
            std::fs::read_dir("/sys/class/net").map_err(|e| Error::os("listing links", e))?;
        for l in links.flatten() {
            let name = l.file_name().to_string_lossy().into_owned();
            if name != "lo" {
                let _ = std::process::Command::new("ip")
                    .args(["link", "set", &name, "down"])
                    .status();
            }
        }
        // Our own job is gone now: exit quietly once the library notices.
        let _ = pe.signal_wait_until(sig.at(0)?, Cmp::Eq, 1);
        std::process::exit(4);
    }
    let t = Instant::now();
    let r = pe.signal_wait_until(sig.at(0)?, Cmp::Eq, 1);
    let dt = t.elapsed();
    match r {
        Err(e) if e.to_string().contains("PE 1") => {
            eprintln!("PE {me}: failed as expected after {dt:?}: {e}");
            std::process::exit(3)
        }
        other => Err(Error::invalid(
            "check",
            format!("PE {me}: wait after the link cut gave {other:?} after {dt:?}"),
        )),
    }
}

/// PE 0 puts, fetch-adds and signals into PE 1 for a while (and into every
/// other PE) while they sleep in `barrier_all`: none of those writes may
/// wake them (no FUTEX_WAKE is made for them), and the data must be there
/// after the barrier. `SLEEPERS_ITERS` rounds at least (20,000), and 300 ms.
fn quiet_sleepers(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let data = pe.calloc::<u64>(64)?;
    let counter = pe.calloc::<u64>(1)?;
    let other_sig = pe.calloc::<u64>(1)?;
    pe.barrier_all()?;
    let before = pe.wakeups_received();
    if me == 0 {
        // Long enough that the others stop spinning and sleep (their spin
        // phase is microseconds), and many operations of each kind.
        let iters: u64 = std::env::var("SLEEPERS_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let start = Instant::now();
        let mut i = 0u64;
        while i < iters || start.elapsed() < Duration::from_millis(300) {
            i += 1;
            for to in 1..n {
                pe.put(
                    data.slice((i % 64) as usize..(i % 64) as usize + 1)?,
                    &[i],
                    to,
                )?;
                pe.quiet()?;
                pe.atomic_fetch_add(counter.at(0)?, 1, to)?;
                pe.signal_op(other_sig.at(0)?, i, SignalOp::Set, to)?;
            }
        }
        pe.barrier_all()?;
        for to in 1..n {
            let got = pe.g(counter.at(0)?, to)?;
            check!(me, got == i, "PE {to}'s counter is {got}, expected {i}");
        }
        pe.barrier_all()?;
        return Ok(());
    }
    pe.barrier_all()?;
    let woken = pe.wakeups_received() - before;
    // The barrier itself may wake this PE (once per barrier round at most).
    check!(
        me,
        woken <= 4,
        "{woken} wake-up system calls were made for this PE while it slept in a \
         barrier that the writes did not concern"
    );
    pe.barrier_all()?;
    Ok(())
}

/// Traffic with idle gaps outside the library between rounds (each PE
/// puts its round number to its right neighbour, gets it back and checks
/// both), so that engines with progress threads go idle after completions
/// several times (the libfabric engine's thread looks at its completion
/// queue's wait descriptor each time it is about to block).
fn idle_gaps(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let (r, l) = (right(me, n), left(me, n));
    let slot = pe.calloc::<u64>(1)?;
    pe.barrier_all()?;
    for round in 1..=4u64 {
        let v = round * 1000 + me as u64;
        pe.put(slot.slice(0..1)?, &[v], r)?;
        pe.quiet()?;
        pe.barrier_all()?;
        let mine = pe.g(slot.at(0)?, me)?;
        check!(
            me,
            mine == round * 1000 + l as u64,
            "round {round}: got {mine} from PE {l}"
        );
        let back = pe.g(slot.at(0)?, r)?;
        check!(
            me,
            back == v,
            "round {round}: PE {r} holds {back}, expected {v}"
        );
        pe.barrier_all()?;
        std::thread::sleep(Duration::from_millis(40));
    }
    Ok(())
}

/// A token ring of plain puts: each PE sleeps in `wait_until` on a flag
/// that its left neighbour sets with `p` after a payload `put` (a load and
/// store put, whose writer reads `waiters` with no fence of its own when
/// the light way is on). Run with `SHMEM_SPIN_US=0`, so that most waits
/// sleep, and a long `SHMEM_WAIT_POLL`, so that a missed wake-up is a
/// wait that ends in `SHMEM_WAIT_TIMEOUT`'s error instead of a late poll.
fn flag_ring(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let rounds: i64 = std::env::var("RING_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let payload = pe.calloc::<i64>(8)?;
    let flag = pe.calloc::<i64>(1)?;
    let (r, l) = (right(me, n), left(me, n));
    pe.barrier_all()?;
    let pass = |round: i64| -> Result<()> {
        pe.put(&payload, &[round * 100 + me as i64; 8], r)?;
        pe.fence()?;
        pe.p(flag.at(0)?, round, r)
    };
    let receive = |round: i64| -> Result<()> {
        pe.wait_until(flag.at(0)?, Cmp::Ge, round)?;
        let got = pe.read_local(&payload)?;
        check!(
            me,
            got == vec![round * 100 + l as i64; 8],
            "round {round}: got {got:?}"
        );
        Ok(())
    };
    for round in 1..=rounds {
        if me == 0 {
            pass(round)?;
            receive(round)?;
        } else {
            receive(round)?;
            pass(round)?;
        }
    }
    pe.barrier_all()
}

/// PE 1 ends the whole job with status 5 while the others wait in a barrier.
fn global_exit(pe: &Shmem) -> Result<()> {
    pe.barrier_all()?;
    if pe.my_pe() == 1 {
        shmem::global_exit(5);
    }
    let r = pe.barrier_all();
    Err(Error::invalid(
        "check",
        format!(
            "PE {}: barrier after global_exit returned {r:?}",
            pe.my_pe()
        ),
    ))
}

/// `TEST_MEMBARRIER_ODD_OFF=1`: PEs with an odd rank (as the launcher
/// numbers them) start with `SHMEM_WAIT_MEMBARRIER=0`, so that a job mixes
/// processes whose waiters issue the membarrier with processes whose
/// waiters do not (and whose heaps make every writer fence).
fn opt_out_on_odd_ranks() {
    if std::env::var("TEST_MEMBARRIER_ODD_OFF").as_deref() != Ok("1") {
        return;
    }
    let rank = ["SHMEM_RANK", "RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse::<usize>().ok());
    if rank.is_some_and(|r| r % 2 == 1) {
        // Still single-threaded: nothing else reads the environment yet.
        std::env::set_var("SHMEM_WAIT_MEMBARRIER", "0");
    }
}

/// Scenarios whose surviving PEs must report a peer's death by themselves
/// (exit status 3), not be stopped by the launcher's SIGTERM.
const SURVIVORS_REPORT: &[&str] = &[
    "kill_in_barrier",
    "kill_in_wait",
    "stop_in_barrier",
    "rma_to_dead",
    "link_cut",
];

/// Keeps SIGTERM from ending this process: blocked, before `init`, so that
/// every thread the library starts inherits the mask. Ignoring it is not
/// enough: libfabric's PSM dependency (`libinfinipath`) sets SIGTERM back
/// to its default inside `exit`, and a launcher's SIGTERM landing then
/// would end a PE that is exiting with its own status.
fn hold_sigterm() {
    // SAFETY: blocks one signal in the calling (still the only) thread
    // through a sigset we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    opt_out_on_odd_ranks();
    if SURVIVORS_REPORT.contains(&scenario.as_str()) {
        hold_sigterm();
    }
    let pe = match shmem::init() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("init failed: {e}");
            std::process::exit(1);
        }
    };
    let r = match scenario.as_str() {
        "bootstrap" => bootstrap(&pe),
        "rma" => rma(&pe),
        "atomics" => atomics(&pe),
        "fetch_add_stress" => fetch_add_stress(&pe),
        "signals" => signals(&pe),
        "signal_stress" => signal_stress(&pe),
        "waits" => waits(&pe),
        "alloc" => alloc(&pe),
        "errors" => errors(&pe).map(|_| std::process::exit(0)),
        "kill_in_barrier" => kill_in_barrier(&pe),
        "kill_in_wait" => kill_in_wait(&pe),
        "rma_to_dead" => rma_to_dead(&pe),
        "stale_handles" => stale_handles(&pe),
        "hang_mismatch" => hang_mismatch(&pe),
        "hang_early_root" => hang_early_root(&pe),
        "stop_in_barrier" => stop_in_barrier(&pe),
        "bulk" => bulk(&pe),
        "global_exit" => global_exit(&pe),
        "link_cut" => link_cut(&pe),
        "collectives" => collectives(&pe),
        "early_root" => early_root(&pe),
        "streams" => streams(&pe),
        "handles" => handles(&pe),
        "instances" => instances(&pe),
        "quiet_sleepers" => quiet_sleepers(&pe),
        "flag_ring" => flag_ring(&pe),
        "idle_gaps" => idle_gaps(&pe),
        "placement" => placement(&pe),
        "amo_order" => amo_order(&pe),
        other => Err(Error::invalid(
            "scenario",
            format!("unknown scenario {other:?}"),
        )),
    };
    let r = r.and_then(|_| pe.finalize());
    if let Err(e) = r {
        eprintln!("{scenario} failed: {e}");
        std::process::exit(1);
    }
}

/// Posted atomics then fetching ones to the last PE (another host in the
/// multi-host tests): each fetch sees every add this PE posted before it,
/// and a swap the set before it (`AMO_ROUNDS` rounds, 500).
fn amo_order(pe: &Shmem) -> Result<()> {
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let rounds: i64 = std::env::var("AMO_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let x = pe.calloc::<i64>(n)?;
    let y = pe.calloc::<i32>(n)?;
    let target = n - 1;
    pe.barrier_all()?;
    for r in 1..=rounds {
        pe.atomic_add(x.at(me)?, 1, target)?;
        pe.atomic_add(x.at(me)?, 2, target)?;
        let v = pe.atomic_fetch(x.at(me)?, target)?;
        check!(
            me,
            v == 3 * r,
            "round {r}: fetch {v} after the adds, want {}",
            3 * r
        );
        pe.atomic_set(y.at(me)?, r as i32, target)?;
        let w = pe.atomic_swap(y.at(me)?, -1, target)?;
        check!(
            me,
            w == r as i32,
            "round {r}: swap saw {w}, not the set before it"
        );
    }
    pe.barrier_all()?;
    pe.free(y)?;
    pe.free(x)
}

/// Prints the CPUs this PE's main thread may run on after init (the
/// multi-launcher placement test reads them; copy-engine threads widen
/// their own on purpose).
fn placement(pe: &Shmem) -> Result<()> {
    // SAFETY: sched_getaffinity fills the zeroed set we own.
    let mine: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(Error::os(
                "sched_getaffinity",
                std::io::Error::last_os_error(),
            ));
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    };
    let list: Vec<String> = mine.iter().map(|c| c.to_string()).collect();
    println!("placement: PE {} cpus {}", pe.my_pe(), list.join(","));
    pe.barrier_all()
}
