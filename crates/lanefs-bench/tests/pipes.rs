//! The development binary `lanefs-bench` with its stdout or stderr a pipe
//! nobody reads: no panic ("failed printing to stdout: Broken pipe", exit
//! 101 before); it dies of SIGPIPE as coreutils do, or keeps its error
//! status (`lanefs_bench::out`; `lanefs bench` itself:
//! `crates/lanefs-cli/tests/pipes.rs`).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_lanefs-bench");

/// The write end of a pipe whose read end is already closed.
fn closed_pipe() -> Stdio {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 just returned both fds; nothing else owns them.
    let (r, w) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(r);
    Stdio::from(w)
}

#[test]
fn a_gone_reader_is_no_panic() {
    let out = Command::new(BIN)
        .arg("--list")
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{}: {err}",
        out.status
    );
    assert!(err.is_empty(), "{err}");
    // An error with stderr gone: the line is dropped, the status kept.
    let status = Command::new(BIN)
        .args(["report", "/no/such/results.json"])
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "{status}");
}
