//! KV-cache shuffle for LLM inference load balancing.
//!
//! Every PE holds a paged K and V cache `[blocks, kv_heads, page_size,
//! head_dim]` on symmetric memory and a load (sequences it serves). PEs are
//! paired by load, heaviest with lightest, as the reference example does:
//! the heavy PE sends `moved` blocks to the light one, which receives them
//! into free blocks of its own cache. The result is checked against golden
//! data on every PE: moved blocks arrived intact, untouched blocks kept
//! their contents, and the sender still has its blocks (a copy, not a move).
//!
//! ```text
//! cargo run --release --example kv_shuffle -- --pes 4
//! ```

use shmem::collectives::KvCacheLayout;
use shmem::{Error, Result};

const LAYOUT: KvCacheLayout = KvCacheLayout {
    blocks: 32,
    kv_heads: 4,
    page_size: 16,
    head_dim: 64,
};

fn value(pe: usize, kv: u32, block: usize, i: usize) -> f32 {
    (pe * 1_000_000 + kv as usize * 500_000 + block * 1000) as f32 + (i % 997) as f32
}

/// Load of each PE (deterministic, uneven).
fn load(pe: usize) -> usize {
    (pe * 7 + 3) % 11
}

/// Pairs PEs by load: rows `[pair_pe, op]` with op 0 = send, 1 = receive.
fn shuffle_table(n: usize) -> Vec<[i64; 2]> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&p| (load(p), p));
    let mut table = vec![[-1i64, 0]; n];
    for i in 0..n / 2 {
        let (light, heavy) = (order[i], order[n - 1 - i]);
        table[heavy] = [light as i64, 0];
        table[light] = [heavy as i64, 1];
    }
    table
}

fn run() -> Result<()> {
    let pe = shmem::init()?;
    let (me, n) = (pe.my_pe(), pe.n_pes());
    let block = LAYOUT.block_elems()?;
    let elems = LAYOUT.cache_elems()?;
    let key = pe.malloc::<f32>(elems)?;
    let val = pe.malloc::<f32>(elems)?;
    let fill = |kv: u32| -> Vec<f32> {
        (0..elems)
            .map(|i| value(me, kv, i / block, i % block))
            .collect()
    };
    pe.write_local(&key, &fill(0))?;
    pe.write_local(&val, &fill(1))?;
    let table = shuffle_table(n);
    // The sender moves half of its load's blocks into the receiver's upper half.
    let moved = 8;
    let src_blocks: Vec<i64> = (0..moved).map(|i| (i * 3 % 16) as i64).collect();
    let dst_blocks: Vec<i64> = (0..moved).map(|i| 16 + i as i64).collect();
    pe.barrier_all()?;
    let t0 = std::time::Instant::now();
    pe.collectives()
        .kv_shuffle(&table, &key, &val, LAYOUT, &src_blocks, &dst_blocks)?;
    pe.barrier_all()?;
    let dt = t0.elapsed();
    for (kv, buf) in [(0u32, &key), (1u32, &val)] {
        let got = pe.read_local(buf)?;
        for b in 0..LAYOUT.blocks {
            let from = match table[me] {
                [p, 1] if p >= 0 => dst_blocks
                    .iter()
                    .position(|&d| d == b as i64)
                    .map(|i| (p as usize, src_blocks[i] as usize)),
                _ => None,
            };
            let (src_pe, src_block) = from.unwrap_or((me, b));
            for i in 0..block {
                let want = value(src_pe, kv, src_block, i);
                let have = got[b * block + i];
                if have != want {
                    return Err(Error::invalid(
                        "cache",
                        format!("PE {me}: {} block {b} element {i} is {have}, expected {want} (from PE {src_pe} block {src_block})", ["K", "V"][kv as usize]),
                    ));
                }
            }
        }
    }
    let roles: Vec<String> = table
        .iter()
        .enumerate()
        .map(|(p, r)| match r {
            [q, 0] if *q >= 0 => format!("{p}->{q}"),
            _ => String::new(),
        })
        .filter(|s| !s.is_empty())
        .collect();
    if me == 0 {
        println!(
            "kv_shuffle: {n} PEs, pairs {roles:?}, {moved} blocks of K and V ({} bytes each) per pair in {:.1} us",
            block * 4,
            dt.as_secs_f64() * 1e6
        );
        println!("kv_shuffle: golden data verified on all {n} PEs");
    }
    pe.free(val)?;
    pe.free(key)?;
    pe.finalize()
}

fn main() {
    if let Some(code) = shmem::launch::launch_self_if_requested() {
        std::process::exit(code);
    }
    if let Err(e) = run() {
        eprintln!("kv_shuffle failed: {e}");
        std::process::exit(1);
    }
}
