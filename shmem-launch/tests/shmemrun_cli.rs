//! The `shmemrun` binary end to end.

use std::process::Command;
use std::time::{Duration, Instant};

fn shmemrun() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shmemrun"))
}

#[test]
fn failing_pe_is_named_with_its_exit_code() {
    let t = Instant::now();
    let out = shmemrun()
        .args([
            "-n",
            "3",
            "sh",
            "-c",
            "test \"$RANK\" = 1 && exit 7; sleep 60",
        ])
        .output()
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(out.status.code(), Some(7));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PE 1 exited with code 7"), "{err}");
}

#[test]
fn killed_pe_is_named_with_its_signal() {
    let out = shmemrun()
        .args([
            "-n",
            "2",
            "sh",
            "-c",
            "test \"$RANK\" = 0 && kill -9 $$; sleep 60",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(137));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PE 0 was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
}

#[test]
fn tagged_output_and_success() {
    let out = shmemrun()
        .args(["-n", "2", "--tag-output", "sh", "-c", "echo hello $RANK"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("[PE 0] hello 0") && s.contains("[PE 1] hello 1"),
        "{s}"
    );
}

#[test]
fn timeout_stops_a_hung_job() {
    let out = shmemrun()
        .args(["-n", "2", "--timeout", "0.5", "sleep", "60"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124));
}

#[test]
fn bad_usage_is_explained() {
    let out = shmemrun().args(["-n", "x", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a number"));
    let out = shmemrun().args(["true"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing -n"));
}

#[test]
fn ctrl_c_is_forwarded_and_the_job_stops() {
    let mut child = shmemrun().args(["-n", "2", "sleep", "60"]).spawn().unwrap();
    // Wait until the launcher has started both PEs (its children in /proc).
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let t = Instant::now();
    while std::fs::read_to_string(&children).map_or(0, |c| c.split_whitespace().count()) < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "shmemrun did not start its PEs"
        );
        std::thread::yield_now();
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "shmemrun did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
}

#[test]
fn a_background_child_holding_the_output_does_not_hang_the_launcher() {
    let t = Instant::now();
    let out = shmemrun()
        .args([
            "-n",
            "2",
            "--tag-output",
            "sh",
            "-c",
            "sleep 30 & echo started",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
}
