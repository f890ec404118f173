//! The mount daemon's process plumbing: backgrounding (`spawn_daemon`:
//! re-run ourselves in the foreground and wait for the readiness line),
//! serving until a signal or the session's end (`serve_mounted`),
//! systemd readiness (`NOTIFY_SOCKET`), and the teardown when a session
//! fails (a dead worker): the mount is detached and the daemon exits
//! non-zero, never left half-served.
//!
//! No shared state, no locks: one thread waits for signals; the session
//! runs on its own thread. Every other thread blocks the shutdown signals
//! (`block_shutdown_signals`, before the first thread starts).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanefs_fuse::Handler;

use crate::{MountPlan, ServeError, READY_FD_ENV, READY_MSG_BYTES_MAX, READY_OK, SHUTDOWN_WAIT};

/// Re-run ourselves with `--foreground` as a daemon and wait until it says
/// the mount is ready (or why it is not).
pub(crate) fn spawn_daemon() -> Result<(), String> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just returned these two fds; nothing else owns them.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wr_fd = fds[1];
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    args.push("--foreground".into());
    let mut cmd = std::process::Command::new(exe);
    cmd.args(&args)
        .env(READY_FD_ENV, wr_fd.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Own process group: a Ctrl-C meant for the shell's foreground job
        // must not reach the daemon.
        .process_group(0);
    // SAFETY: the closure only calls fcntl, which is async-signal-safe, on
    // an fd that is open in the child (inherited from us).
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(wr_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start daemon: {e}"))?;
    drop(wr);
    let mut msg = String::new();
    let _ = std::fs::File::from(rd)
        .take(READY_MSG_BYTES_MAX)
        .read_to_string(&mut msg);
    let msg = msg.trim();
    if let Some(report) = msg.strip_prefix(READY_OK) {
        let report = report.trim();
        if !report.is_empty() {
            say!("lanefs mount: {report}");
        }
        // Under systemd we are the main process: hand the service over to
        // the daemon (`MAINPID`) as we say it is ready. (The daemon does
        // not see NOTIFY_SOCKET: `take_notify_socket` removed it.)
        notify(&format!("READY=1\nMAINPID={}", child.id()));
        return Ok(());
    }
    let status = child.wait().ok();
    if msg.is_empty() {
        Err(format!(
            "daemon exited before the mount was ready ({})",
            status.map(|s| s.to_string()).unwrap_or_default()
        ))
    } else {
        Err(msg.to_string())
    }
}

/// What the background commit of [`serve_mounted`] says about its
/// failures: the first, once, with its cause; nothing while it keeps
/// failing (a failed image store answers `EIO` to every call from then
/// on); a line when it works again; and at the end of the session how many
/// commits failed. Until 2026-11 every failed commit logged `EIO`, one
/// line every commit interval for as long as the daemon ran (seen after a
/// host `ENOSPC` under a sparse image), burying the line that said why.
#[derive(Debug, Default)]
pub(crate) struct CommitLog {
    /// Failures since the last commit that worked (0: working).
    failing: u64,
    /// Failures in all.
    failed: u64,
}

/// What [`CommitLog::note`] wants logged for one background commit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CommitNote {
    Nothing,
    /// The first failure since the start or since the last success.
    Failed,
    /// A success after `failures` failures in a row.
    WorksAgain {
        failures: u64,
    },
}

impl CommitLog {
    pub(crate) fn note(&mut self, ok: bool) -> CommitNote {
        if ok {
            let failures = std::mem::take(&mut self.failing);
            return match failures {
                0 => CommitNote::Nothing,
                _ => CommitNote::WorksAgain { failures },
            };
        }
        self.failing += 1;
        self.failed += 1;
        match self.failing {
            1 => CommitNote::Failed,
            _ => CommitNote::Nothing,
        }
    }

    /// The line for the end of the session, if a commit failed.
    pub(crate) fn summary(&self) -> Option<String> {
        (self.failed > 0).then(|| {
            format!(
                "{} background commits failed ({} in a row at the end)",
                self.failed, self.failing
            )
        })
    }
}

/// Mount, report readiness, and wait for a signal or the session's end;
/// every `commit_every`, write back everything cached (`syncfs`), logging
/// failures as [`CommitLog`] says (`failure`: why the store failed, if it
/// has, for that line). `at_session_end` runs on the session's thread as
/// soon as the session ends (the mount is gone), before anything else
/// of the teardown.
pub(crate) fn serve_mounted(
    plan: &MountPlan,
    handler: Arc<Handler>,
    ready: Option<std::fs::File>,
    ready_line: &str,
    commit_every: Option<Duration>,
    failure: &dyn Fn() -> Option<String>,
    at_session_end: Box<dyn FnOnce() + Send>,
) -> Result<(), ServeError> {
    let fs_handler = handler.clone();
    // `serve` blocked them before its first thread; again here (it is
    // idempotent) so that no caller can forget it.
    block_shutdown_signals();
    let sigs = shutdown_sigset();

    let mounted = match lanefs_fuse::mount(handler, &plan.mountpoint, &plan.opts) {
        Ok(m) => m,
        Err(e) => return Err((e, ready)),
    };
    let mnt = mounted.mountpoint().to_path_buf();
    if plan.opts.auto_unmount {
        if let Err(e) = crate::watch::start(&mnt) {
            let _ = lanefs_fuse::unmount(&mnt, true);
            return Err((e, ready));
        }
    }
    tracing::info!(
        mountpoint = %mnt.display(),
        threads = plan.opts.threads,
        transport = mounted.transport(),
        "mounted"
    );
    let session = match std::thread::Builder::new()
        .name("lanefs-session".into())
        .spawn(move || {
            let r = mounted.run();
            at_session_end();
            r
        }) {
        Ok(h) => h,
        Err(e) => {
            let _ = lanefs_fuse::unmount(&mnt, true);
            return Err((format!("cannot start session: {e}"), ready));
        }
    };
    if let Some(mut r) = ready {
        let _ = writeln!(r, "{ready_line}");
    }
    notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS=mounted on {}",
        std::process::id(),
        mnt.display()
    ));

    // Wait for a signal or for the session to end (external unmount).
    let mut deadline: Option<Instant> = None;
    let mut next_commit = commit_every.map(|d| Instant::now() + d);
    let mut commits = CommitLog::default();
    let result = loop {
        if let (Some(at), Some(every)) = (next_commit, commit_every) {
            if Instant::now() >= at && deadline.is_none() {
                let r = fs_handler.fs().sync();
                match (commits.note(r.is_ok()), r) {
                    (CommitNote::Failed, Err(e)) => {
                        let cause = failure().map(|f| format!(" ({f})")).unwrap_or_default();
                        tracing::error!(
                            error = %e,
                            "background commit failed{cause}; not logged again until one works"
                        );
                    }
                    (CommitNote::WorksAgain { failures }, _) => {
                        tracing::info!(failures, "background commit works again");
                    }
                    _ => {}
                }
                next_commit = Some(Instant::now() + every);
            }
        }
        if session.is_finished() {
            let failed = match session.join() {
                Ok(Ok(())) => break Ok(()),
                Ok(Err(e)) => format!("session failed: {e}"),
                Err(_) => "session thread panicked".to_string(),
            };
            // A worker died: never stay half-alive. Detach the mount (the
            // kernel aborts the connection when we exit and our fds close,
            // failing whatever was waiting on the dead worker) and exit
            // non-zero.
            tracing::error!(mountpoint = %mnt.display(), "{failed}; unmounting and exiting");
            notify("STOPPING=1");
            if let Err(e) = lanefs_fuse::unmount(&mnt, true) {
                tracing::error!(error = %e, "cannot detach the mount");
            }
            break Err((failed, None));
        }
        // Once the mount is quiet after requests, every worker gives its
        // allocator's free memory back (`lanefs_fuse::upkeep`).
        fs_handler.upkeep().tick(|| {
            lanefs_core::collect_deferred();
            crate::give_back_free_memory();
        });
        if let Some(d) = deadline {
            if Instant::now() >= d {
                tracing::warn!("session still busy after unmount; exiting");
                break Ok(());
            }
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // SAFETY: sigs and ts are valid; a null siginfo pointer is allowed.
        let sig = unsafe { libc::sigtimedwait(&sigs, std::ptr::null_mut(), &ts) };
        if sig > 0 && deadline.is_none() {
            tracing::info!(signal = sig, "unmounting on signal");
            notify("STOPPING=1");
            if let Err(e) = lanefs_fuse::unmount(&mnt, false) {
                tracing::info!(error = %e, "busy; detaching lazily");
                let _ = lanefs_fuse::unmount(&mnt, true);
            }
            deadline = Some(Instant::now() + SHUTDOWN_WAIT);
        }
    };
    if let Some(line) = commits.summary() {
        tracing::warn!("{line}");
    }
    result
}

/// Block SIGTERM, SIGINT and SIGHUP on the calling thread, so that every
/// thread it starts afterwards inherits the mask and only the main
/// thread's `sigtimedwait` in [`serve_mounted`] takes them. Call it before
/// the first thread starts: a process-directed signal goes to any thread
/// that does not block it, and there its default action ends the whole
/// process (no unmount, no final write-back: a dead mount left behind).
/// The image store's commit thread and the log writer start before the
/// mount, so `serve` calls this first; a signal that comes before the
/// mount stays pending and unmounts it as soon as it is up.
pub(crate) fn block_shutdown_signals() {
    let sigs = shutdown_sigset();
    // SAFETY: sigs is an initialised sigset; a null old-set is allowed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &sigs, std::ptr::null_mut()) };
}

fn shutdown_sigset() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before sigaddset uses it.
    unsafe {
        let mut s: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut s);
        libc::sigaddset(&mut s, libc::SIGTERM);
        libc::sigaddset(&mut s, libc::SIGINT);
        libc::sigaddset(&mut s, libc::SIGHUP);
        s
    }
}

/// Environment variable through which systemd (`Type=notify`) names its
/// notification socket.
pub(crate) const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

static NOTIFY_SOCKET: std::sync::OnceLock<Option<OsString>> = std::sync::OnceLock::new();

/// Take `NOTIFY_SOCKET` out of the environment (so helpers we start, such
/// as `fusermount3`, do not talk to systemd in our name) and keep it for
/// [`notify`]. Call once, before any thread starts.
pub(crate) fn take_notify_socket() {
    let v = std::env::var_os(NOTIFY_SOCKET_ENV).filter(|v| !v.is_empty());
    if v.is_some() {
        std::env::remove_var(NOTIFY_SOCKET_ENV);
    }
    let _ = NOTIFY_SOCKET.set(v);
}

/// Send `state` (`READY=1`, `STOPPING=1`, ...) to the service manager's
/// notification socket (`sd_notify(3)`): one datagram on a Unix socket,
/// the path in `NOTIFY_SOCKET`, `@` for the abstract namespace. Nothing
/// when the variable is not set; a failure is logged, never fatal.
pub(crate) fn notify(state: &str) {
    let Some(Some(path)) = NOTIFY_SOCKET.get() else {
        return;
    };
    if let Err(e) = send_notify(path, state) {
        tracing::warn!(socket = ?path, error = %e, "cannot notify the service manager");
    }
}

fn send_notify(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None => SocketAddr::from_pathname(path)?,
    };
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_commit_is_logged_once_until_it_works_again() {
        let mut log = CommitLog::default();
        assert_eq!(log.note(true), CommitNote::Nothing);
        assert_eq!(log.summary(), None);
        // A failed store: every commit from then on fails; one line.
        assert_eq!(log.note(false), CommitNote::Failed);
        for _ in 0..1000 {
            assert_eq!(log.note(false), CommitNote::Nothing);
        }
        assert_eq!(
            log.summary().as_deref(),
            Some("1001 background commits failed (1001 in a row at the end)")
        );
        // A passing failure (a full image, say) that clears.
        assert_eq!(log.note(true), CommitNote::WorksAgain { failures: 1001 });
        assert_eq!(log.note(true), CommitNote::Nothing);
        assert_eq!(log.note(false), CommitNote::Failed, "a new run of failures");
        assert_eq!(log.note(true), CommitNote::WorksAgain { failures: 1 });
        assert_eq!(
            log.summary().as_deref(),
            Some("1002 background commits failed (0 in a row at the end)")
        );
    }
}
