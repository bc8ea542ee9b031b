//! Timing inside the PEs: warm-up, batch sizing, timed samples, and the
//! reference measurements (memcpy, cache-line ping-pong) taken in the same
//! job so ratios compare like with like.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use shmem::Shmem;

use crate::cli::Options;
use crate::error::{BenchError, Result};
use crate::report::format_size;
use crate::stats::Summary;
use crate::tcp::{self, TcpKind};

/// A timed sample should last about this long, so that the clock's own
/// cost (tens of nanoseconds) disappears in it.
const SAMPLE_TARGET_US: f64 = 20.0;
/// The same for collectives, longer: each sample starts after a barrier,
/// whose exit skew between PEs (a wake-up, when PEs outnumber cores) would
/// otherwise be counted in the first operation.
const COLLECTIVE_SAMPLE_TARGET_US: f64 = 200.0;
/// At most this many operations per sample.
const MAX_BATCH: usize = 10_000;
/// Spins between checks that the peer is still alive.
const SPINS_PER_CHECK: u32 = 1 << 16;

/// Who runs the operation being timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// PE 0 (and PE 1 where it answers); the result is PE 0's clock. The
    /// other PEs wait in the closing `barrier_all`, a library wait (and may
    /// sleep there), as the OSU benchmarks' passive PE does.
    Pair,
    /// Every PE; samples start after a barrier and each sample's time is the
    /// slowest PE's.
    All,
}

/// One measured row (the summary is meaningful on PE 0).
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Time per operation.
    pub stats: Summary,
    /// Operations per timed sample.
    pub batch: usize,
}

impl Measured {
    /// The same times multiplied by `factor` (e.g. 0.5 for half round trips).
    pub fn scaled(mut self, factor: f64) -> Measured {
        let s = &mut self.stats;
        s.median_us *= factor;
        s.min_us *= factor;
        s.p99_us *= factor;
        s.mean_us *= factor;
        self
    }
}

/// The state of a run inside one PE: the handle, the options and the
/// references measured so far.
pub struct Ctx<'a> {
    /// This PE.
    pub pe: &'a Shmem,
    /// The command line.
    pub opts: &'a Options,
    /// This PE's rank.
    pub me: usize,
    /// Number of PEs.
    pub n: usize,
    memcpy: BTreeMap<usize, f64>,
    cacheline: Option<Option<f64>>,
    started: Instant,
    /// `--hosts`: the TCP reference between PE 0 and PE 1, when they are on
    /// different hosts (the same on every PE).
    tcp_peer: Option<std::net::SocketAddr>,
    /// The reference connection (PE 0 and PE 1, once opened).
    tcp: Option<std::net::TcpStream>,
    tcp_times: BTreeMap<(TcpKind, usize), f64>,
}

fn to_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// A `u64` word of another PE's heap, reached by load/store.
///
/// # Safety
/// `p` must point to an 8-byte aligned word of a symmetric object that stays
/// allocated for `'a` and is only accessed atomically meanwhile.
pub unsafe fn atomic_at<'a>(p: std::ptr::NonNull<u64>) -> &'a AtomicU64 {
    // SAFETY: the caller's contract; AtomicU64 has u64's size and alignment.
    unsafe { &*(p.as_ptr() as *const AtomicU64) }
}

/// Spins until `flag >= value`, checking now and then that the peers live.
pub fn spin_until(pe: &Shmem, flag: &AtomicU64, value: u64) -> shmem::Result<()> {
    let mut spins = 0u32;
    while flag.load(Ordering::Acquire) < value {
        std::hint::spin_loop();
        spins += 1;
        if spins == SPINS_PER_CHECK {
            spins = 0;
            pe.bootstrap().check_peers()?;
        }
    }
    Ok(())
}

impl<'a> Ctx<'a> {
    /// A context for one run (collective).
    pub fn new(pe: &'a Shmem, opts: &'a Options) -> Result<Ctx<'a>> {
        let (me, n) = (pe.my_pe(), pe.n_pes());
        Ok(Ctx {
            pe,
            opts,
            me,
            n,
            memcpy: BTreeMap::new(),
            cacheline: None,
            started: Instant::now(),
            tcp_peer: if n >= 2 { tcp::peer_address() } else { None },
            tcp: None,
            tcp_times: BTreeMap::new(),
        })
    }

    /// Ends the context (collective; nothing is left allocated).
    pub fn finish(self) -> Result<()> {
        Ok(())
    }

    /// Times `op(batch)` (collective: every PE calls it with the same
    /// arguments; `op` does nothing on PEs outside the scope).
    pub fn measure(
        &mut self,
        scope: Scope,
        mut op: impl FnMut(usize) -> shmem::Result<()>,
    ) -> Result<Measured> {
        let pe = self.pe;
        pe.barrier_all()?;
        let mut warm = Vec::new();
        for _ in 0..self.opts.warmup.max(3) {
            if scope == Scope::All {
                pe.barrier_all()?;
            }
            let t = Instant::now();
            op(1)?;
            warm.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let est = Summary::of(&warm).map_or(0.0, |s| s.median_us);
        let target = match scope {
            Scope::Pair => SAMPLE_TARGET_US,
            Scope::All => COLLECTIVE_SAMPLE_TARGET_US,
        };
        let mine = if est > 0.0 {
            ((target / est).ceil() as usize).clamp(1, MAX_BATCH)
        } else {
            MAX_BATCH
        };
        // Every PE must run the same number of operations: PE 0 decides.
        let agreed = pe.bootstrap().broadcast(0, &(mine as u64).to_le_bytes())?;
        let batch = agreed
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| BenchError::Job("batch size from PE 0 is malformed".into()))?
            as usize;
        let mut samples = Vec::with_capacity(self.opts.iters);
        for _ in 0..self.opts.iters {
            if scope == Scope::All {
                pe.barrier_all()?;
            }
            let t = Instant::now();
            op(batch)?;
            samples.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
        }
        pe.barrier_all()?;
        if scope == Scope::All && self.n > 1 {
            let all = pe.bootstrap().allgather(&to_bytes(&samples))?;
            for other in all.iter().map(|b| from_bytes(b)) {
                for (s, o) in samples.iter_mut().zip(other) {
                    *s = s.max(o);
                }
            }
        }
        let stats =
            Summary::of(&samples).ok_or_else(|| BenchError::Job("no samples were taken".into()))?;
        Ok(Measured { stats, batch })
    }

    /// Prints a progress line on PE 0 (stderr) after a row.
    pub fn progress(&self, bench: &str, label: &str, m: &Measured) {
        if self.me == 0 && !self.opts.quiet {
            eprintln!(
                "shmem-bench: {bench} {label}: median {:.3} us (at {:.1} s)",
                m.stats.median_us,
                self.started.elapsed().as_secs_f64()
            );
        }
    }

    /// One-core memcpy of `size` bytes between private buffers on PE 0,
    /// microseconds per copy (collective; measured once per size).
    pub fn memcpy_us(&mut self, size: usize) -> Result<f64> {
        match self.memcpy.get(&size) {
            Some(&us) => Ok(us),
            None => Ok(self.memcpy_measure(size)?.stats.median_us),
        }
    }

    /// The full memcpy measurement of `size` bytes (collective).
    pub fn memcpy_measure(&mut self, size: usize) -> Result<Measured> {
        self.memcpy_in(size, Scope::Pair)
    }

    fn memcpy_in(&mut self, size: usize, scope: Scope) -> Result<Measured> {
        let me = self.me;
        let (src, mut dst) = if me == 0 {
            (vec![0x5au8; size], vec![0u8; size])
        } else {
            (Vec::new(), Vec::new())
        };
        let m = self.measure(scope, |batch| {
            if me == 0 {
                for _ in 0..batch {
                    // SAFETY: both buffers hold `size` bytes and are distinct.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            black_box(src.as_ptr()),
                            black_box(dst.as_mut_ptr()),
                            black_box(size),
                        )
                    };
                    black_box(&mut dst);
                }
            }
            Ok(())
        })?;
        self.progress("memcpy", &format_size(size), &m);
        self.memcpy.insert(size, m.stats.median_us);
        Ok(m)
    }

    /// Cache-line ping-pong between PE 0 and PE 1 through direct pointers
    /// into each other's heap: half round trip in microseconds, or `None`
    /// when the peers' heaps are not mapped here (collective; measured once).
    pub fn cacheline_us(&mut self) -> Result<Option<f64>> {
        if let Some(c) = self.cacheline {
            return Ok(c);
        }
        let m = self.cacheline_measure()?;
        self.cacheline = Some(m.map(|m| m.stats.median_us));
        Ok(self.cacheline.flatten())
    }

    /// The full cache-line measurement (collective), for the `cacheline`
    /// benchmark's own row.
    pub fn cacheline_measure(&mut self) -> Result<Option<Measured>> {
        let pe = self.pe;
        let (me, n) = (self.me, self.n);
        if n < 2 {
            return Ok(None);
        }
        // One flag per PE, each on its own line: a PE spins on its own flag
        // and stores into the other's, like a put-with-signal ping-pong.
        let flags = pe.calloc::<u64>(16)?;
        let peer = 1 - me.min(1);
        let ptrs = if me < 2 {
            match (pe.ptr(&flags, me)?, pe.ptr(&flags, peer)?) {
                (Some(a), Some(b)) => Some((a, b)),
                _ => None,
            }
        } else {
            None
        };
        // Every PE must agree whether the pointers exist before measuring.
        let mapped = pe
            .bootstrap()
            .allgather(&[u8::from(me >= 2 || ptrs.is_some())])?;
        if mapped.iter().any(|m| m.first() != Some(&1)) {
            pe.free(flags)?;
            return Ok(None);
        }
        let mut seq = 0u64;
        let m = self.measure(Scope::Pair, |batch| {
            let Some((mine, theirs)) = ptrs else {
                return Ok(());
            };
            // SAFETY: `flags` is an 8-aligned symmetric object, live until
            // the free below, and only touched atomically here.
            let (mine, theirs) = unsafe { (atomic_at(mine), atomic_at(theirs)) };
            for _ in 0..batch {
                seq += 1;
                if me == 0 {
                    theirs.store(seq, Ordering::Release);
                    spin_until(pe, mine, seq)?;
                } else {
                    spin_until(pe, mine, seq)?;
                    theirs.store(seq, Ordering::Release);
                }
            }
            Ok(())
        })?;
        pe.free(flags)?;
        let m = m.scaled(0.5);
        self.progress("cacheline", "8 B", &m);
        self.cacheline = Some(Some(m.stats.median_us));
        Ok(Some(m))
    }

    /// With `--hosts`, when PE 0 and PE 1 are on different hosts: the raw
    /// TCP reference of `kind` for `size`-byte messages between them over
    /// the same bridge, microseconds per message (half round trip for
    /// ping-pong); `None` otherwise (collective; measured once per size).
    pub fn tcp_us(&mut self, kind: TcpKind, size: usize) -> Result<Option<f64>> {
        let Some(addr) = self.tcp_peer else {
            return Ok(None);
        };
        if let Some(&us) = self.tcp_times.get(&(kind, size)) {
            return Ok(Some(us));
        }
        let me = self.me;
        if self.tcp.is_none() {
            let listener = if me == 1 {
                Some(tcp::listen(addr)?)
            } else {
                None
            };
            self.pe.barrier_all()?;
            self.tcp = match (me, &listener) {
                (0, _) => Some(tcp::connect(addr)?),
                (1, Some(l)) => Some(tcp::accept(l)?),
                _ => None,
            };
        }
        let mut stream = self.tcp.take();
        let mut buf = vec![0x3cu8; if me < 2 { size } else { 0 }];
        let m = self.measure(Scope::Pair, |batch| {
            if let Some(s) = stream.as_mut() {
                for _ in 0..batch {
                    tcp::exchange(s, kind, me == 0, &mut buf)
                        .map_err(|e| shmem::Error::os("TCP reference exchange", e))?;
                }
            }
            Ok(())
        });
        self.tcp = stream;
        let m = m?.scaled(match kind {
            TcpKind::PingPong => 0.5,
            TcpKind::Stream => 1.0 / tcp::STREAM_WINDOW as f64,
        });
        let name = match kind {
            TcpKind::PingPong => "tcp ping-pong",
            TcpKind::Stream => "tcp stream",
        };
        self.progress(name, &format_size(size), &m);
        self.tcp_times.insert((kind, size), m.stats.median_us);
        Ok(Some(m.stats.median_us))
    }

    /// The references measured so far: cache-line half round trip and
    /// memcpy medians per size.
    pub fn references(&self) -> (Option<f64>, Vec<(usize, f64)>) {
        (
            self.cacheline.flatten(),
            self.memcpy.iter().map(|(&s, &us)| (s, us)).collect(),
        )
    }
}
