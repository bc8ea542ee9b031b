//! PEs on several "hosts": network namespaces joined through a bridge, so
//! each host is a different node and peers on other hosts are reached with
//! the RoCE engine, same-host peers with HCCS. Every suite runs under each
//! RoCE provider: the software verbs provider and libfabric over its
//! `tcp;ofi_rxm` and `sockets` providers, and `net` where libfabric has it
//! (when libfabric is installed; CI installs it and fails without it). Needs root and iproute2 (CI runs as
//! root and installs it); elsewhere the tests say why they did not run.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use shmem_tests::{launch, LaunchOptions, PeEnd};

const PE: &str = env!("CARGO_BIN_EXE_shmem-test-pe");

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Namespaces `<tag>-h0..` with `10.<a>.<b>.(i+1)/24` on a bridge in `<tag>-sw`;
/// deleted on drop.
struct Hosts {
    tag: String,
    n: usize,
    subnet: (u8, u8),
}

impl Hosts {
    fn new(n: usize) -> Result<Hosts, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        // Tests run in parallel threads: each set of hosts gets its own
        // names and subnet.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let pid = std::process::id();
        let tag = format!("shm{}x{k}", pid % 100000);
        let subnet = (200 + (pid % 50) as u8, ((pid / 50 + k * 7) % 250) as u8);
        let hosts = Hosts { tag, n, subnet };
        let sw = hosts.switch();
        // Leftovers of a run that was killed before its cleanup.
        for i in 0..n {
            let _ = ip(&["netns", "del", &hosts.host(i)]);
        }
        let _ = ip(&["netns", "del", &sw]);
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let h = hosts.host(i);
            ip(&["netns", "add", &h])?;
            let (a, b) = (format!("{}v{i}", hosts.tag), format!("{}p{i}", hosts.tag));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "netns", &h])?;
            ip(&["link", "set", &b, "netns", &sw])?;
            ip(&["-n", &sw, "link", "set", &b, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &b, "up"])?;
            ip(&[
                "-n",
                &h,
                "addr",
                "add",
                &format!("{}/24", hosts.addr(i)),
                "dev",
                &a,
            ])?;
            ip(&["-n", &h, "link", "set", &a, "up"])?;
            ip(&["-n", &h, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }
    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }
    fn host(&self, i: usize) -> String {
        format!("{}-h{i}", self.tag)
    }
    fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet.0, self.subnet.1, i as u8 + 1)
    }
    /// Launch options for `per_host` PEs on each host running `scenario`.
    fn job(&self, per_host: usize, scenario: &str, env: &[(&str, &str)]) -> LaunchOptions {
        let mut o = self.job_of(std::path::Path::new(PE), per_host, env);
        o.args = vec![scenario.into()];
        o
    }
    /// Launch options for `per_host` PEs of `program` on each host.
    fn job_of(
        &self,
        program: &std::path::Path,
        per_host: usize,
        env: &[(&str, &str)],
    ) -> LaunchOptions {
        let n = self.n * per_host;
        let mut o = LaunchOptions::new(n, program);
        o.prefix = (0..n)
            .map(|pe| {
                ["ip", "netns", "exec", &self.host(pe / per_host)]
                    .iter()
                    .map(OsString::from)
                    .collect()
            })
            .collect();
        let port = 20000 + (std::process::id() % 20000) as u16;
        o.store_on_rank0 = Some(SocketAddr::new(IpAddr::V4(self.addr(0)), port));
        o.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        o.timeout = Some(Duration::from_secs(90));
        o.tag_output = true;
        o
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for i in 0..self.n {
            let _ = ip(&["netns", "del", &self.host(i)]);
        }
        let _ = ip(&["netns", "del", &self.switch()]);
    }
}

fn hosts_or_skip(n: usize) -> Option<Hosts> {
    match Hosts::new(n) {
        Ok(h) => Some(h),
        Err(why) => {
            eprintln!("multi-host test not run: cannot create network namespaces ({why})");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the multi-host tests: {why}"
            );
            None
        }
    }
}

/// The RoCE providers every multi-host test runs under, as environments.
fn providers() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    let mut v = vec![("sw", vec![("SHMEM_ROCE_PROVIDER", "sw")])];
    match shmem_transport_roce::ofi::probe(None) {
        Ok(_) => {
            for fi in shmem_tests::ofi_test_providers() {
                v.push((
                    match fi {
                        "tcp" => "ofi/tcp",
                        "sockets" => "ofi/sockets",
                        _ => "ofi/net",
                    },
                    vec![
                        ("SHMEM_ROCE_PROVIDER", "ofi"),
                        ("FI_PROVIDER", fi),
                        // sockets' progress threads spin 10 ms by default.
                        ("FI_SOCKETS_PE_WAITTIME", "0"),
                    ],
                ));
            }
        }
        Err(why) => {
            eprintln!("libfabric variants of the multi-host tests not run: {why}");
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the libfabric variants (install libfabric1): {why}"
            );
        }
    }
    v
}

/// `base` followed by `extra`.
fn with<'a>(base: &[(&'a str, &'a str)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(extra).copied().collect()
}

fn run_ok(o: &LaunchOptions, what: &str) {
    let r = launch(o).expect("start");
    assert!(r.success(), "{what}: {:?} {:?}", r.summary(), r.ends);
}

#[test]
fn two_hosts_run_the_p2p_and_collectives_suites() {
    let Some(h) = hosts_or_skip(2) else { return };
    for (prov, env) in providers() {
        for scenario in [
            "bootstrap",
            "rma",
            "atomics",
            "signals",
            "waits",
            "bulk",
            "collectives",
        ] {
            run_ok(
                &h.job(2, scenario, &env),
                &format!("{scenario} on 2 hosts x 2 PEs, {prov}"),
            );
        }
        run_ok(
            &h.job(1, "signal_stress", &env),
            &format!("signal_stress on 2 hosts x 1 PE, {prov}"),
        );
        // The root of a small broadcast does not wait for the other host's
        // members: one PE per host (the two-PE exchange) and two (the
        // exchange between node leaders, with roots that lead and roots
        // that do not).
        for per_host in [1, 2] {
            run_ok(
                &h.job(per_host, "early_root", &env),
                &format!("early_root on 2 hosts x {per_host} PEs, {prov}"),
            );
        }
        // Waiters asleep across hosts, woken by plain puts alone (`waits`
        // ends with a put from the other host 50 ms late, into a waiter
        // asleep on its futex; a missed wake-up fails the wait: the poll is
        // longer than its timeout), and writes that must not wake a PE
        // asleep on other words.
        let asleep = with(
            &env,
            &[
                ("SHMEM_SPIN_US", "0"),
                ("SHMEM_WAIT_POLL", "30"),
                ("SHMEM_WAIT_TIMEOUT", "10"),
                ("RING_ROUNDS", "300"),
                ("SLEEPERS_ITERS", "1000"),
            ],
        );
        let mut sleepers = vec![(asleep.clone(), "")];
        if prov.starts_with("ofi") {
            // Writes followed by wake messages instead of carrying their
            // range as remote CQ data.
            sleepers.push((
                with(&asleep, &[("SHMEM_ROCE_OFI_REMOTE_DATA", "0")]),
                ", wake messages",
            ));
        }
        // Fetch-adds on one counter from PEs on its node (CPU atomics) and
        // from the other host (atomic messages, or provider atomics), and
        // with atomic messages off; posted atomics ordered before the
        // fetching ones that follow.
        let stress = with(&env, &[("STRESS_OPS", "500")]);
        let mut amos = vec![(stress.clone(), "")];
        if prov == "ofi/tcp" {
            amos.push((
                with(&stress, &[("SHMEM_ROCE_OFI_AMO_MSG", "0")]),
                ", atomic messages off",
            ));
        }
        for (env, how) in &amos {
            for scenario in ["fetch_add_stress", "atomics", "amo_order"] {
                run_ok(
                    &h.job(2, scenario, env),
                    &format!("{scenario} on 2 hosts x 2 PEs, {prov}{how}"),
                );
            }
        }
        for (env, how) in &sleepers {
            for scenario in ["flag_ring", "waits", "quiet_sleepers"] {
                run_ok(
                    &h.job(1, scenario, env),
                    &format!("{scenario} on 2 hosts x 1 PE, {prov}{how}"),
                );
            }
        }
        if prov == "ofi/tcp" {
            // Signals as provider atomics (data as ordered byte atomics or
            // writes first) instead of one message applied by the target.
            let atomics = with(&env, &[("SHMEM_ROCE_OFI_SIGNAL_MSG", "0")]);
            for scenario in ["signals", "signal_stress"] {
                run_ok(
                    &h.job(2, scenario, &atomics),
                    &format!("{scenario} on 2 hosts x 2 PEs, {prov}, signal messages off"),
                );
            }
        }
        run_ok(
            &h.job(
                2,
                "collectives",
                &with(&env, &[("SHMEM_TEST_ENGINE", "ROCE")]),
            ),
            &format!("collectives, ROCE forced, {prov}"),
        );
    }
}

#[test]
fn three_hosts_run_the_suites() {
    let Some(h) = hosts_or_skip(3) else { return };
    for (prov, env) in providers() {
        for scenario in ["rma", "atomics", "signals", "collectives", "streams"] {
            run_ok(
                &h.job(1, scenario, &env),
                &format!("{scenario} on 3 hosts, {prov}"),
            );
        }
        run_ok(
            &h.job(2, "collectives", &env),
            &format!("collectives on 3 hosts x 2 PEs, {prov}"),
        );
        // One PE per host: every PE leads its node, and the three exchange
        // all-to-all; the root of a small broadcast does not wait.
        run_ok(
            &h.job(1, "early_root", &env),
            &format!("early_root on 3 hosts, {prov}"),
        );
        run_ok(
            &h.job(2, "early_root", &env),
            &format!("early_root on 3 hosts x 2 PEs, {prov}"),
        );
        // Fewer leaders allowed all-to-all than there are nodes: the
        // leaders disseminate (and nothing rides on their exchange), and a
        // team with one PE per node runs the flat handshake.
        let disseminate = with(&env, &[("SHMEM_NODE_LEADERS_ALLTOALL", "2")]);
        for per_host in [1, 2] {
            run_ok(
                &h.job(per_host, "collectives", &disseminate),
                &format!("collectives on 3 hosts x {per_host} PEs, leaders disseminating, {prov}"),
            );
        }
    }
}

#[test]
fn cut_link_is_reported_naming_the_peer() {
    let Some(h) = hosts_or_skip(2) else { return };
    for (prov, env) in providers() {
        // PE 1 (host 1) takes its own link down once everyone is waiting.
        let mut o = h.job(1, "link_cut", &with(&env, &[("SHMEM_LINK_TIMEOUT", "3")]));
        o.kill_grace = Duration::from_secs(20);
        let t = Instant::now();
        let r = launch(&o).expect("start");
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{prov}: took {:?}",
            t.elapsed()
        );
        assert_eq!(
            r.ends[0],
            PeEnd::Exited(3),
            "{prov}: PE 0 must report PE 1 as gone: {r:?}"
        );
        assert!(!r.success());
        // The cut host's link comes back for the next provider's run.
        let dev = format!("{}v1", h.tag);
        let _ = ip(&["-n", &h.host(1), "link", "set", &dev, "up"]);
    }
}

#[test]
fn killed_remote_pe_is_reported() {
    let Some(h) = hosts_or_skip(2) else { return };
    for (prov, env) in providers() {
        let mut o = h.job(2, "kill_in_wait", &env);
        o.kill_grace = Duration::from_secs(10);
        let r = launch(&o).expect("start");
        assert_eq!(
            r.first_failure,
            Some((1, PeEnd::Signaled(libc::SIGKILL))),
            "{prov}: {r:?}"
        );
        for pe in [0, 2, 3] {
            assert_eq!(r.ends[pe], PeEnd::Exited(3), "{prov}, PE {pe}: {r:?}");
        }
    }
}

/// Puts, atomics and signals across hosts keep failing with an error that
/// names the dead peer, under every provider (the PE is killed while the
/// others keep operating on it).
#[test]
fn rma_to_a_killed_remote_pe_fails_naming_it() {
    let Some(h) = hosts_or_skip(2) else { return };
    for (prov, env) in providers() {
        let mut o = h.job(
            1,
            "rma_to_dead",
            &with(&env, &[("SHMEM_TEST_ENGINE", "ROCE")]),
        );
        o.kill_grace = Duration::from_secs(20);
        let r = launch(&o).expect("start");
        assert_eq!(r.ends[1], PeEnd::Signaled(libc::SIGKILL), "{prov}: {r:?}");
        assert_eq!(r.ends[0], PeEnd::Exited(3), "{prov}: {r:?}");
    }
}

/// C programs (through `libshmem`, built with `oshcc`) across hosts, under
/// every provider, two PEs per host (HCCS within a host, ROCE between
/// them): put/get at 1 B..1 MiB, atomics from every PE and put-with-signal
/// on the symmetric heap (`plugin.c`); RMA on global and static data, which
/// a peer on another host reaches with the RoCE engine's reads and writes
/// (the owner exposed it at init), and a wait on static data that a put
/// from another host ends (`rma.c`); atomics from every PE on the heap and
/// on static data, which PEs on another host update through the RoCE
/// engine as the owner's CPU atomics where it can (`amo.c`); the
/// deprecated collectives on active sets with `pSync` in
/// static data (`active_sets.c`).
#[test]
fn a_c_program_runs_across_hosts_under_every_provider() {
    let Some(h) = hosts_or_skip(2) else { return };
    let libdir = std::path::Path::new(PE)
        .parent()
        .expect("target dir")
        .to_path_buf();
    if !libdir.join("libshmem.so").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "libshmem.so is not built next to {PE}"
        );
        eprintln!("not run: build libshmem first (scripts/test-all.sh does)");
        return;
    }
    let capi = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shmem-capi");
    for program in ["plugin", "rma", "amo", "active_sets"] {
        let exe = libdir.join(format!("multihost-c-{program}"));
        let out = Command::new(capi.join("bin/oshcc"))
            .env("SHMEM_LIBDIR", &libdir)
            .args(["-std=c11", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(capi.join(format!("tests/c/{program}.c")))
            .output()
            .expect("run oshcc");
        assert!(
            out.status.success(),
            "oshcc {program}.c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (prov, env) in providers() {
            run_ok(
                &h.job_of(&exe, 2, &env),
                &format!("C program {program}.c on 2 hosts x 2 PEs, {prov}"),
            );
        }
    }
}

/// `shmemrun` next to the test PE, or None (and why) when it is not built;
/// CI builds it.
fn shmemrun_or_skip() -> Option<std::path::PathBuf> {
    let shmemrun = std::path::Path::new(PE).with_file_name("shmemrun");
    if shmemrun.exists() {
        return Some(shmemrun);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "shmemrun is not built next to {PE}"
    );
    eprintln!("not run: build shmemrun first (scripts/test-all.sh does)");
    None
}

/// The documented two-machine recipe: one `shmemrun` per host with
/// `--nnodes/--node-rank/--master-addr`, node 0's launcher hosting the store.
#[test]
fn shmemrun_per_node_starts_one_job_across_hosts() {
    let Some(h) = hosts_or_skip(2) else { return };
    let Some(shmemrun) = shmemrun_or_skip() else {
        return;
    };
    let master = h.addr(0).to_string();
    let port = (30000 + std::process::id() % 20000).to_string();
    let mut nodes: Vec<std::process::Child> = (0..2)
        .map(|node| {
            Command::new("ip")
                .args(["netns", "exec", &h.host(node)])
                .arg(&shmemrun)
                .args(["-n", "2", "--nnodes", "2", "--node-rank", &node.to_string()])
                .args([
                    "--master-addr",
                    &master,
                    "--master-port",
                    &port,
                    "--timeout",
                    "60",
                ])
                .args([PE, "collectives"])
                .spawn()
                .expect("start shmemrun")
        })
        .collect();
    let t = Instant::now();
    let mut codes = vec![None; 2];
    while codes.iter().any(|c| c.is_none()) {
        for (i, n) in nodes.iter_mut().enumerate() {
            if codes[i].is_none() {
                codes[i] = n.try_wait().expect("wait").map(|s| s.code());
            }
        }
        if t.elapsed() > Duration::from_secs(90) {
            for n in &mut nodes {
                let _ = n.kill();
            }
            panic!("the two launchers did not finish: {codes:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(codes, vec![Some(Some(0)), Some(Some(0))]);
}

/// A port `p` of this machine's own network namespace such that `p` and
/// `p + 1` (where `shmemrun --master-port p` puts the job's store) are free
/// now, below the kernel's range of ephemeral ports (32768 and up here),
/// which the other tests' connections draw from while they run beside
/// this one: a port picked in that range was once taken by one of them.
fn free_port_pair(salt: usize) -> u16 {
    let start = std::process::id() as usize * 7 + salt * 101;
    (0..400)
        .map(|i| (20000 + (start + i * 2) % 12000) as u16)
        .find(|&p| {
            let a = std::net::TcpListener::bind(("0.0.0.0", p));
            let b = std::net::TcpListener::bind(("0.0.0.0", p + 1));
            a.is_ok() && b.is_ok()
        })
        .expect("a free pair of ports between 20000 and 32000")
}

/// Two launchers of one job on the same machine (no namespaces needed)
/// each bind their PEs to their first cores; the PEs move at init so that
/// no two share a core while they fit, and run on every core when not.
#[test]
fn launchers_sharing_a_machine_give_their_pes_cores_of_their_own() {
    let Some(shmemrun) = shmemrun_or_skip() else {
        return;
    };
    // SAFETY: sched_getaffinity fills the zeroed set we own.
    let allowed: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    };
    for per_launcher in [1usize, 2] {
        let port = free_port_pair(per_launcher).to_string();
        let nodes: Vec<std::process::Child> = (0..2)
            .map(|node| {
                Command::new(&shmemrun)
                    .env("SHMEM_BIND", "core")
                    .args(["-n", &per_launcher.to_string(), "--nnodes", "2"])
                    .args(["--node-rank", &node.to_string()])
                    .args(["--master-addr", "127.0.0.1", "--master-port", &port])
                    .args(["--timeout", "60", PE, "placement"])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("start shmemrun")
            })
            .collect();
        let mut cpus: Vec<(usize, Vec<usize>)> = Vec::new();
        for n in nodes {
            let out = n.wait_with_output().expect("wait for shmemrun");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "a launcher failed: {text}");
            for line in text.lines() {
                let Some(rest) = line.split("placement: PE ").nth(1) else {
                    continue;
                };
                let (pe, list) = rest.split_once(" cpus ").expect("placement line");
                let list = list
                    .trim()
                    .split(',')
                    .map(|c| c.parse().expect("cpu number"))
                    .collect();
                cpus.push((pe.parse().expect("PE number"), list));
            }
        }
        cpus.sort();
        let total = 2 * per_launcher;
        assert_eq!(cpus.len(), total, "one line per PE: {cpus:?}");
        if allowed.len() < per_launcher {
            // The launchers do not bind at all then.
            continue;
        }
        if total <= allowed.len() {
            let mut seen: Vec<usize> = cpus
                .iter()
                .map(|(pe, l)| {
                    assert_eq!(l.len(), 1, "PE {pe} is bound to one core: {cpus:?}");
                    l[0]
                })
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), total, "every PE on a core of its own: {cpus:?}");
        } else {
            for (pe, l) in &cpus {
                assert_eq!(l, &allowed, "PE {pe} runs on every core: {cpus:?}");
            }
        }
    }
}

/// Node 0's launcher hosts the job's store: once its own PEs have ended it
/// keeps the store open while another node's PEs are still connected (on
/// their way out of finalize, or still running), instead of ending their
/// job under them, for at most its `--timeout`. Here node 0's "PE" is a
/// program that never joins and exits after a second, and rank 1 is this
/// test, connected to the store until its join gives up.
#[test]
fn the_launcher_hosting_the_store_waits_for_the_other_nodes_pes() {
    // Until rank 1 leaves (after 3 s), well within the launcher's timeout.
    let (ended, left) = node0_with_rank1_connected(Duration::from_secs(60), Duration::from_secs(3));
    assert!(
        ended >= left.saturating_sub(Duration::from_millis(100)),
        "node 0's launcher ended after {ended:?}, before rank 1 left at {left:?}"
    );
    assert!(
        ended < left + Duration::from_secs(5),
        "node 0's launcher ended {ended:?} after it started, long after rank 1 left at {left:?}"
    );
    // Rank 1 stays longer (6 s) than the launcher's timeout (3 s): the
    // launcher stops waiting then.
    let (ended, left) = node0_with_rank1_connected(Duration::from_secs(3), Duration::from_secs(6));
    assert!(
        ended >= Duration::from_millis(2900) && ended < Duration::from_secs(5),
        "node 0's launcher ended after {ended:?} (timeout 3 s; rank 1 left at {left:?})"
    );
}

/// Runs node 0 of a two-node job (one PE: `sleep 1`, which never joins)
/// with launcher timeout `timeout`, while rank 1 (this thread) stays
/// connected to the store for `stay` waiting for rank 0; returns when the
/// launcher ended and when rank 1 left, from the start.
fn node0_with_rank1_connected(timeout: Duration, stay: Duration) -> (Duration, Duration) {
    let port = free_port_pair(3);
    let master = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    let store = SocketAddr::new(master.ip(), port + 1);
    let secret = shmem_bootstrap::ids::derived_secret(&format!("shmemrun|{store}|2"));
    let mut o = LaunchOptions::new(1, "sleep");
    o.args = vec!["1".into()];
    o.nnodes = 2;
    o.master = Some(master);
    o.timeout = Some(timeout);
    o.bind = false;
    let start = Instant::now();
    let node0 = std::thread::spawn(move || {
        let report = launch(&o).expect("node 0's launcher starts");
        (report, start.elapsed())
    });
    // Rank 1 connects (retrying until the store is up) and waits for rank
    // 0, which never comes: it gives up after `stay` and its connection
    // closes (or the store closes it first).
    let joined = shmem_bootstrap::TcpBootstrap::join(
        shmem_bootstrap::JoinParams {
            rank: 1,
            nranks: 2,
            store_addr: store,
            secret,
            init_timeout: stay,
            call_timeout: Duration::from_secs(10),
            link_timeout: Duration::from_secs(5),
        },
        None,
    );
    let left = start.elapsed();
    assert!(
        joined.is_err(),
        "rank 1 joined a job whose rank 0 never joins"
    );
    let (report, ended) = node0.join().unwrap();
    assert!(report.success(), "{report:?}");
    (ended, left)
}
