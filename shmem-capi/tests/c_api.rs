//! Builds `libshmem_capi.so` and `shmemrun` (`cargo build -p shmem-capi
//! -p shmem-launch` in this test's profile: a plain `cargo test` builds only
//! the rlib), compiles the C programs in `tests/c` with `bin/oshcc` (once
//! per run) and runs each at 2 and 4 PEs with a hard timeout. A C test
//! checks its own results and exits non-zero naming the failed check; every
//! PE must exit with 0. `tests/compile/every_generic.c` instantiates every
//! generic for every type the specification lists, as C11 and as C++17.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use shmem_launch::{launch, JobReport, LaunchOptions, PeEnd};

const PROGRAMS: &[&str] = &[
    "setup",
    "rma",
    "amo",
    "signal_wait",
    "teams_ctx",
    "collectives",
    "locks",
    "legacy",
    "active_self",
    "errors",
    "longdouble_complex",
    "generics",
    "ctx_invalid",
    "collect_static",
    "active_sets",
    "test_any_fair",
    "info_name",
    "static_mapped",
    "no_finalize",
    "plugin",
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>`: the test binary lives in its `deps/`.
fn libdir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Runs `cargo build` for the C library and the launcher in this test's
/// profile (a no-op when they are fresh), once per test run.
fn build_library() -> &'static Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(crate_dir().join("..")).args([
            "build",
            "-p",
            "shmem-capi",
            "-p",
            "shmem-launch",
        ]);
        if libdir().ends_with("release") {
            cmd.arg("--release");
        }
        let o = cmd
            .output()
            .map_err(|e| format!("running cargo build: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "cargo build -p shmem-capi -p shmem-launch: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        if !libdir().join("libshmem_capi.so").exists() {
            return Err(format!(
                "{} has no libshmem_capi.so after cargo build",
                libdir().display()
            ));
        }
        Ok(())
    })
}

/// Compiles every program once; the directory holding them.
fn programs() -> &'static PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        build_library().clone()?;
        let lib = libdir();
        let out = lib.join("capi-tests");
        std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
        let oshcc = crate_dir().join("bin/oshcc");
        for p in PROGRAMS {
            let src = crate_dir().join("tests/c").join(format!("{p}.c"));
            let o = Command::new(&oshcc)
                .env("SHMEM_LIBDIR", &lib)
                .args(["-std=c11", "-Wall", "-Werror", "-O1", "-o"])
                .arg(out.join(p))
                .arg(&src)
                .output()
                .map_err(|e| format!("running {}: {e}", oshcc.display()))?;
            if !o.status.success() {
                return Err(format!(
                    "oshcc {}: {}",
                    src.display(),
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
        }
        // The generics test again as C++17, through the C++ generic names.
        let src = crate_dir().join("tests/c/generics.c");
        let o = Command::new(&oshcc)
            .env("SHMEM_LIBDIR", &lib)
            .env("OSHCC_CC", "g++")
            .args([
                "-std=c++17",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-O1",
                "-x",
                "c++",
                "-o",
            ])
            .arg(out.join("generics_cxx"))
            .arg(&src)
            .output()
            .map_err(|e| format!("running {}: {e}", oshcc.display()))?;
        if !o.status.success() {
            return Err(format!(
                "oshcc (g++) {}: {}",
                src.display(),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(out)
    });
    match built {
        Ok(p) => p,
        Err(e) => panic!("building the C tests failed: {e}"),
    }
}

fn run(program: &str, n_pes: usize, args: &[&str]) -> JobReport {
    let mut opts = LaunchOptions::new(n_pes, programs().join(program));
    opts.args = args.iter().map(OsString::from).collect();
    opts.timeout = Some(Duration::from_secs(90));
    opts.tag_output = true;
    launch(&opts).unwrap_or_else(|e| panic!("launching {program} on {n_pes} PEs: {e}"))
}

fn passes(program: &str) {
    for n in [2, 4] {
        let r = run(program, n, &[]);
        assert!(
            r.success(),
            "{program} on {n} PEs: {}",
            r.summary().unwrap_or_default()
        );
        assert!(
            r.ends.iter().all(|e| *e == PeEnd::Exited(0)),
            "{program}: {:?}",
            r.ends
        );
    }
}

#[test]
fn setup_and_memory() {
    passes("setup");
}

#[test]
fn rma_heap_and_static() {
    passes("rma");
}

#[test]
fn atomics_heap_and_static() {
    passes("amo");
}

#[test]
fn signals_waits_and_tests() {
    passes("signal_wait");
}

#[test]
fn teams_and_contexts() {
    passes("teams_ctx");
}

#[test]
fn collectives_team_and_active_set() {
    passes("collectives");
}

#[test]
fn active_sets_of_one_pe_and_alltoalls32() {
    passes("active_self");
}

#[test]
fn long_double_and_complex_reductions_pcontrol_generics() {
    passes("longdouble_complex");
}

#[test]
fn generic_bitwise_atomics_and_reductions() {
    passes("generics");
}

#[test]
fn generic_bitwise_atomics_and_reductions_from_cxx() {
    passes("generics_cxx");
}

#[test]
fn ctx_invalid_quiet_fence_destroy_are_no_ops() {
    passes("ctx_invalid");
}

#[test]
fn static_data_is_mapped_between_local_pes_or_reached_through_the_kernel() {
    passes("static_mapped");
    // A thread alive during shmem_init keeps the data private: same
    // results through process_vm_writev/readv and the AMO service.
    for n in [2, 4] {
        let r = run("static_mapped", n, &["threaded"]);
        assert!(
            r.success(),
            "threaded, {n} PEs: {}",
            r.summary().unwrap_or_default()
        );
    }
}

#[test]
fn returning_from_main_without_finalize_finalizes_at_exit() {
    passes("no_finalize");
}

#[test]
fn collect_from_static_data() {
    passes("collect_static");
}

#[test]
fn deprecated_collectives_on_any_active_set() {
    passes("active_sets");
}

#[test]
fn test_any_takes_turns() {
    passes("test_any_fair");
}

#[test]
fn info_get_name_is_the_vendor_string() {
    passes("info_name");
}

/// Compiles (and links) `tests/compile/NAME` with `compiler` and `flags`;
/// the compiler's messages on failure.
fn compile(compiler: &str, flags: &[&str], name: &str, out: &str) -> Result<(), String> {
    build_library().clone()?;
    let src = crate_dir().join("tests/compile").join(name);
    let o = Command::new(compiler)
        .args(flags)
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg("-o")
        .arg(libdir().join("capi-tests").join(out))
        .arg(&src)
        .arg(format!("-L{}", libdir().display()))
        .arg("-lshmem")
        .output()
        .map_err(|e| format!("running {compiler}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

#[test]
fn every_generic_for_every_spec_type_compiles_without_warnings() {
    programs(); // the library, the libshmem.so link and the output folder
    let c = ["-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror"];
    let cxx = [
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-pedantic",
        "-Werror",
        "-x",
        "c++",
    ];
    for (compiler, flags, out) in [("gcc", &c[..], "every_c"), ("g++", &cxx[..], "every_cxx")] {
        compile(compiler, flags, "every_generic.c", out)
            .unwrap_or_else(|e| panic!("{compiler} (generic names): {e}"));
        let typed: Vec<&str> = flags
            .iter()
            .copied()
            .chain(["-DEVERY_TYPED_NAME"])
            .collect();
        compile(compiler, &typed, "every_generic.c", &format!("{out}_typed"))
            .unwrap_or_else(|e| panic!("{compiler} (typed names): {e}"));
    }
}

#[test]
fn a_generic_call_on_a_type_outside_its_list_does_not_compile() {
    programs();
    let c = ["-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror"];
    let err = compile("gcc", &c, "unsupported_generic.c", "unsupported_c")
        .expect_err("a bitwise atomic on a double must not compile as C");
    assert!(err.contains("shmem_generic_unsupported_type"), "{err}");
    let cxx = [
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-pedantic",
        "-Werror",
        "-x",
        "c++",
    ];
    let err = compile("g++", &cxx, "unsupported_generic.c", "unsupported_cxx")
        .expect_err("a bitwise atomic on a double must not compile as C++");
    assert!(
        err.contains("shmem_atomic_and: not defined for this type"),
        "{err}"
    );
}

#[test]
fn locks() {
    passes("locks");
}

#[test]
fn legacy_names() {
    passes("legacy");
}

/// Runs `errors CASE FILE` on 2 PEs; the job's exit code and what the PEs
/// wrote on stderr.
fn failing(case: &str) -> (JobReport, String) {
    let file = libdir()
        .join("capi-tests")
        .join(format!("stderr-{case}.txt"));
    let _ = std::fs::remove_file(&file);
    let r = run("errors", 2, &[case, file.to_str().expect("utf-8 path")]);
    (r, std::fs::read_to_string(&file).unwrap_or_default())
}

/// No PE crashed or hung: the failing PE exited, and the others either
/// exited too or were stopped by the launcher (SIGTERM) after it failed.
fn exited_cleanly(r: &JobReport) {
    let first_exited = matches!(r.first_failure, None | Some((_, PeEnd::Exited(_))));
    let others_ok = r
        .ends
        .iter()
        .all(|e| matches!(e, PeEnd::Exited(_) | PeEnd::Signaled(libc::SIGTERM)));
    assert!(
        first_exited && others_ok && !r.timed_out,
        "a PE crashed or hung: {:?} (first failure {:?})",
        r.ends,
        r.first_failure
    );
}

#[test]
fn non_symmetric_address_ends_the_job_with_a_message() {
    let (r, err) = failing("not_symmetric");
    exited_cleanly(&r);
    assert_eq!(r.exit_code(), 1);
    assert!(
        err.contains("shmem_p") && err.contains("is not symmetric"),
        "{err}"
    );
}

#[test]
fn pe_out_of_range_ends_the_job_with_a_message() {
    let (r, err) = failing("bad_pe");
    exited_cleanly(&r);
    assert_eq!(r.exit_code(), 1);
    assert!(err.contains("PE 2 is out of range"), "{err}");
}

/// Runs `errors CASE FILE` on `n` PEs (see [`failing`]).
fn failing_on(case: &str, n: usize, round: usize) -> (JobReport, String) {
    let file = libdir()
        .join("capi-tests")
        .join(format!("stderr-{case}-{n}-{round}.txt"));
    let _ = std::fs::remove_file(&file);
    let r = run("errors", n, &[case, file.to_str().expect("utf-8 path")]);
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    (r, text)
}

#[test]
fn the_pe_that_made_the_bad_call_reports_it_once_and_is_the_one_named() {
    // PE 0 makes an undefined call while the others enter a barrier; the
    // others may die before or after PE 0 is reaped, so repeat.
    for round in 0..12 {
        let (r, err) = failing_on("bad_pe", 4, round);
        assert_eq!(
            r.first_failure,
            Some((0, PeEnd::Exited(1))),
            "round {round}: the launcher blamed the wrong PE: {:?}\n{err}",
            r.ends
        );
        let lines: Vec<&str> = err.lines().collect();
        // Every line is whole (one write each): it starts where a message
        // starts and holds one message.
        for l in &lines {
            assert!(
                l.starts_with("shmem: PE ") && l.matches("shmem: ").count() == 1,
                "round {round}: a cut or merged line {l:?} in:\n{err}"
            );
        }
        let reports: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains("PE 4 is out of range"))
            .collect();
        assert_eq!(reports.len(), 1, "round {round}: {err}");
        assert!(reports[0].starts_with("shmem: PE 0: shmem_"), "{err}");
        // The others say at most one short line each, pointing at PE 0.
        for pe in 1..4 {
            let mine: Vec<&&str> = lines
                .iter()
                .filter(|l| l.starts_with(&format!("shmem: PE {pe}:")))
                .collect();
            assert!(mine.len() <= 1, "round {round}, PE {pe}: {err}");
            if let Some(l) = mine.first() {
                assert!(l.contains("PE 0") && l.len() < 200, "{l}");
            }
        }
    }
}

#[test]
fn use_after_free_is_a_one_line_diagnostic_under_shmem_debug() {
    let file = libdir().join("capi-tests").join("stderr-uaf.txt");
    let _ = std::fs::remove_file(&file);
    let mut opts = LaunchOptions::new(2, programs().join("errors"));
    opts.args = ["use_after_free", file.to_str().expect("utf-8 path")]
        .iter()
        .map(OsString::from)
        .collect();
    opts.env = vec![("SHMEM_DEBUG".into(), "1".into())];
    opts.timeout = Some(Duration::from_secs(90));
    let r = launch(&opts).expect("launching errors");
    let err = std::fs::read_to_string(&file).unwrap_or_default();
    exited_cleanly(&r);
    assert_eq!(r.first_failure, Some((0, PeEnd::Exited(1))), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not inside a live allocation"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("shmem: PE 0: shmem_") && lines[0].contains("use after free"),
        "{err}"
    );
}

#[test]
fn collective_into_a_too_small_buffer_is_refused() {
    let (r, err) = failing("small_dest");
    exited_cleanly(&r);
    assert_eq!(r.exit_code(), 1);
    assert!(
        err.contains("shmem_collect32/64") && err.contains("dest of") && err.contains("contribute"),
        "{err}"
    );
}

#[test]
fn collective_on_an_active_set_without_the_caller_is_reported() {
    let (r, err) = failing("not_in_set");
    exited_cleanly(&r);
    assert_eq!(r.exit_code(), 1);
    assert!(
        err.contains("shmem_barrier")
            && err.contains("PE 0 called a collective on a set it is not in"),
        "{err}"
    );
    // One line from the PE that erred (the others may echo it as the abort reason).
    let own = err
        .lines()
        .filter(|l| l.starts_with("shmem: PE 0: shmem_barrier:"));
    assert_eq!(own.count(), 1, "{err}");
}

#[test]
fn global_exit_status_reaches_the_launcher() {
    let (r, _) = failing("global_exit");
    exited_cleanly(&r);
    assert_eq!(r.exit_code(), 7);
}

#[test]
fn call_before_init_is_reported() {
    let (r, err) = failing("before_init");
    exited_cleanly(&r);
    assert_eq!(r.exit_code(), 1);
    assert!(err.contains("called before shmem_init"), "{err}");
}

#[test]
fn oshrun_and_oshcc_scripts() {
    let dir = programs();
    // `oshcc --showme` names the include and library directories.
    let o = Command::new(crate_dir().join("bin/oshcc"))
        .env("SHMEM_LIBDIR", libdir())
        .args(["--showme", "x.c"])
        .output()
        .expect("oshcc --showme");
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(
        line.contains("-lshmem") && line.contains("include"),
        "{line}"
    );
    assert!(
        libdir().join("libshmem.so").exists(),
        "oshcc made the libshmem.so link"
    );

    // oshrun needs the shmemrun binary next to the library (built above).
    let shmemrun = libdir().join("shmemrun");
    assert!(shmemrun.exists(), "{} was built", shmemrun.display());
    let status = Command::new(crate_dir().join("bin/oshrun"))
        .env("SHMEMRUN", &shmemrun)
        .args(["-np", "2", "--timeout", "90"])
        .arg(dir.join("legacy"))
        .status()
        .expect("oshrun");
    assert!(status.success(), "oshrun -np 2 legacy: {status}");
}

#[test]
fn oshcc_picks_the_newer_build_and_names_a_debug_one() {
    // A scratch checkout layout: shmem-capi/bin/oshcc beside target/{debug,release}.
    let root = std::env::temp_dir().join(format!("oshcc-pick-{}", std::process::id()));
    let bin = root.join("shmem-capi/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(root.join("shmem-capi/include")).unwrap();
    std::fs::copy(crate_dir().join("bin/oshcc"), bin.join("oshcc")).unwrap();
    // A library of `profile` whose mtime is `age` seconds ago.
    let lib = |profile: &str, age: u64| {
        let d = root.join("target").join(profile);
        std::fs::create_dir_all(&d).unwrap();
        let f = std::fs::File::create(d.join("libshmem_capi.so")).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(age))
            .unwrap();
    };
    let showme = || {
        let o = Command::new("sh")
            .arg(bin.join("oshcc"))
            .env_remove("SHMEM_LIBDIR")
            .args(["--showme", "-o", "x", "x.c"])
            .output()
            .expect("oshcc --showme");
        assert!(o.status.success(), "{o:?}");
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    lib("release", 20);
    lib("debug", 10);
    let (line, note) = showme();
    assert!(line.contains("target/debug"), "{line}");
    assert!(note.contains("unoptimised debug build"), "{note}");
    lib("release", 0);
    let (line, note) = showme();
    assert!(line.contains("target/release"), "{line}");
    assert!(note.is_empty(), "{note}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Builds the example plugin engine (`examples/plugin-engine`) in this
/// test's profile; its `.so`.
fn plugin_engine() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(crate_dir().join(".."))
            .args(["build", "-p", "shmem-plugin-example"]);
        if libdir().ends_with("release") {
            cmd.arg("--release");
        }
        let o = cmd
            .output()
            .map_err(|e| format!("running cargo build: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "cargo build -p shmem-plugin-example: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(libdir().join("libshmem_plugin_example.so"))
    });
    match built {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// A C program through `libshmem` on an engine the library was not built
/// with: the plugin is loaded at init and forced for every peer.
#[test]
fn a_c_program_runs_on_a_run_time_plugin_engine() {
    let so = plugin_engine();
    for n in [2, 3] {
        let mut opts = LaunchOptions::new(n, programs().join("plugin"));
        opts.timeout = Some(Duration::from_secs(90));
        opts.tag_output = true;
        opts.env = vec![
            ("SHMEM_TRANSPORT_PLUGINS".into(), so.display().to_string()),
            ("SHMEM_TEST_ENGINE".into(), "MEMCPY".into()),
        ];
        let r = launch(&opts).unwrap_or_else(|e| panic!("launching plugin on {n} PEs: {e}"));
        assert!(
            r.success() && r.ends.iter().all(|e| *e == PeEnd::Exited(0)),
            "plugin.c on {n} PEs with the MEMCPY plugin: {} {:?}",
            r.summary().unwrap_or_default(),
            r.ends
        );
    }
    // Without the plugin the forced engine does not exist: the same run fails.
    let mut opts = LaunchOptions::new(2, programs().join("plugin"));
    opts.timeout = Some(Duration::from_secs(90));
    opts.env = vec![("SHMEM_TEST_ENGINE".into(), "MEMCPY".into())];
    let r = launch(&opts).expect("launching plugin without the plugin");
    assert!(
        !r.success(),
        "MEMCPY cannot be forced when no plugin provides it"
    );
}
