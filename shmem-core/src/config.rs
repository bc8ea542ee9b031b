//! Every `SHMEM_*` environment variable, declared once.
//!
//! The table below is the single source of truth: it produces the [`Config`]
//! struct, its parser, and the `SHMEM_INFO=1` listing. A new variable is one
//! new line in `config_table!`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::error::{Error, Result};

/// A value type a configuration variable can hold.
pub trait ConfigValue: Sized + Clone {
    /// Human name of the type, shown by `SHMEM_INFO`.
    const KIND: &'static str;
    /// Parses the variable's text.
    ///
    /// # Errors
    /// A message saying why `text` is not a value of this type.
    fn parse(text: &str) -> std::result::Result<Self, String>;
    /// Formats the effective value.
    fn show(&self) -> String;
}

/// A byte count written with an optional K, M, G or T suffix (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub usize);

/// Parses `"64"`, `"4K"`, `"256M"`, `"1G"`, `"2GiB"`, `"1.5G"` into bytes.
///
/// # Errors
/// A message when `text` has no number, is not a size, or overflows.
pub fn parse_size(text: &str) -> std::result::Result<usize, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (num, mult) = match body.chars().last() {
        Some('K') => (&body[..body.len() - 1], 1u64 << 10),
        Some('M') => (&body[..body.len() - 1], 1u64 << 20),
        Some('G') => (&body[..body.len() - 1], 1u64 << 30),
        Some('T') => (&body[..body.len() - 1], 1u64 << 40),
        _ => (body, 1u64),
    };
    let num = num.trim();
    if num.is_empty() {
        return Err(format!("{text:?} has no number (expected e.g. 64M or 1G)"));
    }
    let bytes = if let Ok(n) = num.parse::<u64>() {
        n.checked_mul(mult)
            .ok_or_else(|| format!("{text:?} overflows"))?
    } else {
        let f: f64 = num
            .parse()
            .map_err(|_| format!("{text:?} is not a size (expected e.g. 64M or 1G)"))?;
        if !f.is_finite() || f < 0.0 {
            return Err(format!("{text:?} is not a non-negative size"));
        }
        let b = f * mult as f64;
        if b > u64::MAX as f64 {
            return Err(format!("{text:?} overflows"));
        }
        b as u64
    };
    usize::try_from(bytes).map_err(|_| format!("{text:?} overflows"))
}

impl ConfigValue for ByteSize {
    const KIND: &'static str = "size";
    fn parse(text: &str) -> std::result::Result<Self, String> {
        parse_size(text).map(ByteSize)
    }
    fn show(&self) -> String {
        let b = self.0;
        for (suffix, shift) in [("G", 30), ("M", 20), ("K", 10)] {
            if b >= 1 << shift && b.is_multiple_of(1 << shift) {
                return format!("{}{suffix}", b >> shift);
            }
        }
        b.to_string()
    }
}

impl ConfigValue for bool {
    const KIND: &'static str = "bool";
    fn parse(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "1" | "y" | "yes" | "true" | "on" => Ok(true),
            "0" | "n" | "no" | "false" | "off" | "" => Ok(false),
            other => Err(format!(
                "{other:?} is not a boolean (use 1/0, yes/no, true/false)"
            )),
        }
    }
    fn show(&self) -> String {
        if *self { "1" } else { "0" }.to_string()
    }
}

impl ConfigValue for u64 {
    const KIND: &'static str = "integer";
    fn parse(text: &str) -> std::result::Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a non-negative integer"))
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for Duration {
    const KIND: &'static str = "seconds";
    fn parse(text: &str) -> std::result::Result<Self, String> {
        let f: f64 = text
            .trim()
            .trim_end_matches('s')
            .parse()
            .map_err(|_| format!("{text:?} is not a number of seconds"))?;
        if !f.is_finite() || f < 0.0 {
            return Err(format!("{text:?} is not a non-negative number of seconds"));
        }
        Ok(Duration::from_secs_f64(f))
    }
    fn show(&self) -> String {
        format!("{}", self.as_secs_f64())
    }
}

impl ConfigValue for String {
    const KIND: &'static str = "string";
    fn parse(text: &str) -> std::result::Result<Self, String> {
        Ok(text.to_string())
    }
    fn show(&self) -> String {
        self.clone()
    }
}

macro_rules! config_table {
    ($( $(#[$doc:meta])* $field:ident : $ty:ty = $name:literal, $default:literal, $help:literal; )*) => {
        /// Effective configuration, read from the environment once at init.
        #[derive(Debug, Clone)]
        pub struct Config {
            $( $(#[$doc])* pub $field: $ty, )*
            /// Text of every variable other crates declared with
            /// [`crate::config_var!`] (unset ones absent), read with
            /// [`Config::var`].
            pub declared: std::collections::BTreeMap<&'static str, String>,
        }

        /// One row of the variable table.
        #[derive(Debug, Clone, Copy)]
        pub struct VarSpec {
            /// Environment variable name.
            pub name: &'static str,
            /// Value type.
            pub kind: &'static str,
            /// Default, as text (empty means unset).
            pub default: &'static str,
            /// What it does.
            pub help: &'static str,
        }

        /// Every `SHMEM_*` variable the library reads.
        pub const VARIABLES: &[VarSpec] = &[
            $( VarSpec { name: $name, kind: <$ty as ConfigValue>::KIND, default: $default, help: $help }, )*
        ];

        impl Config {
            /// Reads the configuration through `lookup` (the environment in
            /// [`Config::from_env`]); unset variables take their default.
            ///
            /// # Errors
            /// [`Error::Config`] naming the first variable whose text does not parse.
            pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
                let mut declared = std::collections::BTreeMap::new();
                for v in declared_variables() {
                    if let Some(text) = lookup(v.name) {
                        (v.check)(&text).map_err(|reason| Error::Config {
                            name: v.name,
                            value: text.clone(),
                            reason,
                        })?;
                        declared.insert(v.name, text);
                    }
                }
                Ok(Config {
                    declared,
                    $( $field: {
                        let text = lookup($name);
                        let src = text.as_deref().unwrap_or($default);
                        <$ty as ConfigValue>::parse(src).map_err(|reason| Error::Config {
                            name: $name,
                            value: src.to_string(),
                            reason,
                        })?
                    }, )*
                })
            }

            /// `(name, effective value, help)` for every variable: core's
            /// table, then the declared ones by name.
            pub fn effective(&self) -> Vec<(&'static str, String, &'static str)> {
                let mut v = vec![ $( ($name, ConfigValue::show(&self.$field), $help), )* ];
                for d in declared_variables() {
                    let text = self.declared.get(d.name).map_or(d.default, String::as_str);
                    v.push((d.name, text.to_string(), d.help));
                }
                v
            }
        }
    };
}

/// A `SHMEM_*` variable declared by the crate that reads it (an engine, a
/// plugin, a front end), with [`crate::config_var!`]. Core's own table
/// stays in [`Config`]'s fields; `SHMEM_INFO=1` lists both.
pub struct ConfigVar {
    /// Environment variable name.
    pub name: &'static str,
    /// Value type, as [`ConfigValue::KIND`] names it.
    pub kind: &'static str,
    /// Default, as text.
    pub default: &'static str,
    /// What it does.
    pub help: &'static str,
    /// Checks a value's text (the type's parser).
    pub check: fn(&str) -> std::result::Result<(), String>,
}

inventory::collect!(ConfigVar);

/// Declares a `SHMEM_*` variable read by this crate: it joins the
/// `SHMEM_INFO` listing and [`Config::var`] reads it.
///
/// ```
/// shmem_core::config_var!("SHMEM_EXAMPLE_DEPTH", u64, "4", "Queue depth of the example engine");
/// let c = shmem_core::Config::from_lookup(|k| (k == "SHMEM_EXAMPLE_DEPTH").then(|| "9".into())).unwrap();
/// assert_eq!(c.var::<u64>("SHMEM_EXAMPLE_DEPTH").unwrap(), 9);
/// assert!(c.info_table().contains("SHMEM_EXAMPLE_DEPTH"));
/// ```
#[macro_export]
macro_rules! config_var {
    ($name:literal, $ty:ty, $default:literal, $help:literal) => {
        $crate::inventory::submit! {
            $crate::config::ConfigVar {
                name: $name,
                kind: <$ty as $crate::config::ConfigValue>::KIND,
                default: $default,
                help: $help,
                check: |text| <$ty as $crate::config::ConfigValue>::parse(text).map(|_| ()),
            }
        }
    };
}

/// Variables declared with [`crate::config_var!`] by the linked crates, by name.
pub fn declared_variables() -> Vec<&'static ConfigVar> {
    let mut v: Vec<_> = inventory::iter::<ConfigVar>.into_iter().collect();
    v.sort_by_key(|d| d.name);
    v.dedup_by_key(|d| d.name);
    v
}

impl Config {
    /// The value of a variable declared with [`crate::config_var!`]: its
    /// text from the environment, else its default, parsed as `T`.
    ///
    /// # Errors
    /// [`Error::Config`] when no linked crate declares `name`, or its text
    /// does not parse as `T`.
    pub fn var<T: ConfigValue>(&self, name: &'static str) -> Result<T> {
        let decl = declared_variables()
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| Error::Config {
                name,
                value: String::new(),
                reason: "no linked crate declares this variable".into(),
            })?;
        let text = self.declared.get(name).map_or(decl.default, String::as_str);
        T::parse(text).map_err(|reason| Error::Config {
            name,
            value: text.to_string(),
            reason,
        })
    }
}

config_table! {
    /// Bytes of symmetric heap per PE.
    symmetric_size: ByteSize = "SHMEM_SYMMETRIC_SIZE", "256M",
        "Symmetric heap size per PE (K/M/G suffixes); init's mem_size overrides it";
    /// Kind of heap backing.
    heap: String = "SHMEM_HEAP", "memfd",
        "Symmetric heap backing, by registered kind (memfd: shared memory that same-node engines map)";
    /// Forced engine for every peer, empty for automatic routing.
    test_engine: String = "SHMEM_TEST_ENGINE", "",
        "Force one engine for every peer, by name (case-insensitive): a linked one or one loaded from SHMEM_TRANSPORT_PLUGINS; empty routes automatically";
    /// Print the variable table at init.
    info: bool = "SHMEM_INFO", "0",
        "Print this table with effective values at init (rank 0)";
    /// Log level.
    log_level: String = "SHMEM_LOG_LEVEL", "",
        "Log level on stderr: error, warn, info, debug, trace (falls back to RUST_LOG, then warn)";
    /// Timeout for joining the job.
    init_timeout: Duration = "SHMEM_INIT_TIMEOUT", "120",
        "Seconds init waits for the config store and for all PEs to join";
    /// Timeout of each bootstrap call after init.
    bootstrap_timeout: Duration = "SHMEM_BOOTSTRAP_TIMEOUT", "600",
        "Seconds any later bootstrap call (allocation, finalize) waits for the other PEs";
    /// Address the UniqueId store binds to.
    bootstrap_addr: String = "SHMEM_BOOTSTRAP_ADDR", "",
        "IP address rank 0's config store binds to for UniqueId init (default: this host's first non-loopback IPv4, else 127.0.0.1)";
    /// Port for the store in torchrun mode.
    bootstrap_port: String = "SHMEM_BOOTSTRAP_PORT", "",
        "Port of the config store when started by torchrun (default MASTER_PORT+1, leaving MASTER_PORT to torch)";
    /// Spin time before blocking.
    spin_us: String = "SHMEM_SPIN_US", "auto",
        "Microseconds a wait spins before yielding and then blocking on a futex (auto: 0 when PEs outnumber cores, 2 when an engine needs a progress thread that waits do not drive, else 50, and 20000 after a sleep that ended within 2 ms until a longer one where no engine needs a progress thread)";
    /// Waiters issue a membarrier so that writers need no fence.
    wait_membarrier: bool = "SHMEM_WAIT_MEMBARRIER", "1",
        "1: a wait about to sleep issues membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), so puts need no fence before they look for sleepers (about 5 ns each); 0, or a kernel without it: every write fences";
    /// Longest single sleep of a blocked wait.
    wait_poll: Duration = "SHMEM_WAIT_POLL", "0.05",
        "Seconds a blocked wait sleeps at most before it checks that the job is alive and sleeps again (at least 0.001); a wait ends as soon as a write wakes it";
    /// Whole-wait timeout.
    wait_timeout: Duration = "SHMEM_WAIT_TIMEOUT", "0",
        "Seconds after which a wait_until/signal_wait fails with a timeout (0 = wait forever, still failing when a PE dies)";
    /// Largest stream copy run at once on an idle stream.
    stream_inline: ByteSize = "SHMEM_STREAM_INLINE", "16K",
        "Bytes up to which a stream's put, get or signal to a PE reached by load and store runs at once on the calling thread when the stream is idle, instead of waking the stream's worker (0: always enqueue)";
    /// Hang report delay.
    hang_report: Duration = "SHMEM_HANG_REPORT", "10",
        "Seconds a PE may wait in one collective, allocation or wait before every PE reports its current call and one prints a table of who diverged (0 = off)";
    /// End a job whose hang was reported.
    hang_abort: bool = "SHMEM_HANG_ABORT", "0",
        "1 ends the job (status 1) after the hang report instead of waiting on";
    /// Diagnostic checks in the C API.
    debug: bool = "SHMEM_DEBUG", "0",
        "1 makes the C API check every heap access against the live allocations: a use after free (or of memory never allocated) ends the job with a one-line diagnostic";
    /// Rank set by a launcher.
    rank: String = "SHMEM_RANK", "",
        "This PE's rank (set by shmemrun; RANK, SLURM_PROCID are also read)";
    /// Job size set by a launcher.
    nranks: String = "SHMEM_NRANKS", "",
        "Number of PEs (set by shmemrun; WORLD_SIZE is also read)";
    /// Store address set by a launcher.
    store_addr: String = "SHMEM_STORE_ADDR", "",
        "host:port of the config store (set by shmemrun)";
    /// Store hosted outside the PEs.
    store_external: bool = "SHMEM_STORE_EXTERNAL", "0",
        "1 when the launcher hosts the config store, so rank 0 does not bind it (set by shmemrun)";
    /// Job secret.
    job_secret: String = "SHMEM_JOB_SECRET", "",
        "Hex job secret every PE proves to the config store (set by shmemrun; needed for attribute init across untrusted networks)";
    /// Barrier algorithm (also the entry handshake of every collective).
    barrier_algorithm: String = "SHMEM_BARRIER_ALGORITHM", "auto",
        "Barrier/sync algorithm: auto, dissemination or linear (also used by every collective to agree on its arguments)";
    /// Broadcast algorithm.
    broadcast_algorithm: String = "SHMEM_BROADCAST_ALGORITHM", "auto",
        "Broadcast algorithm: auto, direct or binomial";
    /// Fcollect (allgather) algorithm.
    fcollect_algorithm: String = "SHMEM_FCOLLECT_ALGORITHM", "auto",
        "Fcollect (allgather) algorithm: auto, direct or ring";
    /// Collect (variable-size allgather) algorithm.
    collect_algorithm: String = "SHMEM_COLLECT_ALGORITHM", "auto",
        "Collect (allgather of per-PE sizes) algorithm: auto, direct or ring";
    /// Alltoall algorithm.
    alltoall_algorithm: String = "SHMEM_ALLTOALL_ALGORITHM", "auto",
        "Alltoall/alltoalls algorithm: auto, direct (put with signal to every PE) or pairwise";
    /// Reduction algorithm.
    reduce_algorithm: String = "SHMEM_REDUCE_ALGORITHM", "auto",
        "Reduction algorithm: auto, recursive_doubling or ring (reduce-scatter + allgather)";
    /// Scan algorithm.
    scan_algorithm: String = "SHMEM_SCAN_ALGORITHM", "auto",
        "Prefix-scan algorithm: auto, linear or recursive_doubling";
    /// Time to declare a silent network peer dead.
    link_timeout: Duration = "SHMEM_LINK_TIMEOUT", "5",
        "Seconds after which a peer whose TCP link went silent (cable cut, host gone) is reported as exited";
    /// Interface the bootstrap binds / engines listen on.
    bootstrap_ifname: String = "SHMEM_BOOTSTRAP_IFNAME", "",
        "Network interface whose IPv4 address rank 0's store binds to for UniqueId init (overrides the automatic choice)";
    /// CPU binding of launched PEs.
    bind: String = "SHMEM_BIND", "core",
        "How shmemrun places PEs: core (one core each when they fit, the default) or none";
    /// The core shmemrun bound this PE to, and the cores it had.
    bound_cpus: String = "SHMEM_BOUND_CPUS", "",
        "Set by shmemrun when it binds a PE to one core (CPU/LIST: that core, then the cores it may use); at init a PE whose machine also runs PEs of other launchers of the job (several --nnodes launchers on one host) takes the core of its place among them, or all of LIST when they do not fit";
    /// Cores the node's PEs share.
    node_cores: u64 = "SHMEM_NODE_CORES", "0",
        "Cores this node's PEs share, which decides whether waits spin or yield (set by shmemrun when it binds each PE to one core; 0: the CPUs this process may run on)";
    /// Engines loaded from shared libraries at init.
    transport_plugins: String = "SHMEM_TRANSPORT_PLUGINS", "",
        "Colon-separated paths of transport plugins (.so files exporting the C-ABI engine vtable) loaded at init, beside the linked engines";
    /// Store ports for instances above 0.
    instance_port_range: String = "SHMEM_INSTANCE_PORT_RANGE", "",
        "start:end ports for the config stores of instances 1.. started from a launcher (instance k uses start+k-1)";
}

impl Config {
    /// Reads the configuration from the process environment.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first variable whose text does not parse.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// The `SHMEM_INFO` listing: one line per variable with its effective value.
    pub fn info_table(&self) -> String {
        let mut out = String::from("shmem configuration (effective values):\n");
        if cfg!(debug_assertions) {
            // Timings taken with an unoptimised library mislead: say so
            // where people look when they measure.
            out.push_str(
                "  (this library is an unoptimised debug build: calls cost several times \
                 more than in a release build)\n",
            );
        }
        for (name, value, help) in self.effective() {
            let shown = if name == "SHMEM_JOB_SECRET" && !value.is_empty() {
                "<set>".to_string()
            } else {
                value
            };
            let _ = writeln!(out, "  {name:<24} = {shown:<12} {help}");
        }
        out
    }

    /// Cores this node's PEs share: `SHMEM_NODE_CORES` when set (a launcher
    /// that binds each PE to one core sets it, since the PE itself then
    /// sees one CPU), else the CPUs this process may run on.
    pub fn cores(&self) -> usize {
        match self.node_cores {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n.min(usize::MAX as u64) as usize,
        }
    }

    /// Whether `SHMEM_SPIN_US` is `auto` (or unset): the spin is chosen,
    /// and adapted while waits run ([`crate::wait::WaitPolicy::adapt`]).
    pub fn spin_is_auto(&self) -> bool {
        self.spin_us.trim().eq_ignore_ascii_case("auto") || self.spin_us.trim().is_empty()
    }

    /// Spin time before a wait blocks, given the number of PEs that share
    /// this machine's cores ([`crate::topology::Topology::machine_pes`]).
    /// `progress_threads` says whether an engine in use needs CPU time of its
    /// own (a software progress thread that waiting threads do not drive),
    /// which a long spin would steal.
    ///
    /// # Errors
    /// [`Error::Config`] when `SHMEM_SPIN_US` is neither `auto` nor a number.
    pub fn spin_duration(&self, local_pes: usize, progress_threads: bool) -> Result<Duration> {
        if self.spin_is_auto() {
            let cores = self.cores();
            // With more PEs than cores the PE we wait for cannot run while
            // we spin: yield at once (an 8-PE barrier on 2 cores: 25-29 us
            // with a 2-us spin, 16-17 us without). With cores to spare but
            // progress threads, a short spin catches their quick answers.
            let us = if local_pes > cores {
                0
            } else if progress_threads {
                2
            } else {
                50
            };
            return Ok(Duration::from_micros(us));
        }
        let us = <u64 as ConfigValue>::parse(&self.spin_us).map_err(|reason| Error::Config {
            name: "SHMEM_SPIN_US",
            value: self.spin_us.clone(),
            reason,
        })?;
        Ok(Duration::from_micros(us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::config_var!(
        "SHMEM_TEST_DECLARED",
        u64,
        "3",
        "A variable declared by a test"
    );

    #[test]
    fn declared_variables_are_read_checked_and_listed() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c.var::<u64>("SHMEM_TEST_DECLARED").unwrap(), 3);
        assert!(c.info_table().contains("SHMEM_TEST_DECLARED"));
        let c = Config::from_lookup(|k| (k == "SHMEM_TEST_DECLARED").then(|| "12".into())).unwrap();
        assert_eq!(c.var::<u64>("SHMEM_TEST_DECLARED").unwrap(), 12);
        assert!(c.info_table().contains("12"));
        let e = Config::from_lookup(|k| (k == "SHMEM_TEST_DECLARED").then(|| "many".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SHMEM_TEST_DECLARED") && e.contains("many"),
            "{e}"
        );
        let e = c.var::<u64>("SHMEM_NOT_DECLARED").unwrap_err().to_string();
        assert!(
            e.contains("SHMEM_NOT_DECLARED") && e.contains("declares"),
            "{e}"
        );
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c.symmetric_size, ByteSize(256 << 20));
        assert_eq!(c.init_timeout, Duration::from_secs(120));
        assert!(!c.info);
        let c =
            Config::from_lookup(|n| (n == "SHMEM_SYMMETRIC_SIZE").then(|| "1G".into())).unwrap();
        assert_eq!(c.symmetric_size.0, 1 << 30);
    }

    #[test]
    fn bad_value_names_the_variable() {
        let err = Config::from_lookup(|n| (n == "SHMEM_SYMMETRIC_SIZE").then(|| "huge".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("SHMEM_SYMMETRIC_SIZE"), "{err}");
        assert!(err.contains("huge"), "{err}");
    }

    #[test]
    fn info_says_when_the_library_is_a_debug_build() {
        let table = Config::from_lookup(|_| None).unwrap().info_table();
        assert_eq!(
            table.contains("unoptimised debug build"),
            cfg!(debug_assertions),
            "{table}"
        );
    }

    #[test]
    fn info_lists_every_variable() {
        let c = Config::from_lookup(|_| None).unwrap();
        let table = c.info_table();
        for v in VARIABLES {
            assert!(table.contains(v.name), "{} missing", v.name);
        }
    }
}
