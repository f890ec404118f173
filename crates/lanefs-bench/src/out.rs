//! A command's output on stdout and stderr, never a panic.
//!
//! `print!`/`println!`/`eprintln!` panic ("failed printing to stdout:
//! Broken pipe", exit 101) when the stream is a pipe whose reader is gone:
//! `lanefs bench … | head -1`, a supervisor that closed the daemon's
//! stderr. Rust ignores SIGPIPE, so a write there fails with `EPIPE`
//! instead of ending the process as it ends a C program. What the `lanefs`
//! commands do instead (`lanefs bench`, `lanefs stats`, `lanefs audit` and
//! the `lanefs-bench` binary through this module; the `lanefs` command's
//! own `say!`/`tell!` for its other lines):
//!
//! * stdout's reader gone ([`stdout`]): nothing more goes to stdout, the
//!   command finishes its work (the bench's `--json`/`--csv` files, the
//!   audit's outputs, every mount taken down), and then, if it
//!   succeeded, ends as coreutils end when their reader leaves (`seq 1
//!   100000 | head -1`): killed by SIGPIPE, silently, which a shell shows
//!   as status 141 ([`success`]). An error still ends it with its own
//!   message and status. Any other stdout error (`ENOSPC` under `>
//!   file`) is the command's error, as coreutils' "write error".
//! * stderr unwritable ([`stderr_line`], the crate's `say!`): the line is
//!   dropped; a diagnostic nobody can read changes nothing.
//!
//! (`lanefs fsck` and `lanefs mkfs` keep their own exit status when
//! their report's reader is gone: fsck's is e2fsck's result code, which
//! scripts act on.)
//!
//! Shared state: [`STDOUT_GONE`], an atomic flag set once (Relaxed: it
//! orders nothing; the thread that prints is the one that ends the
//! process).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set when a write to stdout failed with `EPIPE`: its reader is gone.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Write `text` to stdout and flush it. Never panics. Once stdout's reader
/// is gone (`EPIPE`, now or before) the text is dropped and [`success`]
/// ends the process as coreutils end; any other error is returned.
pub fn stdout(text: &str) -> Result<(), String> {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(format!("write error on stdout: {e}")),
    }
}

/// Whether stdout's reader has gone (a write to it failed with `EPIPE`).
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}

/// One line on stderr, as `eprintln!` but never a panic: a line nobody
/// can read is dropped.
pub fn stderr_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{args}");
}

/// The exit of a command that succeeded: `ExitCode::SUCCESS`, or, when
/// its stdout's reader left early, death by SIGPIPE as coreutils die
/// (silently; status 141 in a shell) — the end the default SIGPIPE
/// action would have given at the failed write, delayed until the work
/// was done.
pub fn success() -> ExitCode {
    if !stdout_gone() {
        return ExitCode::SUCCESS;
    }
    // SAFETY: signal(2), sigemptyset/sigaddset on a local set,
    // pthread_sigmask(3) and raise(3), each with valid arguments. Resetting
    // SIGPIPE's action to the default and unblocking it in this thread
    // only changes how this process ends: raise() delivers it to this
    // thread, and the default action ends the process. Nothing runs after
    // that needs the drops this skips: the command's work is done, its
    // output flushed (what could be), its files written.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(libc::SIGPIPE);
    }
    // Not reached: the signal ended the process. Should it not have, the
    // status a shell shows for it.
    ExitCode::from(128 + libc::SIGPIPE as u8)
}
