//! `auto_unmount`: a small watcher process that detaches the mount when
//! the daemon that serves it dies, however it dies (SIGKILL included).
//!
//! The daemon starts `lanefs auto-unmount-watch --mount-id ID MNT` (a
//! hidden subcommand) in its own process group, with stdin the read end of
//! a pipe whose write end only the daemon holds (close-on-exec, never
//! closed): when the daemon is gone, however, the kernel closes it and the
//! watcher reads end-of-file. It then detaches the mount — only if the
//! mount with the mount ID recorded at mount time is still at MNT (after a
//! clean exit the daemon has already unmounted, and MNT may hold something
//! else by then) — with `umount2(MNT_DETACH)`, or `fusermount3 -uz` when
//! not root.
//!
//! Why not fusermount3's own `auto_unmount`: it unmounts only if opening
//! the mount point fails with ENOTCONN at the moment it notices the
//! death. With the io_uring transport the kernel tears the rings down
//! after the process, so the connection is not yet aborted then and the
//! mount stays (seen on 6.18). The mount ID check gives the same safety
//! (never unmount what is not ours) without that race.
//!
//! No shared state, no locks.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The hidden subcommand that runs the watcher.
pub const WATCH_SUBCOMMAND: &str = "auto-unmount-watch";

/// Arguments of the watcher.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// The mount ID (first field of /proc/self/mountinfo) to detach.
    #[arg(long)]
    pub mount_id: u64,
    pub mountpoint: PathBuf,
}

/// Undo mountinfo's octal escapes (space, tab, newline, backslash).
pub fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Mount ID, mount point and type of each line of a mountinfo text.
pub fn parse_mountinfo(info: &str) -> Vec<(u64, String, String)> {
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((
                f.first()?.parse().ok()?,
                unescape_mountinfo(f.get(4)?),
                f.get(sep + 1)?.to_string(),
            ))
        })
        .collect()
}

fn mountinfo() -> Vec<(u64, String, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| parse_mountinfo(&s))
        .unwrap_or_default()
}

/// The ID of the FUSE mount on top at `mnt` (canonical path), if any.
pub fn fuse_mount_id(mnt: &Path) -> Option<u64> {
    let want = mnt.to_string_lossy();
    mountinfo()
        .into_iter()
        .rev()
        .find(|(_, p, t)| *p == want && t.starts_with("fuse"))
        .map(|(id, _, _)| id)
}

/// In the daemon, right after mounting `mnt`: start the watcher. The
/// pipe's write end stays open (unowned) for the life of this process.
pub fn start(mnt: &Path) -> Result<(), String> {
    let id = fuse_mount_id(mnt)
        .ok_or_else(|| format!("auto_unmount: {} is not in mountinfo", mnt.display()))?;
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "auto_unmount: pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: pipe2 just returned these fds; nothing else owns them.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let exe = std::env::current_exe().map_err(|e| format!("auto_unmount: {e}"))?;
    let mut child = Command::new(exe)
        .arg(WATCH_SUBCOMMAND)
        .arg("--mount-id")
        .arg(id.to_string())
        .arg(mnt)
        .stdin(Stdio::from(rd))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Not in our process group: a signal for the daemon's group
        // (Ctrl-C) must not take the watcher first.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("auto_unmount: cannot start the watcher: {e}"))?;
    // Held until the process ends; its close is the watcher's signal.
    let _ = wr.into_raw_fd();
    std::thread::Builder::new()
        .name("lanefs-watch-reaper".into())
        .spawn(move || child.wait())
        .map_err(|e| format!("auto_unmount: {e}"))?;
    tracing::info!(mount_id = id, "auto_unmount watcher started");
    Ok(())
}

/// The watcher: wait for end-of-file on stdin, then detach the mount if it
/// is still the one we were given.
pub fn run(a: &WatchArgs) -> ExitCode {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads into a buffer we own, of its length.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)) {
            continue;
        }
        break;
    }
    let want = a.mountpoint.to_string_lossy();
    let ours = mountinfo()
        .into_iter()
        .any(|(id, p, t)| id == a.mount_id && p == want && t.starts_with("fuse"));
    if !ours {
        return ExitCode::SUCCESS;
    }
    let detached = lanefs_fuse::unmount(&a.mountpoint, true).is_ok();
    if detached {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let info = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                    98 22 0:55 / /tmp/a\\040b rw,nosuid,nodev - fuse.lanefs memory rw,user_id=0\n\
                    bad line\n";
        assert_eq!(
            parse_mountinfo(info),
            vec![
                (22, "/proc".into(), "proc".into()),
                (98, "/tmp/a b".into(), "fuse.lanefs".into())
            ]
        );
    }
}
