//! The `lanefs` commands with stdout or stderr a pipe nobody reads any
//! more (`lanefs bench … | head -1`, a supervisor gone): no panic, no
//! exit 101, nothing lost. A command whose output is its product
//! (`bench`, `stats`) finishes its work and then dies of SIGPIPE, as
//! coreutils do (status 141 in a shell); a daemon or a diagnostic
//! carries on. (`tests/image.rs::a_closed_pipe_is_no_panic`: mount, fsck
//! and mkfs, which keep their own status.) The real-mount parts need root
//! and /dev/fuse.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Output, Stdio};

use common::*;

/// Run `lanefs ARGS` with stdout a pipe nobody reads; stderr captured.
fn stdout_gone(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// Killed by SIGPIPE (as `seq 1 100000 | head -1` is), saying nothing.
fn assert_died_of_sigpipe(what: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {}", show(out));
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{what}: {}",
        show(out)
    );
    assert!(err.is_empty(), "{what}: {}", show(out));
}

/// The smallest measurement: one cell of one workload, one thread, 50 ms.
const TINY_BENCH: &[&str] = &[
    "-w",
    "MWCL",
    "--threads",
    "1",
    "--duration",
    "0.05s",
    "--runs",
    "1",
];

/// `lanefs bench` (a run, `--list`, `report`) and `lanefs --help` with
/// their reader gone: before, `print!` panicked ("failed printing to
/// stdout: Broken pipe", exit 101) — after the whole run, and before its
/// `--json` was written, so the measurement was lost too.
#[test]
fn bench_output_to_a_gone_reader() {
    let base = unique_dir("pipes-bench");
    let json = base.join("r.json");
    let mut args = vec!["bench", "-t", "inproc"];
    args.extend_from_slice(TINY_BENCH);
    args.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = stdout_gone(&args);
    assert_died_of_sigpipe("bench", &out);
    let results = std::fs::read_to_string(&json).expect("--json not written");
    assert!(results.contains("\"MWCL\""), "{results}");

    assert_died_of_sigpipe("bench --list", &stdout_gone(&["bench", "--list"]));
    assert_died_of_sigpipe(
        "bench report",
        &stdout_gone(&["bench", "report", json.to_str().unwrap()]),
    );
    // clap's help swallows the broken pipe itself: exit 0, quietly.
    let out = stdout_gone(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(out.stderr.is_empty(), "{}", show(&out));

    // An error still ends the command with its message and status 1.
    let out = stdout_gone(&["bench", "report", "/no/such/results.json"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/results.json"));

    // stdout closed (`>&-`, not a pipe): the runtime gives the process
    // /dev/null there; a normal success.
    let script = format!("exec {BIN} bench --list >&-");
    let out = run_timeout(30, Command::new("sh").args(["-c", &script]));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // And stderr a gone pipe: the error line is dropped, the status kept.
    let status = Command::new(BIN)
        .args(["bench", "report", "/no/such/results.json"])
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "{status}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// `lanefs stats MNT | head -0`, and a `lanefs bench` on a lanefs mount
/// (`mnt=PATH`) with its reader gone: the bench's files are removed and
/// the mount is left as it was.
#[test]
fn stats_and_bench_on_a_mount_to_a_gone_reader() {
    let m = TestMount::new("pipes-stats");
    let out = stdout_gone(&["stats", m.mnt.to_str().unwrap()]);
    assert_died_of_sigpipe("stats", &out);
    let target = format!("mnt={}", m.mnt.display());
    let mut args = vec!["bench", "-t", &target];
    args.extend_from_slice(TINY_BENCH);
    let out = stdout_gone(&args);
    assert_died_of_sigpipe("bench on a mount", &out);
    assert!(is_fuse_mounted(&m.mnt));
    assert_eq!(std::fs::read_dir(&m.mnt).unwrap().count(), 0);
}

/// A foreground daemon logging to stderr (no `--log-file`) whose reader
/// is gone, with a warning at its start (fault injection on) and a panic
/// logged per request: it mounts, answers EIO for the panicking name and
/// serves on. Before, tracing-subscriber reported the failed log write
/// with an `eprintln!`, which panicked; from the panic hook (which logs)
/// that was a panic in a panic: the daemon aborted (SIGABRT) at its start
/// and never mounted.
#[test]
fn a_daemon_logging_to_a_gone_reader() {
    let base = unique_dir("pipes-daemon");
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(BIN)
        .args(["mount", "--memory", "-f", "--transport", &transport()])
        .arg(&mnt)
        .env("LANEFS_FAULT_PANIC_NAME", "boom")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .spawn()
        .unwrap();
    let exited = |c: &mut std::process::Child| -> Option<ExitStatus> { c.try_wait().ok()? };
    let up = wait_until(30, || is_fuse_mounted(&mnt) || exited(&mut child).is_some());
    let mut guard = ForegroundDaemon(child, mnt.clone());
    assert!(
        up && is_fuse_mounted(&mnt),
        "no mount; daemon: {:?}",
        exited(&mut guard.0)
    );
    std::fs::write(mnt.join("f"), b"x").unwrap();
    for _ in 0..3 {
        let e = std::fs::metadata(mnt.join("boom")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    }
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"x");
    let out = run_timeout(30, Command::new(BIN).arg("umount").arg(&mnt));
    assert!(out.status.success(), "{}", show(&out));
    let child = &mut guard.0;
    assert!(
        wait_until(30, || exited(child).is_some()),
        "daemon still up"
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "daemon: {status}");
    drop(guard);
    std::fs::remove_dir_all(&base).unwrap();
}
