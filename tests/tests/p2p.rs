//! Point-to-point API and bootstrap, as real multi-process jobs checked
//! against golden data (each PE verifies and exits non-zero on a mismatch).

use shmem_tests::{assert_ok, run_job, shm_leftovers, PeEnd};

const PE: &str = env!("CARGO_BIN_EXE_shmem-test-pe");

fn at_sizes(scenario: &str, sizes: &[usize], env: &[(&str, &str)]) {
    for &n in sizes {
        let r = run_job(PE, n, &[scenario], env);
        assert_ok(&r, &format!("{scenario} at {n} PEs"));
    }
}

#[test]
fn bootstrap_collectives_at_1_2_3_4_8() {
    at_sizes("bootstrap", &[1, 2, 3, 4, 8], &[]);
}

#[test]
fn rma() {
    at_sizes("rma", &[1, 2, 3, 4, 8], &[]);
}

#[test]
fn rma_with_hccs_forced() {
    at_sizes("rma", &[2, 4], &[("SHMEM_TEST_ENGINE", "hccs")]);
}

#[test]
fn atomics() {
    at_sizes("atomics", &[1, 2, 3, 4, 8], &[]);
}

#[test]
fn fetch_add_stress_8_pes_exact_total() {
    at_sizes("fetch_add_stress", &[8], &[]);
    at_sizes("fetch_add_stress", &[2, 3], &[("STRESS_OPS", "20000")]);
}

#[test]
fn signals() {
    at_sizes("signals", &[1, 2, 3, 4, 8], &[]);
}

#[test]
fn signal_stress() {
    at_sizes("signal_stress", &[2, 3, 4, 8], &[]);
}

#[test]
fn writes_never_wake_a_pe_sleeping_on_other_words() {
    at_sizes("quiet_sleepers", &[2, 4], &[]);
    at_sizes("quiet_sleepers", &[2], &[("SHMEM_TEST_ENGINE", "sdma")]);
}

/// Sleeping waiters and plain puts, with the writers' fence left to the
/// waiters' membarrier, with it off everywhere, and mixed in one job (odd
/// PEs opt out); a missed wake-up fails the wait (the poll is longer than
/// the wait timeout). Also the other point-to-point suites with it off.
#[test]
fn sleeping_waiters_see_every_plain_put_with_and_without_membarrier() {
    let ring = |extra: &[(&str, &str)], sizes: &[usize]| {
        let mut env = vec![
            ("SHMEM_SPIN_US", "0"),
            ("SHMEM_WAIT_POLL", "60"),
            ("SHMEM_WAIT_TIMEOUT", "20"),
        ];
        env.extend_from_slice(extra);
        at_sizes("flag_ring", sizes, &env);
    };
    ring(&[], &[2, 3]);
    ring(&[("SHMEM_WAIT_MEMBARRIER", "0")], &[2, 3]);
    ring(&[("TEST_MEMBARRIER_ODD_OFF", "1")], &[2, 3]);
    ring(&[("SHMEM_TEST_ENGINE", "sdma")], &[2]);
    let off = [("SHMEM_WAIT_MEMBARRIER", "0")];
    for scenario in ["signal_stress", "waits", "quiet_sleepers"] {
        at_sizes(scenario, &[2, 4], &off);
    }
}

#[test]
fn waits() {
    at_sizes("waits", &[1, 2, 3, 4, 8], &[]);
}

#[test]
fn alloc() {
    at_sizes("alloc", &[1, 2, 3, 4, 8], &[("SHMEM_SYMMETRIC_SIZE", "8M")]);
}

#[test]
fn bad_input_is_an_error() {
    at_sizes("errors", &[1, 2, 4], &[]);
}

#[test]
fn killed_pe_in_barrier_is_named_within_2s() {
    for n in [3, 4] {
        let mut o = shmem_tests::LaunchOptions::new(n, PE);
        o.args = vec!["kill_in_barrier".into()];
        o.timeout = Some(shmem_tests::JOB_TIMEOUT);
        o.kill_grace = std::time::Duration::from_secs(10);
        let r = shmem_tests::launch(&o).unwrap();
        assert_eq!(
            r.first_failure,
            Some((1, PeEnd::Signaled(libc::SIGKILL))),
            "{r:?}"
        );
        for (pe, end) in r.ends.iter().enumerate() {
            if pe != 1 {
                assert_eq!(
                    *end,
                    PeEnd::Exited(3),
                    "PE {pe} did not report PE 1's death in time: {r:?}"
                );
            }
        }
        assert!(r.summary().unwrap().contains("PE 1 was killed by signal 9"));
    }
}

#[test]
fn killed_pe_during_signal_wait_is_named_within_2s() {
    let mut o = shmem_tests::LaunchOptions::new(2, PE);
    o.args = vec!["kill_in_wait".into()];
    o.timeout = Some(shmem_tests::JOB_TIMEOUT);
    o.kill_grace = std::time::Duration::from_secs(10);
    let r = shmem_tests::launch(&o).unwrap();
    assert_eq!(
        r.ends,
        vec![PeEnd::Exited(3), PeEnd::Signaled(libc::SIGKILL)],
        "{r:?}"
    );
}

#[test]
fn rma_to_a_killed_pe_fails_naming_it_on_every_engine() {
    for engine in ["HCCS", "SDMA", "ROCE"] {
        for n in [2, 4] {
            let mut o = shmem_tests::LaunchOptions::new(n, PE);
            o.args = vec!["rma_to_dead".into()];
            o.env = vec![("SHMEM_TEST_ENGINE".into(), engine.into())];
            o.timeout = Some(shmem_tests::JOB_TIMEOUT);
            o.kill_grace = std::time::Duration::from_secs(20);
            let r = shmem_tests::launch(&o).unwrap();
            for (pe, end) in r.ends.iter().enumerate() {
                let want = if pe == 1 {
                    PeEnd::Signaled(libc::SIGKILL)
                } else {
                    PeEnd::Exited(3)
                };
                assert_eq!(*end, want, "{engine} at {n} PEs, PE {pe}: {r:?}");
            }
        }
    }
}

#[test]
fn freed_handles_and_views_are_refused() {
    at_sizes("stale_handles", &[1, 2, 4], &[]);
}

/// Runs `hang_mismatch` on `n` PEs with `env`; the job's report and the
/// PEs' stderr.
fn hang_job(n: usize, env: &[(&str, &str)], name: &str) -> (shmem_tests::JobReport, String) {
    hang_job_of("hang_mismatch", n, env, name)
}

/// Runs `scenario` on `n` PEs with `env`; the job's report and the PEs'
/// stderr.
fn hang_job_of(
    scenario: &str,
    n: usize,
    env: &[(&str, &str)],
    name: &str,
) -> (shmem_tests::JobReport, String) {
    let log =
        std::env::temp_dir().join(format!("shmem-hang-{name}-{n}-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut env: Vec<(&str, &str)> = env.to_vec();
    let path = log.to_string_lossy().into_owned();
    env.push(("HANG_LOG", &path));
    let r = run_job(PE, n, &[scenario], &env);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (r, text)
}

#[test]
fn a_collective_mismatch_is_reported_as_a_hang_table_and_can_end_the_job() {
    for n in [2, 4] {
        let (r, text) = hang_job(
            n,
            &[("SHMEM_HANG_REPORT", "1"), ("SHMEM_HANG_ABORT", "1")],
            "abort",
        );
        assert!(!r.success() && !r.timed_out, "{r:?}\n{text}");
        assert_eq!(text.matches("shmem: hang report").count(), 1, "{text}");
        let others = (1..n).map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
        let others = if n == 2 {
            "PE 1 is".to_string()
        } else {
            format!("PEs {others} are")
        };
        let want = "the PEs diverged (collective mismatch): PE 0 is in malloc #";
        assert!(text.contains(want), "want {want:?} in:\n{text}");
        let want = format!("; {others} in barrier #");
        assert!(text.contains(&want), "want {want:?} in:\n{text}");
        assert!(text.contains("(team WORLD)"), "{text}");
        // Each PE's row names the line of the test program that made the call.
        assert!(
            text.contains("called at tests/src/bin/shmem-test-pe.rs:"),
            "{text}"
        );
        assert!(
            text.contains("ending the job (SHMEM_HANG_ABORT=1)"),
            "{text}"
        );
        assert_eq!(r.exit_code(), 1, "{r:?}");
    }
}

#[test]
fn a_broadcast_root_waiting_for_its_members_is_reported_in_that_broadcast() {
    // Over the ROCE engine the two PEs do not map each other: the root of
    // a small broadcast returns at once, and its next call waits for what
    // it skipped.
    let (r, text) = hang_job_of(
        "hang_early_root",
        2,
        &[
            ("SHMEM_TEST_ENGINE", "ROCE"),
            ("SHMEM_HANG_REPORT", "1"),
            ("SHMEM_HANG_ABORT", "1"),
        ],
        "early-root",
    );
    assert!(!r.success() && !r.timed_out, "{r:?}\n{text}");
    assert_eq!(text.matches("shmem: hang report").count(), 1, "{text}");
    // Call 1 is the first barrier, call 2 the broadcast.
    let want = "PE 0 is in end of broadcast #2 (team WORLD)";
    assert!(text.contains(want), "want {want:?} in:\n{text}");
    assert!(text.contains("PE 1 is in wait_until"), "{text}");
}

#[test]
fn without_hang_abort_the_report_is_printed_once_and_the_job_waits_on() {
    // The waits end by their own timeouts after the report.
    let (r, text) = hang_job(
        2,
        &[
            ("SHMEM_HANG_REPORT", "1"),
            ("SHMEM_WAIT_TIMEOUT", "4"),
            ("SHMEM_BOOTSTRAP_TIMEOUT", "4"),
        ],
        "wait",
    );
    assert!(!r.success() && !r.timed_out, "{r:?}\n{text}");
    assert_eq!(text.matches("shmem: hang report").count(), 1, "{text}");
    assert!(text.contains("PE 0 is in malloc #"), "{text}");
    assert!(text.contains("; PE 1 is in barrier #"), "{text}");
    assert!(text.contains("the job goes on waiting"), "{text}");
    assert!(text.contains("timed out"), "{text}");
}

#[test]
fn a_stopped_pe_is_named_by_every_other_pe_within_the_timeouts() {
    // PE 1 may stop halfway through answering a get over ROCE: the reply's
    // header has arrived and its data never does (this hung PE 0 in about
    // half of the CI runs until the sw watchdog counted owed data as busy).
    // ROCE runs under its default provider (libfabric where installed) and
    // under the software provider.
    for (engine, provider, sizes) in [
        ("HCCS", "auto", &[2, 4][..]),
        ("SDMA", "auto", &[2, 4]),
        ("ROCE", "auto", &[2, 4]),
        ("ROCE", "sw", &[2, 4]),
    ] {
        for &n in sizes {
            let mut o = shmem_tests::LaunchOptions::new(n, PE);
            o.args = vec!["stop_in_barrier".into()];
            o.env = [
                ("SHMEM_TEST_ENGINE", engine),
                ("SHMEM_ROCE_PROVIDER", provider),
                ("SHMEM_HANG_REPORT", "1"),
                ("SHMEM_WAIT_TIMEOUT", "6"),
                ("SHMEM_LINK_TIMEOUT", "4"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            o.timeout = Some(shmem_tests::JOB_TIMEOUT);
            // Each survivor reports by itself (they ignore SIGTERM); on a
            // loaded machine they can be seconds apart (each ROCE queue pair
            // runs its own link timeout), so the launcher's kill waits well
            // past SHMEM_LINK_TIMEOUT before it could hide a late report.
            o.kill_grace = std::time::Duration::from_secs(15);
            let r = shmem_tests::launch(&o).unwrap();
            assert!(!r.timed_out, "{engine}/{provider} at {n} PEs: {r:?}");
            for (pe, end) in r.ends.iter().enumerate() {
                if pe == 1 {
                    assert!(
                        matches!(end, PeEnd::Signaled(_)),
                        "{engine}/{provider} {n}: {r:?}"
                    );
                } else {
                    assert_eq!(
                        *end,
                        PeEnd::Exited(3),
                        "{engine}/{provider} at {n} PEs, PE {pe}: {r:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn unknown_engine_lists_the_linked_ones() {
    let r = run_job(PE, 2, &["rma"], &[("SHMEM_TEST_ENGINE", "NOPE")]);
    assert!(!r.success());
    assert!(
        matches!(r.first_failure, Some((_, PeEnd::Exited(1)))),
        "{r:?}"
    );
}

#[test]
fn bad_heap_size_is_an_error() {
    for bad in ["lots", "100T"] {
        let r = run_job(PE, 2, &["rma"], &[("SHMEM_SYMMETRIC_SIZE", bad)]);
        assert!(
            matches!(r.first_failure, Some((_, PeEnd::Exited(1)))),
            "{bad}: {r:?}"
        );
    }
}

#[test]
fn nothing_left_in_dev_shm() {
    let r = run_job(PE, 4, &["rma"], &[]);
    assert_ok(&r, "rma");
    assert!(shm_leftovers().is_empty(), "{:?}", shm_leftovers());
}

#[test]
fn torchrun_variables_alone_start_a_job() {
    // Blank the shmemrun variables: only RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT remain,
    // so rank 0 hosts the store on MASTER_PORT+1.
    let env = [
        ("SHMEM_RANK", ""),
        ("SHMEM_NRANKS", ""),
        ("SHMEM_STORE_ADDR", ""),
        ("SHMEM_JOB_SECRET", ""),
        ("SHMEM_STORE_EXTERNAL", ""),
    ];
    at_sizes("bootstrap", &[1, 3], &env);
}

#[test]
fn whole_p2p_suite_with_sdma_forced() {
    let sdma = [("SHMEM_TEST_ENGINE", "SDMA")];
    for scenario in [
        "bootstrap",
        "rma",
        "atomics",
        "signals",
        "signal_stress",
        "waits",
        "alloc",
        "errors",
        "bulk",
    ] {
        at_sizes(scenario, &[2, 3, 4, 8], &sdma);
    }
    at_sizes("fetch_add_stress", &[8], &sdma);
}

#[test]
fn bulk_copies_through_the_default_routes() {
    at_sizes("bulk", &[1, 2, 3, 4], &[]);
}

#[test]
fn streams_order_errors_and_events() {
    at_sizes("streams", &[1, 2, 3, 4, 8], &[]);
    at_sizes("streams", &[2, 4], &[("SHMEM_TEST_ENGINE", "SDMA")]);
}

#[test]
fn handles_wait_and_await() {
    at_sizes("handles", &[1, 2, 4], &[]);
    at_sizes("handles", &[2], &[("SHMEM_TEST_ENGINE", "SDMA")]);
}

#[test]
fn two_instances_of_different_sizes() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let range = format!("{port}:{}", port + 3);
    at_sizes(
        "instances",
        &[2, 3],
        &[("SHMEM_INSTANCE_PORT_RANGE", &range)],
    );
}

#[test]
fn collectives_as_processes_under_every_engine() {
    at_sizes("collectives", &[1, 2, 3, 4, 5, 8], &[]);
    at_sizes(
        "collectives",
        &[2, 3, 4, 8],
        &[("SHMEM_TEST_ENGINE", "SDMA")],
    );
    at_sizes("collectives", &[2, 3], &[("SHMEM_TEST_ENGINE", "ROCE")]);
    let forced = [
        ("SHMEM_BARRIER_ALGORITHM", "linear"),
        ("SHMEM_BROADCAST_ALGORITHM", "binomial"),
        ("SHMEM_FCOLLECT_ALGORITHM", "ring"),
        ("SHMEM_COLLECT_ALGORITHM", "ring"),
        ("SHMEM_ALLTOALL_ALGORITHM", "pairwise"),
        ("SHMEM_REDUCE_ALGORITHM", "ring"),
        ("SHMEM_SCAN_ALGORITHM", "recursive_doubling"),
    ];
    at_sizes("collectives", &[3, 5], &forced);
}

#[test]
fn whole_p2p_suite_with_roce_forced() {
    // The default provider (libfabric where installed) and the software one.
    for provider in ["auto", "sw"] {
        whole_p2p_suite_with_roce_provider(provider);
    }
}

fn whole_p2p_suite_with_roce_provider(provider: &str) {
    let roce = [
        ("SHMEM_TEST_ENGINE", "ROCE"),
        ("SHMEM_ROCE_PROVIDER", provider),
        ("STRESS_OPS", "2000"),
    ];
    for scenario in [
        "rma",
        "atomics",
        "signals",
        "signal_stress",
        "waits",
        "alloc",
        "errors",
        "bulk",
        "streams",
        "handles",
        "fetch_add_stress",
    ] {
        at_sizes(scenario, &[2, 3], &roce);
    }
    at_sizes("rma", &[8], &roce);
}

#[test]
fn shmem_info_prints_the_effective_table() {
    let out = std::process::Command::new(PE)
        .arg("bootstrap")
        .env("SHMEM_INFO", "1")
        .env("SHMEM_SYMMETRIC_SIZE", "32M")
        .env_remove("SHMEM_RANK")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for var in shmem::VARIABLES {
        assert!(err.contains(var.name), "{} missing from:\n{err}", var.name);
    }
    // Engines declare their own variables; they are listed too.
    let declared = shmem_core::config::declared_variables();
    assert!(declared.iter().any(|v| v.name == "SHMEM_ROCE_PROVIDER"));
    assert!(declared.iter().any(|v| v.name == "SHMEM_SDMA_ENGINES"));
    for var in declared {
        assert!(err.contains(var.name), "{} missing from:\n{err}", var.name);
    }
    assert!(
        err.contains("SHMEM_SYMMETRIC_SIZE") && err.contains("32M"),
        "{err}"
    );
    assert!(err.contains("routes:"), "{err}");
}

#[test]
fn a_program_started_without_a_launcher_is_a_single_pe_job() {
    let out = std::process::Command::new(PE)
        .arg("alloc")
        .env_remove("SHMEM_RANK")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn global_exit_ends_every_pe_with_its_status() {
    for n in [2, 4] {
        let r = run_job(PE, n, &["global_exit"], &[]);
        assert!(r.ends.iter().all(|e| *e == PeEnd::Exited(5)), "{r:?}");
    }
}

/// `SHMEM_ROCE_PROVIDER=ofi` with a libfabric provider that does not exist
/// fails init with a message naming the engine and what was asked for
/// (or, without libfabric, saying that it is missing).
#[test]
fn ofi_with_a_bogus_fi_provider_fails_init_clearly() {
    let out = std::process::Command::new(PE)
        .arg("bootstrap")
        .env("SHMEM_TEST_ENGINE", "ROCE")
        .env("SHMEM_ROCE_PROVIDER", "ofi")
        .env("FI_PROVIDER", "no_such_provider")
        .env_remove("SHMEM_RANK")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SHMEM_ROCE_PROVIDER=ofi"), "{err}");
    assert!(
        err.contains("FI_PROVIDER=no_such_provider") || err.contains("libfabric not found"),
        "{err}"
    );
}

/// The libfabric provider over `tcp;ofi_rxm` and `sockets` on one host
/// (ROCE forced for every peer): the point-to-point suite and collectives.
#[test]
fn p2p_suite_over_libfabric_tcp_and_sockets() {
    if let Err(why) = shmem_transport_roce::ofi::probe(None) {
        eprintln!("not run: {why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the libfabric tests: {why}"
        );
        return;
    }
    for fi in shmem_tests::ofi_test_providers() {
        // The sockets provider's progress threads spin 10 ms by default,
        // which starves 3 PEs on a 2-core machine.
        let env = [
            ("SHMEM_TEST_ENGINE", "ROCE"),
            ("SHMEM_ROCE_PROVIDER", "ofi"),
            ("FI_PROVIDER", fi),
            ("FI_SOCKETS_PE_WAITTIME", "0"),
            ("STRESS_OPS", "2000"),
        ];
        for scenario in [
            "rma",
            "atomics",
            "signals",
            "signal_stress",
            "waits",
            "bulk",
            "handles",
            "fetch_add_stress",
            "collectives",
        ] {
            at_sizes(scenario, &[2, 3], &env);
        }
        // Every local buffer registered, as providers with FI_MR_LOCAL
        // (verbs) require: bounce and receive buffers, atomic operands,
        // get destinations outside the heap.
        let mut local = env.to_vec();
        local.push(("SHMEM_ROCE_OFI_MR_LOCAL", "1"));
        for scenario in ["rma", "atomics", "signals", "bulk", "collectives"] {
            at_sizes(scenario, &[2], &local);
        }
        // Every blocking put through a bounce buffer, and every one beyond
        // an inject straight from its source (default: from 256 KiB).
        for direct in ["0", "1"] {
            let mut e = env.to_vec();
            e.push(("SHMEM_ROCE_OFI_DIRECT_PUT", direct));
            for scenario in ["rma", "bulk"] {
                at_sizes(scenario, &[2], &e);
            }
        }
        // Transfers in the smallest pieces (a 4 MiB put is a thousand
        // writes) and in pieces as large as the provider allows (default:
        // 128 KiB on manual-progress providers). Not the smallest over
        // `sockets`, which stalls with hundreds of writes in flight each
        // way (and gets provider-sized pieces by default).
        let pieces: &[&str] = if fi == "sockets" {
            &["128K"]
        } else {
            &["4K", "0"]
        };
        for &piece in pieces {
            let mut e = env.to_vec();
            e.push(("SHMEM_ROCE_OFI_CHUNK", piece));
            for scenario in ["rma", "bulk", "signals"] {
                at_sizes(scenario, &[2], &e);
            }
        }
    }
}

/// `auto` with no usable libfabric provider (a bogus `FI_PROVIDER`) falls
/// back to the software provider and says why at INFO level; `ofi` with a
/// real one shows the provider, fabric, domain and MR mode in `SHMEM_INFO`.
#[test]
fn auto_falls_back_to_sw_and_info_names_the_libfabric_provider() {
    let run = |env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(PE);
        c.arg("rma")
            .env("SHMEM_TEST_ENGINE", "ROCE")
            .env("SHMEM_LOG_LEVEL", "info")
            .env_remove("SHMEM_RANK");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{env:?}: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[("SHMEM_ROCE_PROVIDER", "auto"), ("FI_PROVIDER", "bogus")]);
    assert!(err.contains("using the sw provider"), "{err}");
    assert!(
        err.contains("FI_PROVIDER=bogus") || err.contains("libfabric not found"),
        "{err}"
    );
    if let Err(why) = shmem_transport_roce::ofi::probe(None) {
        eprintln!("ofi half not run: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI installs libfabric");
        return;
    }
    for fi in shmem_tests::ofi_test_providers() {
        let err = run(&[
            ("SHMEM_ROCE_PROVIDER", "ofi"),
            ("FI_PROVIDER", fi),
            ("SHMEM_INFO", "1"),
        ]);
        let line = err
            .lines()
            .find(|l| l.contains("shmem ROCE engine: libfabric provider"))
            .unwrap_or_else(|| panic!("no provider line in:\n{err}"));
        assert!(line.contains(fi), "{line}");
        for what in ["fabric ", "domain ", "MR mode ", "progress"] {
            assert!(line.contains(what), "{what} missing: {line}");
        }
    }
}

/// The libfabric providers listed here, or `None` (the test is skipped,
/// saying why) where libfabric cannot be loaded, which CI never allows.
fn ofi_provider_names_or_skip() -> Option<Vec<String>> {
    match shmem_transport_roce::ofi::provider_names() {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("not run: {why}");
            assert!(std::env::var_os("CI").is_none(), "CI installs libfabric");
            None
        }
    }
}

/// Runs the `atomics` scenario on one PE over the libfabric engine with
/// `env` (and `SHMEM_INFO=1`), bounded like every job of the tests
/// (coreutils' timeout).
fn one_ofi_pe(env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new("timeout");
    c.arg(shmem_tests::JOB_TIMEOUT.as_secs().to_string())
        .arg(PE)
        .arg("atomics")
        .env("SHMEM_TEST_ENGINE", "ROCE")
        .env("SHMEM_ROCE_PROVIDER", "ofi")
        .env("SHMEM_INFO", "1")
        .env_remove("FI_PROVIDER")
        .env_remove("SHMEM_RANK");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A piece size that is not a size fails set-up naming the variable and
/// the value; `auto` is the default and `0` one piece per transfer.
#[test]
fn ofi_piece_size_is_checked() {
    if ofi_provider_names_or_skip().is_none() {
        return;
    }
    let out = one_ofi_pe(&[("FI_PROVIDER", "tcp"), ("SHMEM_ROCE_OFI_CHUNK", "lots")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ran with a bad piece size: {err}");
    assert!(
        err.contains("SHMEM_ROCE_OFI_CHUNK") && err.contains("\"lots\" is not a size"),
        "{err}"
    );
    for (piece, shown) in [("auto", "pieces of 131072 B"), ("0", "pieces of 4194304 B")] {
        let out = one_ofi_pe(&[("FI_PROVIDER", "tcp"), ("SHMEM_ROCE_OFI_CHUNK", piece)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{piece}: {err}");
        assert!(err.contains(shown), "{piece}: {err}");
    }
}

/// libfabric's own TCP RDM endpoint (`net` in 1.17) has no atomics, so
/// every atomic and signal travels as a message the target applies: with
/// atomic messages forbidden, set-up fails saying so, and otherwise
/// `SHMEM_INFO` says signals are messages.
#[test]
fn ofi_provider_without_atomics_uses_messages_or_says_why() {
    let Some(names) = ofi_provider_names_or_skip() else {
        return;
    };
    if !names.iter().any(|n| n == "net") {
        eprintln!("not run: this libfabric has no `net` provider ({names:?})");
        return;
    }
    let out = one_ofi_pe(&[("FI_PROVIDER", "net"), ("SHMEM_ROCE_OFI_AMO_MSG", "0")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ran without atomics: {err}");
    assert!(
        err.contains("provider net has no 32- and 64-bit compare-and-swap")
            && err.contains("SHMEM_ROCE_OFI_AMO_MSG=0 forbids"),
        "{err}"
    );
    let out = one_ofi_pe(&[("FI_PROVIDER", "net")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("shmem ROCE engine: libfabric provider"))
        .unwrap_or_else(|| panic!("no provider line in:\n{err}"));
    assert!(line.contains("provider net,"), "{line}");
    assert!(line.contains("signals as messages"), "{line}");
}

/// Runs `scenario` on two PEs over the libfabric engine with `env`, each
/// PE started by `/bin/sh -c "{prelude}exec PE scenario"` with its stderr
/// appended to a file; returns the job's report and that stderr.
fn two_ofi_pes_stderr(
    tag: &str,
    prelude: &str,
    scenario: &str,
    env: &[(&str, &str)],
) -> (shmem_tests::JobReport, String) {
    let file = std::env::temp_dir().join(format!("shmem-{tag}-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let script = format!("{prelude}exec \"$0\" {scenario} 2>>'{}'", file.display());
    let mut o = shmem_tests::LaunchOptions::new(2, "/bin/sh");
    o.args = vec!["-c".into(), script.into(), PE.into()];
    o.env = [
        ("SHMEM_TEST_ENGINE", "ROCE"),
        ("SHMEM_ROCE_PROVIDER", "ofi"),
    ]
    .iter()
    .chain(env)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    o.timeout = Some(shmem_tests::JOB_TIMEOUT);
    let r = shmem_tests::launch(&o).unwrap();
    let err = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    (r, err)
}

/// The libfabric engine's progress thread learns at run time whether
/// `fi_trywait` re-arms its completion queue's wait descriptor: it does over
/// `tcp;ofi_rxm` (the thread then blocks on it; from libfabric 1.18 `tcp` is
/// the TCP RDM endpoint, which starts distrusted and turns trusted), and it
/// does not over libfabric 1.17's `net` (the thread naps and blocks in
/// `fi_cq_sread`, or it would poll without end). Both PEs say so in the
/// log; the opposite verdict fails the test.
#[test]
fn ofi_progress_thread_learns_whether_the_wait_descriptor_rearms() {
    let Some(names) = ofi_provider_names_or_skip() else {
        return;
    };
    let mut cases = vec![("tcp", "fi_trywait re-arms", "stays readable")];
    if names.iter().any(|n| n == "net") {
        cases.push(("net", "stays readable", "fi_trywait re-arms"));
    }
    for (provider, expect, never) in cases {
        let (r, err) = two_ofi_pes_stderr(
            &format!("wait-fd-{provider}"),
            "",
            "idle_gaps",
            &[("FI_PROVIDER", provider), ("SHMEM_LOG_LEVEL", "info")],
        );
        assert!(r.success(), "{provider}: {:?}\n{err}", r.summary());
        let verdicts: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("wait descriptor"))
            .collect();
        for pe in 0..2 {
            assert!(
                verdicts
                    .iter()
                    .any(|l| l.contains(&format!("PE {pe}]")) && l.contains(expect)),
                "{provider}: PE {pe} did not say \"{expect}\":\n{err}"
            );
        }
        assert!(
            !verdicts.iter().any(|l| l.contains(never)),
            "{provider}: {verdicts:?}"
        );
    }
}

/// PEs that disagree on `SHMEM_ROCE_OFI_SIGNAL_MSG` (one sends signals as
/// messages its target applies, another as provider atomics, which are not
/// atomic with each other) fail at set-up, naming the variable.
#[test]
fn ofi_signal_message_setting_must_agree_across_pes() {
    if let Err(why) = shmem_transport_roce::ofi::probe(None) {
        eprintln!("not run: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI installs libfabric");
        return;
    }
    let (r, err) = two_ofi_pes_stderr(
        "signal-msg",
        "if [ \"$SHMEM_RANK\" = 1 ]; then export SHMEM_ROCE_OFI_SIGNAL_MSG=0; fi; ",
        "bootstrap",
        &[("FI_PROVIDER", "tcp")],
    );
    assert!(!r.success(), "the job ran with mixed settings: {err}");
    assert!(err.contains("SHMEM_ROCE_OFI_SIGNAL_MSG"), "{err}");
}
