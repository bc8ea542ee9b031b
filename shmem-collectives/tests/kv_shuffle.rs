//! KV-cache shuffle against golden data, and its table checks.

mod common;

use shmem_collectives::{kv_shuffle_roles, KvCacheLayout, KvRole};
use shmem_core::Error;

const LAYOUT: KvCacheLayout = KvCacheLayout {
    blocks: 6,
    kv_heads: 2,
    page_size: 4,
    head_dim: 8,
};

/// Pairs (2i, 2i + 1); even pairs send from the lower PE, odd pairs from the
/// upper one; with an odd count the last PE is unpaired (pair -1).
fn table(n: usize) -> Vec<[i64; 2]> {
    (0..n)
        .map(|pe| {
            let pair = pe ^ 1;
            if pair >= n {
                return [-1, 0];
            }
            let lower_sends = (pe / 2) & 1 == 0;
            let sends = (pe & 1 == 0) == lower_sends;
            [pair as i64, if sends { 0 } else { 1 }]
        })
        .collect()
}

fn cache_value(pe: usize, block: usize, e: usize, v: bool) -> u16 {
    (pe * 1000 + block * 100 + e % 97) as u16 + if v { 30_000 } else { 0 }
}

#[test]
fn roles_of_a_table() {
    let t = table(5);
    let roles = kv_shuffle_roles(&t, 5).unwrap();
    assert_eq!(
        roles,
        vec![
            KvRole::Send(1),
            KvRole::Receive(0),
            KvRole::Receive(3),
            KvRole::Send(2),
            KvRole::Idle
        ]
    );
    assert!(kv_shuffle_roles(&t, 6).is_err());
    let mut asym = table(4);
    asym[1] = [2, 1];
    let err = kv_shuffle_roles(&asym, 4).unwrap_err().to_string();
    assert!(err.contains("row 0") || err.contains("row 1"), "{err}");
    let mut both_send = table(2);
    both_send[1][1] = 0;
    assert!(kv_shuffle_roles(&both_send, 2).is_err());
    assert!(kv_shuffle_roles(&[[5, 0]], 1).is_err());
    assert_eq!(kv_shuffle_roles(&[[0, 1]], 1).unwrap(), vec![KvRole::Idle]);
}

#[test]
fn shuffle_copies_blocks_between_pairs() {
    for n in common::PE_COUNTS {
        common::run_ok(n, common::config(|_| {}), move |rt, coll| {
            let me = rt.my_pe();
            let be = LAYOUT.block_elems()?;
            let elems = LAYOUT.cache_elems()?;
            let k = rt.malloc::<u16>(elems)?;
            let v = rt.malloc::<u16>(elems)?;
            let fill = |v_cache: bool| -> Vec<u16> {
                (0..elems)
                    .map(|i| cache_value(me, i / be, i % be, v_cache))
                    .collect()
            };
            let t = table(n);
            let roles = kv_shuffle_roles(&t, n)?;
            // Twice, with other blocks the second time (no barrier between:
            // the call's handshake protects the receiver's caches).
            for (src, dst) in [
                (vec![0i64, 2, 5], vec![1i64, 3, 4]),
                (vec![4, 4], vec![0, 5]),
            ] {
                rt.write_local(&k, &fill(false))?;
                rt.write_local(&v, &fill(true))?;
                coll.kv_shuffle(&t, k.as_sym(), v.as_sym(), LAYOUT, &src, &dst)?;
                let (gk, gv) = (rt.read_local(&k)?, rt.read_local(&v)?);
                let mut wk = fill(false);
                let mut wv = fill(true);
                if let KvRole::Receive(from) = roles[me] {
                    for (s, d) in src.iter().zip(&dst) {
                        for e in 0..be {
                            wk[*d as usize * be + e] = cache_value(from, *s as usize, e, false);
                            wv[*d as usize * be + e] = cache_value(from, *s as usize, e, true);
                        }
                    }
                }
                assert_eq!(gk, wk, "K cache of PE {me} ({:?}) of {n}", roles[me]);
                assert_eq!(gv, wv, "V cache of PE {me} ({:?}) of {n}", roles[me]);
            }
            Ok(())
        });
    }
}

#[test]
fn bad_tables_fail_everywhere() {
    let out = common::run(4, common::config(|_| {}), |rt, coll| {
        let elems = LAYOUT.cache_elems()?;
        let k = rt.malloc::<u16>(elems)?;
        let v = rt.malloc::<u16>(elems)?;
        let mut asym = table(4);
        asym[2] = [1, 1];
        let a = coll.kv_shuffle(&asym, k.as_sym(), v.as_sym(), LAYOUT, &[0], &[1]);
        // Tables that differ between PEs: detected, not a hang.
        let mut mine = table(4);
        if rt.my_pe() == 3 {
            mine.swap(2, 3);
            mine[2][0] = 3;
            mine[3][0] = 2;
        }
        let b = coll.kv_shuffle(&mine, k.as_sym(), v.as_sym(), LAYOUT, &[0], &[1]);
        // A sender's block out of range.
        let c = coll.kv_shuffle(&table(4), k.as_sym(), v.as_sym(), LAYOUT, &[0], &[6]);
        coll.barrier_all()?;
        Ok((a, b, c, rt.my_pe()))
    });
    for r in out {
        let (a, b, c, pe) = r.expect("job");
        assert!(
            matches!(
                a,
                Err(Error::InvalidArgument {
                    arg: "shuffle_table",
                    ..
                })
            ),
            "{a:?}"
        );
        assert!(matches!(b, Err(Error::CollectiveMismatch { .. })), "{b:?}");
        match kv_shuffle_roles(&table(4), 4).unwrap()[pe] {
            KvRole::Send(_) => assert!(
                matches!(
                    c,
                    Err(Error::InvalidArgument {
                        arg: "dst_block_table",
                        ..
                    })
                ),
                "{c:?}"
            ),
            _ => assert!(matches!(c, Err(Error::CollectiveMismatch { .. })), "{c:?}"),
        }
    }
}
