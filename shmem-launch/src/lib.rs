//! `shmemrun`: start the N PEs of a job on this machine.
//!
//! The launcher hosts the job's config store itself, so a PE (rank 0
//! included) that dies is reported to the others at once. Each PE gets the
//! `SHMEM_*` variables that `shmem::init()` reads plus torchrun's `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`. When a PE fails, the others are terminated and the job's
//! outcome names the PE and how it ended. Ctrl-C is forwarded. In a job of
//! several nodes, node 0's launcher hosts the store and keeps it until the
//! other nodes' PEs have left too.
//!
//! The same logic serves examples that start themselves with `--pes N`
//! ([`launch_self_if_requested`]).
//!
//! ```no_run
//! use shmem_launch::{launch, LaunchOptions};
//! let opts = LaunchOptions::new(4, "./my_program");
//! let report = launch(&opts).unwrap();
//! assert!(report.success());
//! ```

#![warn(clippy::missing_errors_doc)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use shmem_bootstrap::{env, ids, StoreServer};
use shmem_core::{Error, PeId, Result};

/// What to start.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of PEs.
    pub n_pes: usize,
    /// Program to run.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// `SHMEM_TEST_ENGINE` for every PE.
    pub engine: Option<String>,
    /// Prefix every output line with `[PE i]`.
    pub tag_output: bool,
    /// Extra environment for every PE.
    pub env: Vec<(String, String)>,
    /// How long PEs get to exit after SIGTERM before SIGKILL.
    pub kill_grace: Duration,
    /// Stop the whole job after this long (a hang becomes a failure).
    pub timeout: Option<Duration>,
    /// Number of nodes (each runs its own launcher with `n_pes` PEs).
    pub nnodes: usize,
    /// This node's index in `0..nnodes`; its PEs get global ranks
    /// `node_rank * n_pes ..`.
    pub node_rank: usize,
    /// Node 0's address for a multi-node job: its launcher hosts the config
    /// store on `port + 1` (`port` itself is left to torch as `MASTER_PORT`).
    pub master: Option<SocketAddr>,
    /// Let rank 0 host the store at this address instead of the launcher
    /// (for PEs in another network namespace than the launcher).
    pub store_on_rank0: Option<SocketAddr>,
    /// Bind each PE to its own core when there are enough cores (default
    /// true; `SHMEM_BIND=none` or `--bind-to none` turns it off).
    pub bind: bool,
    /// Per-PE command prefix (e.g. `ip netns exec host1`); PE i runs
    /// `prefix[i] ++ [program] ++ args`. Empty: no prefix.
    pub prefix: Vec<Vec<OsString>>,
}

impl LaunchOptions {
    /// `n_pes` copies of `program` with no arguments.
    pub fn new(n_pes: usize, program: impl Into<OsString>) -> LaunchOptions {
        LaunchOptions {
            n_pes,
            program: program.into(),
            args: Vec::new(),
            engine: None,
            tag_output: false,
            env: Vec::new(),
            kill_grace: Duration::from_secs(2),
            timeout: None,
            nnodes: 1,
            node_rank: 0,
            master: None,
            store_on_rank0: None,
            prefix: Vec::new(),
            bind: shmem_core::Config::from_env()
                .map_or(true, |c| !c.bind.trim().eq_ignore_ascii_case("none")),
        }
    }
}

/// How one PE ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeEnd {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
}

impl PeEnd {
    fn from_status(s: ExitStatus) -> PeEnd {
        match (s.code(), s.signal()) {
            (Some(c), _) => PeEnd::Exited(c),
            (None, Some(sig)) => PeEnd::Signaled(sig),
            _ => PeEnd::Exited(-1),
        }
    }

    /// Whether this is a clean exit (code 0).
    pub fn ok(self) -> bool {
        self == PeEnd::Exited(0)
    }

    /// A shell-style exit code for it (128 + signal for signals).
    pub fn code(self) -> i32 {
        match self {
            PeEnd::Exited(c) => c,
            PeEnd::Signaled(s) => 128 + s,
        }
    }
}

impl std::fmt::Display for PeEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeEnd::Exited(c) => write!(f, "exited with code {c}"),
            PeEnd::Signaled(s) => write!(f, "was killed by signal {s} ({})", signal_name(*s)),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// The outcome of a job.
#[derive(Debug, Clone)]
pub struct JobReport {
    /// How each of this launcher's PEs ended, by local index.
    pub ends: Vec<PeEnd>,
    /// The first PE that failed, if any.
    pub first_failure: Option<(PeId, PeEnd)>,
    /// Signal that interrupted the launcher (Ctrl-C), if any.
    pub interrupted: Option<i32>,
    /// Whether the job was stopped for running past its timeout.
    pub timed_out: bool,
}

impl JobReport {
    /// Whether every PE exited with code 0.
    pub fn success(&self) -> bool {
        self.first_failure.is_none() && self.interrupted.is_none() && !self.timed_out
    }

    /// The launcher's exit code: 0, the failing PE's code, or 128 + signal.
    pub fn exit_code(&self) -> i32 {
        if let Some(sig) = self.interrupted {
            return 128 + sig;
        }
        if self.timed_out && self.first_failure.is_none() {
            return 124;
        }
        match self.first_failure {
            None => 0,
            Some((_, end)) => match end.code() {
                0 => 1,
                c => c,
            },
        }
    }

    /// One line describing the failure, if any.
    pub fn summary(&self) -> Option<String> {
        if let Some(sig) = self.interrupted {
            return Some(format!(
                "shmemrun: interrupted by {}; stopped all {} PEs",
                signal_name(sig),
                self.ends.len()
            ));
        }
        if self.timed_out && self.first_failure.is_none() {
            return Some(format!(
                "shmemrun: the job ran past its timeout; stopped all {} PEs",
                self.ends.len()
            ));
        }
        self.first_failure.map(|(pe, end)| {
            let others = self.ends.len().saturating_sub(1);
            format!("shmemrun: PE {pe} {end}; stopped the other {others} PE(s)")
        })
    }
}

static INTERRUPT: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPT.store(sig, Ordering::SeqCst);
}

fn install_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// A port for torch's `MASTER_PORT` whose successor (where a PE started by
/// torchrun-style variables alone puts the shmem store) is free too.
fn master_port(avoid: u16) -> Result<u16> {
    for _ in 0..64 {
        let l = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::os("finding a free port", e))?;
        let p = l
            .local_addr()
            .map_err(|e| Error::os("getsockname", e))?
            .port();
        if p == u16::MAX || p + 1 == avoid {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return Ok(p);
        }
    }
    Err(Error::Bootstrap(
        "found no two free adjacent ports for MASTER_PORT".into(),
    ))
}

fn forward_lines(
    src: impl Read + Send + 'static,
    pe: PeId,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let mut out = format!("[PE {pe}] ").into_bytes();
                    out.extend_from_slice(&line);
                    if !out.ends_with(b"\n") {
                        out.push(b'\n');
                    }
                    if to_stderr {
                        let _ = std::io::stderr().lock().write_all(&out);
                    } else {
                        let _ = std::io::stdout().lock().write_all(&out);
                    }
                }
            }
        }
    })
}

fn signal_group(child: &Child, sig: i32) {
    // SAFETY: kill on the child's own process group (set with setpgid).
    unsafe {
        libc::kill(-(child.id() as i32), sig);
    }
}

/// The CPUs this process may run on.
fn allowed_cpu_list() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

fn allowed_cpus() -> usize {
    allowed_cpu_list().len().max(1)
}

/// The cores this process may run on, one per PE, when there are at least
/// as many as PEs; empty otherwise (no binding).
fn cpu_binding(n: usize) -> Vec<usize> {
    let allowed = allowed_cpu_list();
    if allowed.len() < n {
        return Vec::new();
    }
    allowed.into_iter().take(n).collect()
}

/// How long node 0's launcher waits for other nodes' PEs, after its own
/// have ended, before it says that it keeps the job's store open for them.
const NOTE_WAITING_AFTER: Duration = Duration::from_secs(10);

/// How long the launcher waits for the PE the store saw fail first to end,
/// once another PE's failure has been reaped, before stopping the job.
const BLAME_GRACE: Duration = Duration::from_secs(2);

/// Starts the job and waits for it. Errors only when the job could not be
/// started; a failing PE is reported in the [`JobReport`].
///
/// # Errors
/// [`Error::InvalidArgument`] for 0 or more than 4096 PEs, a node rank outside
/// `0..nnodes`, or a job of several nodes without a usable master address and port;
/// [`Error::Malformed`] for a `SHMEM_JOB_SECRET` that is not hex; [`Error::Os`] when
/// the store cannot bind, no random secret or free port can be had, or a PE cannot be
/// started (the PEs already started are killed).
pub fn launch(opts: &LaunchOptions) -> Result<JobReport> {
    let n = opts.n_pes;
    if n == 0 {
        return Err(Error::invalid("-n", "the number of PEs must be at least 1"));
    }
    if n > 4096 {
        return Err(Error::invalid(
            "-n",
            format!("{n} PEs on one machine is more than this launcher supports (4096)"),
        ));
    }
    if opts.nnodes == 0 || opts.node_rank >= opts.nnodes {
        return Err(Error::invalid(
            "--node-rank",
            format!(
                "{} is out of range for {} node(s)",
                opts.node_rank, opts.nnodes
            ),
        ));
    }
    let world = n
        .checked_mul(opts.nnodes)
        .ok_or_else(|| Error::invalid("--nnodes", "too many PEs"))?;
    let first = opts.node_rank * n;
    // Where the store lives, whether this launcher hosts it, the job secret,
    // and the address torch gets as MASTER_ADDR:MASTER_PORT.
    let (store, store_addr, external, secret, torch_master) =
        if let Some(addr) = opts.store_on_rank0 {
            (None, addr, false, ids::new_secret()?, addr)
        } else if opts.nnodes > 1 {
            let m = opts.master.ok_or_else(|| {
                Error::invalid(
                    "--master-addr",
                    "a job of several nodes needs node 0's address",
                )
            })?;
            let port = m.port().checked_add(1).ok_or_else(|| {
                Error::invalid("--master-port", "no port above it for the shmem store")
            })?;
            let addr = SocketAddr::new(m.ip(), port);
            let secret = match std::env::var(env::JOB_SECRET) {
                Ok(hex) if !hex.trim().is_empty() => ids::from_hex(&hex)?,
                _ => ids::derived_secret(&format!("shmemrun|{addr}|{world}")),
            };
            let store = if opts.node_rank == 0 {
                let bind = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
                Some(StoreServer::bind(
                    if m.is_ipv6() { addr } else { bind },
                    Some(world),
                    secret.clone(),
                )?)
            } else {
                None
            };
            (store, addr, true, secret, m)
        } else {
            let secret = ids::new_secret()?;
            let store = StoreServer::bind(
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
                Some(n),
                secret.clone(),
            )?;
            let addr = store.addr();
            let mp = master_port(addr.port())?;
            (
                Some(store),
                addr,
                true,
                secret,
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), mp),
            )
        };
    install_handlers();

    // One core per PE when they fit (as MPI launchers bind by default):
    // otherwise the scheduler may stack two communicating PEs on one core,
    // where every hand-over costs a time slice.
    let bind = if opts.bind {
        cpu_binding(n)
    } else {
        Vec::new()
    };
    let cpu_list = allowed_cpu_list()
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut children: Vec<Option<Child>> = Vec::with_capacity(n);
    let mut groups: Vec<i32> = Vec::with_capacity(n);
    let mut forwarders = Vec::new();
    for pe in 0..n {
        let rank = first + pe;
        let mut cmd = match opts.prefix.get(pe).filter(|p| !p.is_empty()) {
            Some(prefix) => {
                let mut c = Command::new(&prefix[0]);
                c.args(&prefix[1..]).arg(&opts.program);
                c
            }
            None => Command::new(&opts.program),
        };
        cmd.args(&opts.args)
            .env(env::RANK, rank.to_string())
            .env(env::NRANKS, world.to_string())
            .env(env::STORE_ADDR, store_addr.to_string())
            .env(env::STORE_EXTERNAL, if external { "1" } else { "0" })
            .env(env::JOB_SECRET, ids::to_hex(&secret))
            .env(env::TORCH_RANK, rank.to_string())
            .env(env::TORCH_WORLD_SIZE, world.to_string())
            .env(env::TORCH_LOCAL_RANK, pe.to_string())
            .env(env::TORCH_LOCAL_WORLD_SIZE, n.to_string())
            .env(env::TORCH_MASTER_ADDR, torch_master.ip().to_string())
            .env(env::TORCH_MASTER_PORT, torch_master.port().to_string());
        if let Some(e) = &opts.engine {
            cmd.env(env::TEST_ENGINE, e);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        if opts.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        if !bind.is_empty() {
            // Bound to one core, a PE sees one CPU: tell it how many the
            // node's PEs share, so that its waits spin rather than yield.
            cmd.env("SHMEM_NODE_CORES", allowed_cpus().to_string());
        }
        let cpu = bind.get(pe).copied();
        if let Some(c) = cpu {
            // Other launchers of the job may bind their PEs to the same
            // cores on this machine: the PE moves at init once it knows
            // (shmem_core::placement).
            cmd.env("SHMEM_BOUND_CPUS", format!("{c}/{cpu_list}"));
        }
        // SAFETY: only async-signal-safe calls (plain system calls) between
        // fork and exec; the cpu set is built on the stack.
        unsafe {
            cmd.pre_exec(move || {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(c) = cpu {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(c, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                groups.push(child.id() as i32);
                if let Some(o) = child.stdout.take() {
                    forwarders.push(forward_lines(o, pe, false));
                }
                if let Some(e) = child.stderr.take() {
                    forwarders.push(forward_lines(e, pe, true));
                }
                children.push(Some(child));
            }
            Err(e) => {
                for c in children.iter_mut().flatten() {
                    signal_group(c, libc::SIGKILL);
                    let _ = c.wait();
                }
                return Err(Error::os(
                    format!("starting PE {pe} ({})", opts.program.to_string_lossy()),
                    e,
                ));
            }
        }
    }

    let mut ends: Vec<Option<PeEnd>> = vec![None; n];
    let mut first_failure = None;
    // (PE to blame, the failed PE reaped first, until when to wait for the former).
    let mut blame: Option<(usize, (usize, PeEnd), Instant)> = None;
    let mut interrupted = None;
    let mut kill_at: Option<Instant> = None;
    // After a global_exit: when the other PEs get SIGTERM if still running.
    let mut term_at: Option<Instant> = None;
    let mut timed_out = false;
    let deadline = opts.timeout.map(|t| Instant::now() + t);
    loop {
        if let Some(d) = deadline {
            if !timed_out && Instant::now() >= d {
                timed_out = true;
                for c in children.iter().flatten() {
                    signal_group(c, libc::SIGTERM);
                }
                kill_at = Some(Instant::now() + opts.kill_grace);
            }
        }
        let sig = INTERRUPT.swap(0, Ordering::SeqCst);
        if sig != 0 && interrupted.is_none() {
            interrupted = Some(sig);
            for c in children.iter().flatten() {
                signal_group(c, libc::SIGINT);
            }
            kill_at = Some(Instant::now() + opts.kill_grace);
        }
        let mut failed_now = Vec::new();
        let mut progressed = false;
        for pe in 0..n {
            let Some(child) = children[pe].as_mut() else {
                continue;
            };
            let end = match child.try_wait() {
                Ok(Some(status)) => PeEnd::from_status(status),
                Ok(None) => continue,
                Err(_) => PeEnd::Exited(-1),
            };
            ends[pe] = Some(end);
            children[pe] = None;
            progressed = true;
            if !end.ok() {
                failed_now.push((pe, end));
            }
        }
        if first_failure.is_none() && interrupted.is_none() && !timed_out {
            // Within one poll, a PE killed by a signal is the likelier cause:
            // the others typically exit with an error reporting its death.
            failed_now.sort_by_key(|&(pe, end)| (matches!(end, PeEnd::Exited(_)), pe));
            if blame.is_none() {
                if let Some(&reaped) = failed_now.first() {
                    // The store saw the failures in the order they happened
                    // (a PE's abort or its connection closing); the reap
                    // order is only the order this loop polls in.
                    let culprit = store
                        .as_ref()
                        .and_then(|s| s.first_failure())
                        .and_then(|(rank, _)| rank.checked_sub(first))
                        .filter(|&pe| pe < n);
                    blame = Some((
                        culprit.unwrap_or(reaped.0),
                        reaped,
                        Instant::now() + BLAME_GRACE,
                    ));
                }
            }
            // Wait (briefly) for the culprit to end before stopping the
            // rest, so that its own exit status is the one reported.
            let decided = blame.and_then(|(pe, reaped, until)| match ends[pe] {
                Some(end) if !end.ok() => Some((pe, end)),
                Some(_) => Some(reaped),
                None if Instant::now() >= until => Some(reaped),
                None => None,
            });
            if let Some((pe, end)) = decided {
                first_failure = Some((first + pe, end));
                // A PE that ended the job (global_exit) told every other PE
                // through the store; they exit with its status on their
                // own, so they get the grace period before SIGTERM.
                let aborted = store
                    .as_ref()
                    .and_then(|s| s.first_failure())
                    .is_some_and(|(_, what)| what.starts_with("ended the job"));
                if let Some(s) = &store {
                    s.report_exit(first + pe, &format!("it {end}"));
                }
                if aborted {
                    term_at = Some(Instant::now() + opts.kill_grace);
                } else {
                    for c in children.iter().flatten() {
                        signal_group(c, libc::SIGTERM);
                    }
                    kill_at = Some(Instant::now() + opts.kill_grace);
                }
            }
        }
        if children.iter().all(|c| c.is_none()) {
            break;
        }
        if let Some(t) = term_at {
            if Instant::now() >= t {
                term_at = None;
                for c in children.iter().flatten() {
                    signal_group(c, libc::SIGTERM);
                }
                kill_at = Some(Instant::now() + opts.kill_grace);
            }
        }
        if let Some(t) = kill_at {
            if Instant::now() >= t {
                for c in children.iter().flatten() {
                    signal_group(c, libc::SIGKILL);
                }
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Anything a PE left running in its process group (a background child
    // holding our output pipe, say) goes with the job.
    for &g in &groups {
        // SAFETY: kill on a process group this launcher created.
        unsafe {
            libc::kill(-g, libc::SIGKILL);
        }
    }
    for f in forwarders {
        let _ = f.join();
    }
    if let Some(s) = &store {
        if opts.nnodes > 1 && first_failure.is_none() && interrupted.is_none() && !timed_out {
            // The store is the whole job's: this node's PEs can be done
            // while another node's are still on their way out (finalize's
            // last barrier releases every PE at once, and one here may exit
            // before one there has even read that barrier's reply) or still
            // running. Closing it now would end their job under them.
            let limit = deadline
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|| {
                    shmem_core::Config::from_env()
                        .map_or(Duration::from_secs(600), |c| c.bootstrap_timeout)
                });
            let started = Instant::now();
            let until = started + limit;
            let ranks = |r: &[usize]| {
                r.iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut told = false;
            let still =
                loop {
                    let slice = until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(100));
                    let still = s.wait_members_gone(slice);
                    if still.is_empty()
                        || Instant::now() >= until
                        || INTERRUPT.load(Ordering::SeqCst) != 0
                    {
                        break still;
                    }
                    if !told && started.elapsed() >= NOTE_WAITING_AFTER {
                        told = true;
                        eprintln!(
                        "shmemrun: this node's PEs are done; the job's config store stays open \
                         while PE(s) {} of other nodes are connected to it (for at most {:.0} s \
                         more)",
                        ranks(&still),
                        until.saturating_duration_since(Instant::now()).as_secs_f64()
                    );
                    }
                };
            if !still.is_empty() {
                eprintln!(
                    "shmemrun: this node's PEs are done, but PE(s) {} of other nodes are still \
                     connected to the job's config store after {:.0} s; closing it ends their job",
                    ranks(&still),
                    limit.as_secs_f64()
                );
            }
        }
    }
    drop(store);
    Ok(JobReport {
        ends: ends
            .into_iter()
            .map(|e| e.unwrap_or(PeEnd::Exited(-1)))
            .collect(),
        first_failure,
        interrupted,
        timed_out,
    })
}

/// Removes `--pes N` / `--pes=N` from `args`; returns N if present.
///
/// # Errors
/// [`Error::InvalidArgument`] when `--pes` has no value, or one that is not a number of
/// at least 1.
pub fn take_pes_arg(args: &mut Vec<OsString>) -> Result<Option<usize>> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy().into_owned();
        let val = if a == "--pes" {
            if i + 1 >= args.len() {
                return Err(Error::invalid("--pes", "needs a number"));
            }
            let v = args[i + 1].to_string_lossy().into_owned();
            args.drain(i..i + 2);
            v
        } else if let Some(v) = a.strip_prefix("--pes=") {
            let v = v.to_string();
            args.remove(i);
            v
        } else {
            i += 1;
            continue;
        };
        let n: usize = val
            .parse()
            .map_err(|_| Error::invalid("--pes", format!("{val:?} is not a number")))?;
        if n == 0 {
            return Err(Error::invalid("--pes", "must be at least 1"));
        }
        return Ok(Some(n));
    }
    Ok(None)
}

/// For programs that start their own PEs: if this process is not a PE yet
/// (no `SHMEM_RANK`) and was given `--pes N`, runs N copies of itself with
/// the other arguments and returns the job's exit code (after printing the
/// failure line, if any). Returns `None` in a PE, where the program goes on.
pub fn launch_self_if_requested() -> Option<i32> {
    if std::env::var_os(env::RANK).is_some() {
        return None;
    }
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let n = match take_pes_arg(&mut args) {
        Ok(Some(n)) => n,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("{e}");
            return Some(2);
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot find this program to start its PEs: {e}");
            return Some(1);
        }
    };
    let mut opts = LaunchOptions::new(n, exe);
    opts.args = args;
    match launch(&opts) {
        Ok(report) => {
            if let Some(line) = report.summary() {
                eprintln!("{line}");
            }
            Some(report.exit_code())
        }
        Err(e) => {
            eprintln!("shmemrun: {e}");
            Some(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pes_argument_is_removed() {
        let mut a: Vec<OsString> = ["x", "--pes", "4", "y"].iter().map(Into::into).collect();
        assert_eq!(take_pes_arg(&mut a).unwrap(), Some(4));
        assert_eq!(
            a,
            ["x", "y"].iter().map(Into::into).collect::<Vec<OsString>>()
        );
        let mut b: Vec<OsString> = ["--pes=8"].iter().map(Into::into).collect();
        assert_eq!(take_pes_arg(&mut b).unwrap(), Some(8));
        assert!(b.is_empty());
        let mut c: Vec<OsString> = ["--pes", "zero"].iter().map(Into::into).collect();
        assert!(take_pes_arg(&mut c).is_err());
        let mut d: Vec<OsString> = ["--pes"].iter().map(Into::into).collect();
        assert!(take_pes_arg(&mut d).is_err());
    }

    #[test]
    fn failing_pe_is_named_and_others_stopped() {
        let mut o = LaunchOptions::new(3, "sh");
        o.args = ["-c", "test \"$RANK\" = 1 && exit 7; sleep 60"]
            .iter()
            .map(Into::into)
            .collect();
        let t = Instant::now();
        let r = launch(&o).unwrap();
        assert!(t.elapsed() < Duration::from_secs(20));
        assert_eq!(r.first_failure, Some((1, PeEnd::Exited(7))));
        assert_eq!(r.exit_code(), 7);
        assert!(r.summary().unwrap().contains("PE 1 exited with code 7"));
        assert_eq!(r.ends[0], PeEnd::Signaled(libc::SIGTERM));
    }

    #[test]
    fn environment_reaches_every_pe() {
        let mut o = LaunchOptions::new(2, "sh");
        o.args = ["-c", "test \"$SHMEM_RANK\" = \"$RANK\" && test \"$WORLD_SIZE\" = 2 && test -n \"$SHMEM_JOB_SECRET\" && test \"$SHMEM_TEST_ENGINE\" = HCCS"]
            .iter().map(Into::into).collect();
        o.engine = Some("HCCS".into());
        let r = launch(&o).unwrap();
        assert!(r.success(), "{r:?}");
    }

    #[test]
    fn missing_program_is_an_error() {
        let o = LaunchOptions::new(2, "/nonexistent/program");
        assert!(launch(&o)
            .unwrap_err()
            .to_string()
            .contains("starting PE 0"));
        assert!(launch(&LaunchOptions::new(0, "true")).is_err());
    }
}
