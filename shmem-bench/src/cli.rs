//! Command line: which benchmarks, how many PEs, which sizes.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{BenchError, Result};

/// How a benchmark relates to its reference and to message sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Moves `size` bytes from PE 0 to PE 1 (ratio: bandwidth / memcpy bandwidth).
    DataMovement,
    /// A two-PE synchronising exchange (ratio: latency / cache-line ping-pong).
    Synchronisation,
    /// All PEs take part (ratios: latency / cache-line, time / memcpy of the bytes received).
    Collective,
    /// A reference measurement itself.
    Reference,
    /// The SDMA copy engine: overlap with compute, scaling with engine
    /// threads (not part of `all`: 256 MiB copies and jobs of their own).
    CopyEngine,
    /// The C ABI against the Rust API on the OSU patterns (not part of
    /// `all`: it compiles a C program with `oshcc`).
    CApi,
}

macro_rules! benches {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $family:ident, $sized:literal; )*) => {
        /// One benchmark (a subcommand).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Bench {
            $( $(#[$doc])* $variant, )*
        }

        impl Bench {
            /// Every benchmark, in the order `all` runs them.
            pub const ALL: &'static [Bench] = &[$(Bench::$variant),*];

            /// The subcommand name.
            pub fn name(self) -> &'static str {
                match self { $(Bench::$variant => $name,)* }
            }

            /// What it is compared with.
            pub fn family(self) -> Family {
                match self { $(Bench::$variant => Family::$family,)* }
            }

            /// Whether `--sizes` applies (false: one row per operation).
            pub fn sized(self) -> bool {
                match self { $(Bench::$variant => $sized,)* }
            }
        }
    };
}

benches! {
    /// Blocking put, PE 0 to PE 1.
    Put = "put", DataMovement, true;
    /// Blocking get, PE 0 from PE 1.
    Get = "get", DataMovement, true;
    /// Non-blocking puts, a batch completed by one quiet.
    PutNbi = "put-nbi", DataMovement, true;
    /// Non-blocking gets, a batch completed by one quiet.
    GetNbi = "get-nbi", DataMovement, true;
    /// Put-with-signal ping-pong between PE 0 and PE 1 (half round trip).
    PutSignalPingpong = "put-signal-pingpong", Synchronisation, true;
    /// Every remote atomic on a u64 of PE 1, against the same raw CPU atomic.
    Atomics = "atomics", Synchronisation, false;
    /// barrier_all over every PE.
    Barrier = "barrier", Collective, false;
    /// Broadcast from PE 0.
    Broadcast = "broadcast", Collective, true;
    /// fcollect (allgather); the size is each PE's block.
    Fcollect = "fcollect", Collective, true;
    /// alltoall; the size is the block for each pair of PEs.
    Alltoall = "alltoall", Collective, true;
    /// Sum allreduce of u64 elements (`sum_reduce` on the world team).
    Reduce = "reduce", Collective, true;
    /// KV-cache shuffle between PE pairs (2i sends to 2i+1); the size is one block.
    KvShuffle = "kv-shuffle", Collective, true;
    /// Reference: one-core memcpy of the same sizes.
    Memcpy = "memcpy", Reference, true;
    /// Reference: raw cache-line ping-pong between PE 0 and PE 1 (half round trip).
    Cacheline = "cacheline", Reference, false;
    /// A large put_nbi / put_handle through the copy engine while PE 0
    /// computes: compute rate against its solo rate, and the transfer time.
    SdmaOverlap = "sdma-overlap", CopyEngine, true;
    /// Blocking put through the SDMA engine with 1, 2, 4 engine threads
    /// (one job each), against one-core memcpy.
    SdmaEngines = "sdma-engines", CopyEngine, true;
    /// The OSU OpenSHMEM patterns through the C ABI (`shmem-capi/bench/
    /// osu_patterns.c`, built with `oshcc`) against the same loops through
    /// the Rust API and memcpy, in one run.
    Capi = "capi", CApi, true;
}

impl Bench {
    /// Parses a subcommand name.
    pub fn parse(name: &str) -> Option<Bench> {
        Bench::ALL.iter().copied().find(|b| b.name() == name)
    }

    /// Whether it needs at least two PEs.
    pub fn needs_two_pes(self) -> bool {
        !matches!(
            self,
            Bench::Memcpy
                | Bench::Barrier
                | Bench::Broadcast
                | Bench::Fcollect
                | Bench::Alltoall
                | Bench::Reduce
        )
    }

    /// Sizes swept when `--sizes` is not given.
    pub fn default_sizes(self) -> Vec<usize> {
        match self.family() {
            Family::DataMovement | Family::Reference => doubling(8, 4 << 20),
            Family::Synchronisation => vec![8],
            Family::Collective => doubling(8, 1 << 20),
            Family::CApi => vec![1 << 20],
            Family::CopyEngine => match self {
                Bench::SdmaOverlap => vec![256 << 20],
                _ => vec![64 << 20],
            },
        }
    }
}

/// Engine-thread counts `sdma-engines` runs when `--sdma-engines` is not given.
pub const DEFAULT_SDMA_ENGINES: [usize; 3] = [1, 2, 4];

/// Parsed command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Benchmarks to run, in order.
    pub benches: Vec<Bench>,
    /// `compare` mode: run every engine of `engines`.
    pub compare: bool,
    /// Engines (`--engine E` gives one; `compare --engines A,B` several;
    /// empty: the library's automatic choice).
    pub engines: Vec<String>,
    /// Number of PEs to start.
    pub pes: usize,
    /// Message sizes (`None`: each benchmark's default).
    pub sizes: Option<Vec<usize>>,
    /// Timed samples per row.
    pub iters: usize,
    /// Untimed samples before them (also used to size the batches).
    pub warmup: usize,
    /// Write every row's summary here.
    pub json: Option<PathBuf>,
    /// Draw latency and bandwidth against size here.
    pub plot: Option<PathBuf>,
    /// Kill the PEs after this long.
    pub timeout: Duration,
    /// No progress lines on stderr.
    pub quiet: bool,
    /// Network namespaces ("hosts") to spread the PEs over (1: none).
    pub hosts: usize,
    /// `SHMEM_SDMA_ENGINES` values for `sdma-engines`, one job each.
    pub sdma_engines: Vec<usize>,
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// Print the usage text.
    Help,
    /// Run benchmarks.
    Run(Options),
}

/// Usage text.
pub fn usage() -> String {
    let names: Vec<&str> = Bench::ALL.iter().map(|b| b.name()).collect();
    format!(
        "shmem-bench: latency, bandwidth and collective benchmarks of shmem

usage:
  shmem-bench BENCH[,BENCH...] [options]
  shmem-bench all [options]
  shmem-bench compare BENCH[,BENCH...] --engines E1,E2 [options]

benchmarks: {}

options:
  --pes N          PEs to start (default 2)
  --engine E       force engine E for every peer (SHMEM_TEST_ENGINE)
  --engines A,B    engines to compare (compare mode)
  --sizes LIST     sizes, e.g. 8,1K,1M or 8:1M (doubling) or 8:1M,4M
  --iters N        timed samples per row (default 200)
  --warmup N       untimed samples per row (default 20)
  --json FILE      write every row's summary as JSON
  --plot FILE.png  draw latency and bandwidth against size
  --timeout SECS   stop the PEs after this long (default 600)
  --quiet          no progress lines on stderr
  --hosts H        start the PEs in H network namespaces joined by a bridge
                   (PEs on other hosts go through the RoCE engine; needs root
                   and iproute2); --pes must be a multiple of H
  --sdma-engines L engine-thread counts for sdma-engines (default 1,2,4)
",
        names.join(", ")
    )
}

/// Sizes `lo, 2lo, 4lo, ... <= hi`.
pub fn doubling(lo: usize, hi: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = lo.max(1);
    while s <= hi {
        v.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

fn parse_one_size(text: &str) -> Result<usize> {
    let n = shmem::config_parse_size(text.trim())
        .map_err(|r| BenchError::usage(format!("--sizes: {r}")))?;
    if n == 0 {
        return Err(BenchError::usage(format!(
            "--sizes: {text:?}: sizes must be at least 1 byte"
        )));
    }
    Ok(n)
}

/// Parses `8,1K,1M`, `8:1M` (doubling) or a mix; sorted, duplicates removed.
pub fn parse_sizes(text: &str) -> Result<Vec<usize>> {
    let mut sizes = Vec::new();
    for item in text.split(',') {
        if item.trim().is_empty() {
            return Err(BenchError::usage(format!(
                "--sizes: {text:?} has an empty item (expected e.g. 8,1K,1M or 8:1M)"
            )));
        }
        match item.split_once(':') {
            Some((lo, hi)) => {
                let (lo, hi) = (parse_one_size(lo)?, parse_one_size(hi)?);
                if lo > hi {
                    return Err(BenchError::usage(format!(
                        "--sizes: range {item:?} runs backwards"
                    )));
                }
                sizes.extend(doubling(lo, hi));
            }
            None => sizes.push(parse_one_size(item)?),
        }
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(sizes)
}

fn parse_count(flag: &str, text: &str, min: usize) -> Result<usize> {
    let n: usize = text
        .parse()
        .map_err(|_| BenchError::usage(format!("{flag}: {text:?} is not a number")))?;
    if n < min {
        return Err(BenchError::usage(format!("{flag}: must be at least {min}")));
    }
    Ok(n)
}

fn parse_benches(text: &str) -> Result<Vec<Bench>> {
    if text == "all" {
        return Ok(Bench::ALL
            .iter()
            .copied()
            .filter(|b| {
                !matches!(
                    b.family(),
                    Family::Reference | Family::CopyEngine | Family::CApi
                )
            })
            .collect());
    }
    let mut out = Vec::new();
    for name in text.split(',') {
        let b = Bench::parse(name).ok_or_else(|| {
            BenchError::usage(format!(
                "unknown benchmark {name:?}; `shmem-bench --help` lists them"
            ))
        })?;
        if !out.contains(&b) {
            out.push(b);
        }
    }
    Ok(out)
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command> {
    let mut it = args.iter().peekable();
    let mut opts = Options {
        benches: Vec::new(),
        compare: false,
        engines: Vec::new(),
        pes: 2,
        sizes: None,
        iters: 200,
        warmup: 20,
        json: None,
        plot: None,
        timeout: Duration::from_secs(600),
        quiet: false,
        hosts: 1,
        sdma_engines: DEFAULT_SDMA_ENGINES.to_vec(),
    };
    let mut engine = None;
    let mut engines = None;
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| BenchError::usage(format!("{name} needs a value"))),
            }
        };
        match flag {
            "-h" | "--help" | "help" => return Ok(Command::Help),
            "--pes" => opts.pes = parse_count("--pes", &value("--pes")?, 1)?,
            "--engine" => engine = Some(value("--engine")?),
            "--engines" => engines = Some(value("--engines")?),
            "--sizes" => opts.sizes = Some(parse_sizes(&value("--sizes")?)?),
            "--iters" => opts.iters = parse_count("--iters", &value("--iters")?, 1)?,
            "--warmup" => opts.warmup = parse_count("--warmup", &value("--warmup")?, 0)?,
            "--json" => opts.json = Some(PathBuf::from(value("--json")?)),
            "--plot" => opts.plot = Some(PathBuf::from(value("--plot")?)),
            "--timeout" => {
                let secs = parse_count("--timeout", &value("--timeout")?, 1)?;
                opts.timeout = Duration::from_secs(secs as u64);
            }
            "--quiet" => opts.quiet = true,
            "--hosts" => opts.hosts = parse_count("--hosts", &value("--hosts")?, 1)?,
            "--sdma-engines" => {
                let list = value("--sdma-engines")?;
                opts.sdma_engines = list
                    .split(',')
                    .map(|c| parse_count("--sdma-engines", c.trim(), 1))
                    .collect::<Result<_>>()?;
                if opts.sdma_engines.iter().any(|&c| c > 64) {
                    return Err(BenchError::usage(
                        "--sdma-engines: at most 64 engine threads",
                    ));
                }
            }
            "compare" if opts.benches.is_empty() && !opts.compare => opts.compare = true,
            f if f.starts_with('-') => {
                return Err(BenchError::usage(format!(
                    "unknown option {f}; `shmem-bench --help` lists them"
                )))
            }
            names if opts.benches.is_empty() => opts.benches = parse_benches(names)?,
            extra => {
                return Err(BenchError::usage(format!(
                    "unexpected argument {extra:?} (list several benchmarks as put,get)"
                )))
            }
        }
    }
    if opts.benches.is_empty() {
        return Err(BenchError::usage(
            "no benchmark given; `shmem-bench --help` lists them",
        ));
    }
    let split = |list: &str| -> Vec<String> {
        list.split(',')
            .map(|e| e.trim().to_ascii_uppercase())
            .filter(|e| !e.is_empty())
            .collect()
    };
    match (opts.compare, engine, engines) {
        (true, None, Some(list)) => opts.engines = split(&list),
        (true, _, None) => {
            return Err(BenchError::usage(
                "compare needs --engines A,B (e.g. --engines HCCS,SDMA)",
            ))
        }
        (true, Some(_), Some(_)) => {
            return Err(BenchError::usage("compare takes --engines, not --engine"))
        }
        (false, _, Some(_)) => {
            return Err(BenchError::usage(
                "--engines is for compare mode: shmem-bench compare BENCH --engines A,B",
            ))
        }
        (false, e, None) => opts.engines = e.map(|e| split(&e)).unwrap_or_default(),
    }
    if opts.compare && opts.engines.is_empty() {
        return Err(BenchError::usage("--engines lists no engine"));
    }
    if !opts.compare && opts.engines.len() > 1 {
        return Err(BenchError::usage(
            "--engine takes one engine; use compare --engines A,B for several",
        ));
    }
    if opts.pes < 2 {
        if let Some(b) = opts.benches.iter().find(|b| b.needs_two_pes()) {
            return Err(BenchError::usage(format!(
                "{} needs at least 2 PEs (--pes 2)",
                b.name()
            )));
        }
    }
    if opts.hosts > 1 {
        if opts.pes < opts.hosts || !opts.pes.is_multiple_of(opts.hosts) {
            return Err(BenchError::usage(format!(
                "--hosts {}: --pes ({}) must be a multiple of the number of hosts",
                opts.hosts, opts.pes
            )));
        }
        if let Some(b) = opts
            .benches
            .iter()
            .find(|b| b.family() == Family::CopyEngine)
        {
            return Err(BenchError::usage(format!(
                "{} measures the copy engine between PEs of one host; run it without --hosts",
                b.name()
            )));
        }
    }
    if opts.compare && opts.benches.contains(&Bench::SdmaEngines) {
        return Err(BenchError::usage(
            "sdma-engines compares engine-thread counts itself; run it without compare",
        ));
    }
    Ok(Command::Run(opts))
}

impl Options {
    /// Sizes for `bench`: `--sizes`, else its defaults; one dummy size for
    /// benchmarks that take none.
    pub fn sizes_for(&self, bench: Bench) -> Vec<usize> {
        if !bench.sized() {
            return vec![8];
        }
        let sizes = self.sizes.clone().unwrap_or_else(|| bench.default_sizes());
        match bench {
            // u64 elements: round up to whole elements.
            Bench::Reduce => {
                let mut v: Vec<usize> = sizes.iter().map(|&s| s.div_ceil(8) * 8).collect();
                v.dedup();
                v
            }
            _ => sizes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_lists_and_ranges() {
        assert_eq!(parse_sizes("8,1K,1M").unwrap(), vec![8, 1024, 1 << 20]);
        assert_eq!(parse_sizes("8:64").unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(parse_sizes("1M,8:16,8").unwrap(), vec![8, 16, 1 << 20]);
        for bad in ["", "8,,16", "x", "0", "1M:8", "8:"] {
            let e = parse_sizes(bad).unwrap_err().to_string();
            assert!(e.starts_with("--sizes"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn commands() {
        let Command::Run(o) = parse(&args("put,get --pes 4 --sizes 8:32 --iters 5")).unwrap()
        else {
            panic!("expected a run");
        };
        assert_eq!(o.benches, vec![Bench::Put, Bench::Get]);
        assert_eq!((o.pes, o.iters), (4, 5));
        assert_eq!(o.sizes, Some(vec![8, 16, 32]));
        let Command::Run(c) = parse(&args("compare put --engines hccs,sdma")).unwrap() else {
            panic!("expected a run");
        };
        assert!(c.compare);
        assert_eq!(c.engines, vec!["HCCS", "SDMA"]);
        assert!(matches!(parse(&args("--help")).unwrap(), Command::Help));
        for bad in [
            "",
            "nope",
            "put --pes 0",
            "put --iters x",
            "compare put",
            "put --engines A,B",
            "put --pes 1",
            "put --bogus",
            "put extra",
            "put --hosts 0",
            "put --pes 3 --hosts 2",
            "sdma-overlap --hosts 2",
            "compare sdma-engines --engines SDMA",
            "sdma-engines --sdma-engines 1,x",
            "sdma-engines --sdma-engines 0",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn copy_engine_options() {
        let Command::Run(o) = parse(&args("sdma-engines --sdma-engines 1,3")).unwrap() else {
            panic!("expected a run");
        };
        assert_eq!(o.sdma_engines, vec![1, 3]);
        assert_eq!(o.sizes_for(Bench::SdmaEngines), vec![64 << 20]);
        assert_eq!(o.sizes_for(Bench::SdmaOverlap), vec![256 << 20]);
        let Command::Run(h) = parse(&args("put-signal-pingpong,put --hosts 2")).unwrap() else {
            panic!("expected a run");
        };
        assert_eq!((h.hosts, h.pes), (2, 2));
        let Command::Run(all) = parse(&args("all")).unwrap() else {
            panic!("expected a run");
        };
        assert!(!all.benches.contains(&Bench::SdmaOverlap));
    }

    #[test]
    fn reduce_sizes_are_whole_u64s() {
        let Command::Run(o) = parse(&args("reduce --sizes 4,8,12")).unwrap() else {
            panic!("expected a run");
        };
        assert_eq!(o.sizes_for(Bench::Reduce), vec![8, 16]);
    }
}
