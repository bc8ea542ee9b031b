//! Results: the rows a run produces, their text tables, JSON, and the
//! line format PE 0 hands the driver.

use std::fmt::Write as _;

use serde::Serialize;

use crate::cli::Bench;
use crate::error::{BenchError, Result};
use crate::stats::Summary;

/// What a row is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    /// Bandwidth / one-core memcpy bandwidth of the same size (higher is better).
    MemcpyBandwidth,
    /// Time / one-core memcpy time of the bytes each PE receives (lower is better).
    MemcpyTime,
    /// Latency / raw cache-line ping-pong half round trip (lower is better).
    Cacheline,
    /// Latency / the same raw CPU atomic on the shared line (lower is better).
    RawAtomic,
    /// Compute rate of the calling thread while a transfer runs / its solo
    /// rate (higher is better, 1.0 = undisturbed); the reference time is
    /// the solo time of one compute unit.
    ComputeRate,
    /// Transfer time / the same transfer with nothing else running (lower
    /// is better).
    TransferAlone,
    /// `--hosts`: latency / raw TCP ping-pong half round trip of the same
    /// size between the same hosts (lower is better).
    TcpLatency,
    /// `--hosts`: bandwidth / raw TCP stream bandwidth of the same message
    /// size between the same hosts (higher is better).
    TcpBandwidth,
    /// `capi`: the C ABI's time / the same loop through the Rust API, in
    /// the same run (lower is better, 1.0 = no cost for the C layer).
    RustApi,
}

impl RefKind {
    const ALL: [RefKind; 9] = [
        RefKind::MemcpyBandwidth,
        RefKind::MemcpyTime,
        RefKind::Cacheline,
        RefKind::RawAtomic,
        RefKind::ComputeRate,
        RefKind::TransferAlone,
        RefKind::TcpLatency,
        RefKind::TcpBandwidth,
        RefKind::RustApi,
    ];

    /// Name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            RefKind::MemcpyBandwidth => "memcpy_bandwidth",
            RefKind::MemcpyTime => "memcpy_time",
            RefKind::Cacheline => "cacheline",
            RefKind::RawAtomic => "raw_atomic",
            RefKind::ComputeRate => "compute_rate",
            RefKind::TransferAlone => "transfer_alone",
            RefKind::TcpLatency => "tcp_latency",
            RefKind::TcpBandwidth => "tcp_bandwidth",
            RefKind::RustApi => "rust_api",
        }
    }

    /// Table headers: the reference's time and the ratio.
    fn headers(self) -> (&'static str, &'static str) {
        match self {
            RefKind::MemcpyBandwidth => ("memcpy us", "bw/memcpy"),
            RefKind::MemcpyTime => ("memcpy us", "t/memcpy"),
            RefKind::Cacheline => ("cline us", "t/cline"),
            RefKind::RawAtomic => ("raw us", "t/raw"),
            RefKind::ComputeRate => ("solo us/u", "compute/solo"),
            RefKind::TransferAlone => ("alone us", "t/alone"),
            RefKind::TcpLatency => ("tcp us", "t/tcp"),
            RefKind::TcpBandwidth => ("tcp us", "bw/tcp"),
            RefKind::RustApi => ("rust us", "C/rust"),
        }
    }

    fn parse(name: &str) -> Option<RefKind> {
        RefKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One row's comparison with a reference measured in the same run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reference {
    /// Which reference.
    pub kind: RefKind,
    /// The reference's median time for the matching operation, microseconds.
    pub ref_us: f64,
    /// The ratio (see [`RefKind`] for its direction).
    pub ratio: f64,
}

impl Reference {
    /// Compares a row's median `us` with a reference time `ref_us`.
    pub fn new(kind: RefKind, us: f64, ref_us: f64) -> Reference {
        let ratio = match kind {
            RefKind::MemcpyBandwidth | RefKind::ComputeRate | RefKind::TcpBandwidth => ref_us / us,
            _ => us / ref_us,
        };
        Reference {
            kind,
            ref_us,
            ratio,
        }
    }
}

/// One measured size (or operation) of a benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `"8 B"`, `"1 MiB"`, or an operation name (`"fetch_add"`).
    pub label: String,
    /// Message size in bytes.
    pub size: usize,
    /// Bytes one operation moves, for the bandwidth column (0: none).
    pub bytes: usize,
    /// Operations per timed sample.
    pub batch: usize,
    /// Time per operation.
    pub stats: Summary,
    /// Ratios to references.
    pub refs: Vec<Reference>,
}

impl Row {
    /// Bandwidth at the median, GB/s (10^9 bytes per second).
    pub fn bandwidth_gbs(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.bytes as f64 / self.stats.median_us / 1e3)
    }

    /// Operations per second at the median, in millions.
    pub fn rate_mops(&self) -> f64 {
        1.0 / self.stats.median_us
    }
}

/// Every row of one benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// The benchmark.
    pub bench: Bench,
    /// Its rows.
    pub rows: Vec<Row>,
}

/// Everything one job (one engine) measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The engine asked for (`"auto"`: the library's choice).
    pub engine: String,
    /// The routes the PEs used, e.g. `"HCCS x2"`.
    pub routes: String,
    /// Number of PEs.
    pub pes: usize,
    /// Timed samples per row.
    pub iters: usize,
    /// Untimed samples per row.
    pub warmup: usize,
    /// Cache-line ping-pong half round trip, when measured.
    pub cacheline_us: Option<f64>,
    /// memcpy median per size, when measured.
    pub memcpy: Vec<(usize, f64)>,
    /// The benchmarks.
    pub benches: Vec<BenchResult>,
}

/// `8 B`, `4 KiB`, `1 MiB`, `1.5 KiB`.
pub fn format_size(bytes: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (scale, unit) in UNITS {
        if bytes >= scale {
            return if bytes.is_multiple_of(scale) {
                format!("{} {unit}", bytes / scale)
            } else {
                format!("{:.1} {unit}", bytes as f64 / scale as f64)
            };
        }
    }
    format!("{bytes} B")
}

fn clean(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}

// ----- the line format PE 0 writes for the driver -------------------------

/// Encodes `run` as tab-separated lines.
pub fn encode(run: &RunResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run\t{}\t{}\t{}\t{}\t{}",
        clean(&run.engine),
        clean(&run.routes),
        run.pes,
        run.iters,
        run.warmup
    );
    if let Some(c) = run.cacheline_us {
        let _ = writeln!(out, "cacheline\t{c}");
    }
    for (size, us) in &run.memcpy {
        let _ = writeln!(out, "memcpy\t{size}\t{us}");
    }
    for b in &run.benches {
        let _ = writeln!(out, "bench\t{}", b.bench.name());
        for r in &b.rows {
            let s = &r.stats;
            let _ = write!(
                out,
                "row\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                clean(&r.label),
                r.size,
                r.bytes,
                r.batch,
                s.median_us,
                s.min_us,
                s.p99_us,
                s.mean_us,
                s.samples
            );
            for f in &r.refs {
                let _ = write!(out, "\t{}={}={}", f.kind.name(), f.ref_us, f.ratio);
            }
            out.push('\n');
        }
    }
    out
}

fn bad(line: usize, what: &str) -> BenchError {
    BenchError::Job(format!("results line {}: {what}", line + 1))
}

fn num<T: std::str::FromStr>(fields: &[&str], i: usize, line: usize) -> Result<T> {
    fields
        .get(i)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| bad(line, &format!("field {i} is not a number")))
}

/// Decodes what [`encode`] wrote.
pub fn decode(text: &str) -> Result<RunResult> {
    let mut run: Option<RunResult> = None;
    for (ln, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        if f[0] == "run" {
            if f.len() != 6 {
                return Err(bad(ln, "a run line has 6 fields"));
            }
            run = Some(RunResult {
                engine: f[1].to_string(),
                routes: f[2].to_string(),
                pes: num(&f, 3, ln)?,
                iters: num(&f, 4, ln)?,
                warmup: num(&f, 5, ln)?,
                cacheline_us: None,
                memcpy: Vec::new(),
                benches: Vec::new(),
            });
            continue;
        }
        let r = run.as_mut().ok_or_else(|| bad(ln, "no run line first"))?;
        match f[0] {
            "cacheline" => r.cacheline_us = Some(num(&f, 1, ln)?),
            "memcpy" => r.memcpy.push((num(&f, 1, ln)?, num(&f, 2, ln)?)),
            "bench" => {
                let b = f
                    .get(1)
                    .and_then(|n| Bench::parse(n))
                    .ok_or_else(|| bad(ln, "unknown benchmark"))?;
                r.benches.push(BenchResult {
                    bench: b,
                    rows: Vec::new(),
                });
            }
            "row" => {
                if f.len() < 10 {
                    return Err(bad(ln, "a row line has at least 10 fields"));
                }
                let mut refs = Vec::new();
                for item in &f[10..] {
                    let parts: Vec<&str> = item.split('=').collect();
                    let kind = parts
                        .first()
                        .and_then(|k| RefKind::parse(k))
                        .ok_or_else(|| bad(ln, "unknown reference"))?;
                    refs.push(Reference {
                        kind,
                        ref_us: num(&parts, 1, ln)?,
                        ratio: num(&parts, 2, ln)?,
                    });
                }
                let row = Row {
                    label: f[1].to_string(),
                    size: num(&f, 2, ln)?,
                    bytes: num(&f, 3, ln)?,
                    batch: num(&f, 4, ln)?,
                    stats: Summary {
                        median_us: num(&f, 5, ln)?,
                        min_us: num(&f, 6, ln)?,
                        p99_us: num(&f, 7, ln)?,
                        mean_us: num(&f, 8, ln)?,
                        samples: num(&f, 9, ln)?,
                    },
                    refs,
                };
                r.benches
                    .last_mut()
                    .ok_or_else(|| bad(ln, "a row before any bench line"))?
                    .rows
                    .push(row);
            }
            _ => return Err(bad(ln, "unknown record")),
        }
    }
    run.ok_or_else(|| BenchError::Job("the PEs wrote no results".into()))
}

// ----- text tables ----------------------------------------------------------

fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        "-".into()
    } else if us < 10.0 {
        format!("{us:.3}")
    } else if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}")
    } else {
        "-".into()
    }
}

/// The table of one benchmark of one run.
pub fn table(run: &RunResult, b: &BenchResult) -> String {
    let mut out = String::new();
    let samples = b.rows.first().map_or(run.iters, |r| r.stats.samples);
    let what = match b.bench {
        Bench::SdmaOverlap => {
            "time per transfer, issue to completion; compute solo: time per compute unit"
        }
        Bench::SdmaEngines => "time per put; xN: N engine threads, one job each",
        _ => "time per operation",
    };
    let _ = writeln!(
        out,
        "# {}: {} PEs, {}, {samples} samples per row ({what})",
        b.bench.name(),
        run.pes,
        run.routes,
    );
    let mut kinds: Vec<RefKind> = Vec::new();
    for f in b.rows.iter().flat_map(|r| &r.refs) {
        if !kinds.contains(&f.kind) {
            kinds.push(f.kind);
        }
    }
    let first = match b.bench {
        Bench::SdmaOverlap => "row",
        Bench::SdmaEngines => "size x engines",
        b if b.sized() => "size",
        _ => "op",
    };
    let w = b
        .rows
        .iter()
        .map(|r| r.label.len())
        .chain([first.len(), 12])
        .max()
        .unwrap_or(12);
    let mut header = format!(
        "{:>w$} {:>10} {:>10} {:>10} {:>9} {:>9}",
        first, "median us", "min us", "p99 us", "GB/s", "Mop/s"
    );
    for k in &kinds {
        let (t, r) = k.headers();
        let _ = write!(header, " {t:>10} {r:>12}");
    }
    let _ = writeln!(out, "{header}");
    for r in &b.rows {
        let bw = r
            .bandwidth_gbs()
            .map_or_else(|| "-".to_string(), |g| format!("{g:.2}"));
        let mut line = format!(
            "{:>w$} {:>10} {:>10} {:>10} {:>9} {:>9.2}",
            r.label,
            fmt_us(r.stats.median_us),
            fmt_us(r.stats.min_us),
            fmt_us(r.stats.p99_us),
            bw,
            r.rate_mops()
        );
        for k in &kinds {
            match r.refs.iter().find(|f| f.kind == *k) {
                Some(f) => {
                    let _ = write!(line, " {:>10} {:>12}", fmt_us(f.ref_us), fmt_ratio(f.ratio));
                }
                None => {
                    let _ = write!(line, " {:>10} {:>12}", "-", "-");
                }
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Side-by-side tables of the same benchmarks under several engines.
pub fn compare_tables(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let Some(first) = runs.first() else {
        return out;
    };
    for (bi, b) in first.benches.iter().enumerate() {
        let kind = b.rows.first().and_then(|r| r.refs.first()).map(|f| f.kind);
        let ratio_name = kind.map_or("", |k| k.headers().1);
        let _ = writeln!(
            out,
            "# {} under {} engines, {} PEs: median us ({ratio_name})",
            b.bench.name(),
            runs.len(),
            first.pes
        );
        let mut header = format!("{:>12}", if b.bench.sized() { "size" } else { "op" });
        for r in runs {
            let _ = write!(header, " {:>22}", r.routes);
        }
        let _ = writeln!(out, "{header}");
        for (ri, row) in b.rows.iter().enumerate() {
            let mut line = format!("{:>12}", row.label);
            for r in runs {
                let cell = r
                    .benches
                    .get(bi)
                    .and_then(|rb| rb.rows.get(ri))
                    .map(|x| {
                        let ratio = x.refs.first().map_or(f64::NAN, |f| f.ratio);
                        format!("{} ({})", fmt_us(x.stats.median_us), fmt_ratio(ratio))
                    })
                    .unwrap_or_else(|| "-".into());
                let _ = write!(line, " {cell:>22}");
            }
            let _ = writeln!(out, "{line}");
        }
        out.push('\n');
    }
    out
}

// ----- JSON -------------------------------------------------------------------

/// The JSON document, as serde writes it. Non-finite numbers become `null`
/// (serde_json's rule for floats).
#[derive(Serialize)]
struct JsonDoc<'a> {
    tool: &'static str,
    version: &'static str,
    time_unit: &'static str,
    runs: Vec<JsonRun<'a>>,
    failed_engines: Vec<JsonFailure<'a>>,
}

#[derive(Serialize)]
struct JsonRun<'a> {
    engine: &'a str,
    routes: &'a str,
    pes: usize,
    iters: usize,
    warmup: usize,
    cacheline_half_round_trip_us: Option<f64>,
    memcpy: Vec<JsonMemcpy>,
    benchmarks: Vec<JsonBench<'a>>,
}

#[derive(Serialize)]
struct JsonMemcpy {
    size: usize,
    median_us: f64,
}

#[derive(Serialize)]
struct JsonBench<'a> {
    name: &'static str,
    rows: Vec<JsonRow<'a>>,
}

#[derive(Serialize)]
struct JsonRow<'a> {
    label: &'a str,
    size: usize,
    bytes: usize,
    batch: usize,
    samples: usize,
    median_us: f64,
    min_us: f64,
    p99_us: f64,
    mean_us: f64,
    bandwidth_gbs: Option<f64>,
    rate_mops: f64,
    refs: Vec<JsonRef>,
}

#[derive(Serialize)]
struct JsonRef {
    kind: &'static str,
    ref_us: f64,
    ratio: f64,
}

#[derive(Serialize)]
struct JsonFailure<'a> {
    engine: &'a str,
    error: &'a str,
}

/// Every run's summaries as one JSON document.
pub fn json(runs: &[RunResult], failures: &[(String, String)]) -> String {
    let doc = JsonDoc {
        tool: "shmem-bench",
        version: shmem::version(),
        time_unit: "us per operation",
        runs: runs
            .iter()
            .map(|run| JsonRun {
                engine: &run.engine,
                routes: &run.routes,
                pes: run.pes,
                iters: run.iters,
                warmup: run.warmup,
                cacheline_half_round_trip_us: run.cacheline_us,
                memcpy: run
                    .memcpy
                    .iter()
                    .map(|&(size, median_us)| JsonMemcpy { size, median_us })
                    .collect(),
                benchmarks: run
                    .benches
                    .iter()
                    .map(|b| JsonBench {
                        name: b.bench.name(),
                        rows: b
                            .rows
                            .iter()
                            .map(|r| JsonRow {
                                label: &r.label,
                                size: r.size,
                                bytes: r.bytes,
                                batch: r.batch,
                                samples: r.stats.samples,
                                median_us: r.stats.median_us,
                                min_us: r.stats.min_us,
                                p99_us: r.stats.p99_us,
                                mean_us: r.stats.mean_us,
                                bandwidth_gbs: r.bandwidth_gbs(),
                                rate_mops: r.rate_mops(),
                                refs: r
                                    .refs
                                    .iter()
                                    .map(|f| JsonRef {
                                        kind: f.kind.name(),
                                        ref_us: f.ref_us,
                                        ratio: f.ratio,
                                    })
                                    .collect(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
        failed_engines: failures
            .iter()
            .map(|(engine, error)| JsonFailure { engine, error })
            .collect(),
    };
    // Serialising plain structs of numbers and strings into a String
    // cannot fail.
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunResult {
        let stats = Summary::of(&[1.0, 2.0, 3.0]).unwrap();
        RunResult {
            engine: "HCCS".into(),
            routes: "HCCS x2".into(),
            pes: 2,
            iters: 3,
            warmup: 1,
            cacheline_us: Some(0.25),
            memcpy: vec![(8, 0.004), (1 << 20, 24.5)],
            benches: vec![BenchResult {
                bench: Bench::Put,
                rows: vec![Row {
                    label: format_size(1 << 20),
                    size: 1 << 20,
                    bytes: 1 << 20,
                    batch: 1,
                    stats,
                    refs: vec![Reference::new(RefKind::MemcpyBandwidth, 2.0, 1.5)],
                }],
            }],
        }
    }

    #[test]
    fn line_format_round_trips() {
        let run = sample();
        assert_eq!(decode(&encode(&run)).unwrap(), run);
        assert!(decode("").is_err());
        assert!(decode("row\tx").is_err());
    }

    #[test]
    fn tables_and_json_show_every_row() {
        let run = sample();
        let t = table(&run, &run.benches[0]);
        assert!(
            t.contains("1 MiB") && t.contains("bw/memcpy") && t.contains("0.75"),
            "{t}"
        );
        let j = json(
            std::slice::from_ref(&run),
            &[("SDMA".into(), "not \"linked\"\n".into())],
        );
        let v: serde_json::Value = serde_json::from_str(&j).expect(&j);
        let row = &v["runs"][0]["benchmarks"][0]["rows"][0];
        assert_eq!(row["label"], "1 MiB", "{j}");
        assert_eq!(row["refs"][0]["ratio"], 0.75, "{j}");
        assert_eq!(row["refs"][0]["kind"], "memcpy_bandwidth", "{j}");
        assert_eq!(row["samples"], 3, "{j}");
        assert_eq!(v["runs"][0]["memcpy"][1]["size"], 1 << 20, "{j}");
        assert_eq!(v["runs"][0]["cacheline_half_round_trip_us"], 0.25, "{j}");
        // Strings are escaped (a quote and a newline survive the trip).
        assert_eq!(v["failed_engines"][0]["engine"], "SDMA", "{j}");
        assert_eq!(v["failed_engines"][0]["error"], "not \"linked\"\n", "{j}");
        // A non-finite figure is null, not invalid JSON.
        let mut odd = run.clone();
        odd.cacheline_us = Some(f64::NAN);
        let v: serde_json::Value = serde_json::from_str(&json(&[odd], &[])).unwrap();
        assert!(v["runs"][0]["cacheline_half_round_trip_us"].is_null());
        let c = compare_tables(&[run.clone(), run]);
        assert!(c.contains("2.000 (0.75)"), "{c}");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(format_size(8), "8 B");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(1 << 20), "1 MiB");
    }
}
