//! Mounting without root: `fusermount3` (setuid root) opens `/dev/fuse`,
//! mounts it, and passes the fd back over a Unix socket named by the
//! `_FUSE_COMMFD` environment variable (`SCM_RIGHTS`), as libfuse does.
//!
//! No shared state, no locks.

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use nix::sys::socket::{
    recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

use crate::MountOptions;

/// Environment variable through which `fusermount3` finds the socket.
const COMMFD_ENV: &str = "_FUSE_COMMFD";

/// The `-o` string for `fusermount3`: kernel options plus the flags it
/// turns into `mount(2)` flags.
fn fusermount_options(opts: &MountOptions) -> String {
    let mut o = format!("fsname={},subtype={}", opts.fsname, opts.subtype);
    o.push_str(&crate::kernel_options(opts));
    let flag = |f: libc::c_ulong| opts.ms_flags & f != 0;
    o.push_str(if opts.read_only { ",ro" } else { ",rw" });
    o.push_str(if flag(libc::MS_NOSUID) {
        ",nosuid"
    } else {
        ",suid"
    });
    o.push_str(if flag(libc::MS_NODEV) {
        ",nodev"
    } else {
        ",dev"
    });
    o.push_str(if flag(libc::MS_NOEXEC) {
        ",noexec"
    } else {
        ",exec"
    });
    if flag(libc::MS_NOATIME) {
        o.push_str(",noatime");
    }
    if flag(libc::MS_STRICTATIME) {
        o.push_str(",strictatime");
    }
    if flag(libc::MS_NODIRATIME) {
        o.push_str(",nodiratime");
    }
    if flag(libc::MS_SYNCHRONOUS) {
        o.push_str(",sync");
    }
    if flag(libc::MS_DIRSYNC) {
        o.push_str(",dirsync");
    }
    if opts.nonempty {
        o.push_str(",nonempty");
    }
    o
}

/// Mount through `fusermount3` and return the session fd.
pub fn mount(mnt: &Path, opts: &MountOptions) -> Result<OwnedFd, String> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| format!("socketpair: {e}"))?;
    let their_fd = theirs.as_raw_fd();
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-o")
        .arg(fusermount_options(opts))
        .arg("--")
        .arg(mnt)
        .env(COMMFD_ENV, their_fd.to_string());
    // SAFETY: the closure only calls fcntl (async-signal-safe) to let the
    // child inherit its end of the socket pair, which is open in the child.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::fcntl(their_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Its complaint becomes our error line.
    cmd.stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run fusermount3: {e}"))?;
    drop(theirs);
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let received = recvmsg::<()>(
        ours.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| format!("fusermount3: {e}"))
    .map(|msg| {
        msg.cmsgs()
            .ok()
            .into_iter()
            .flatten()
            .find_map(|c| match c {
                ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
                _ => None,
            })
    });
    let mut complaint = String::new();
    if let Some(mut err) = child.stderr.take() {
        use std::io::Read;
        let _ = (&mut err).take(4096).read_to_string(&mut complaint);
    }
    let status = child.wait().map_err(|e| format!("fusermount3: {e}"))?;
    let said = complaint;
    let mut complaint = said.lines().last().unwrap_or("").trim().to_string();
    if opts.allow_root && !opts.allow_other && complaint.contains("allow_other") {
        // fusermount3 names the allow_other we pass for allow_root.
        complaint.push_str(" (allow_root by a non-root user mounts with allow_other)");
    }
    match received? {
        Some(fd) => {
            // Mounted, but fusermount3 may have overruled an option (a
            // user's `suid`/`dev`: "unsafe option suid ignored"): say so.
            for line in said.lines().filter(|l| !l.trim().is_empty()) {
                tracing::warn!("{}", line.trim());
            }
            // SAFETY: the kernel just installed this fd in our table for
            // us (SCM_RIGHTS); nothing else owns it.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
        None if !complaint.is_empty() => Err(format!(
            "mount {} through fusermount3 failed: {complaint}",
            mnt.display()
        )),
        None => Err(format!(
            "mount {} through fusermount3 failed ({status})",
            mnt.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_carry_every_mount_flag() {
        let mut o = MountOptions::default();
        o.apply("allow_other,noexec,noatime,sync,dirsync,ro")
            .unwrap();
        let s = fusermount_options(&o);
        for want in [
            "default_permissions",
            "allow_other",
            "noexec",
            "noatime",
            "sync",
            "dirsync",
            "ro",
            "nosuid",
            "nodev",
        ] {
            assert!(s.split(',').any(|x| x == want), "{want} missing from {s}");
        }
    }
}
