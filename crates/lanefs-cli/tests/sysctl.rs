//! Host sysctls that the kernel's VFS enforces for every file system,
//! FUSE mounts included: the mount follows the host's current value as
//! tmpfs does (xfstests generic/597).
//!
//! `fs.protected_hardlinks`: `may_linkat` refuses (`EPERM`) a hard link by
//! a user who neither owns the source nor may read and write it, before
//! the file system is asked. Until 2026-11 the daemon made the same check
//! again with the engine's default (on), so with the sysctl switched off
//! such a link still failed `EPERM` on lanefs and succeeded on tmpfs.
//!
//! The test flips the host's sysctl for a moment (and restores it): this
//! binary holds no other test, and its two transports take turns.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;

const SYSCTL: &str = "/proc/sys/fs/protected_hardlinks";

/// One test at a time flips the sysctl.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Restores the sysctl's value on drop (also when the test fails).
struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(SYSCTL, &self.0);
    }
}

/// As user 1000: `ln DIR/target DIR/open/link`; whether it worked, or the
/// error.
fn link_as_user(dir: &Path, protected: &str) -> Result<(), String> {
    let _ = std::fs::remove_file(dir.join("open/link"));
    std::fs::write(SYSCTL, protected).unwrap();
    let out = sh_as_user_1000(&format!(
        "ln {} {}",
        dir.join("target").display(),
        dir.join("open/link").display()
    ));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `ln`'s message, by the errno it names.
fn errno_of(stderr: &str) -> &'static str {
    if stderr.contains("Operation not permitted") {
        "EPERM"
    } else if stderr.contains("Permission denied") {
        "EACCES"
    } else {
        panic!("ln: {stderr}")
    }
}

/// A file of uid 1001 that user 1000 may not read or write, and a
/// world-writable directory to link it into.
fn setup(dir: &Path) {
    std::fs::write(dir.join("target"), b"x").unwrap();
    std::os::unix::fs::chown(dir.join("target"), Some(1001), Some(1001)).unwrap();
    std::fs::set_permissions(dir.join("target"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(dir.join("open")).unwrap();
    std::fs::set_permissions(dir.join("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn protected_hardlinks_follows_the_host_as_tmpfs() {
    require_tool("setpriv");
    let m = TestMount::with("sysctl-hardlinks", &["-o", "allow_other"], &[]);
    let tmpfs = unique_dir("sysctl-hardlinks-tmpfs");
    let out = run_timeout(
        30,
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0755", "none"])
            .arg(&tmpfs),
    );
    assert!(out.status.success(), "{}", show(&out));
    setup(&m.mnt);
    setup(&tmpfs);
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _restore = Restore(std::fs::read_to_string(SYSCTL).unwrap());
    let mut got = Vec::new();
    for dir in [&tmpfs, &m.mnt] {
        got.push((
            link_as_user(dir, "0").map_err(|e| errno_of(&e)),
            link_as_user(dir, "1").map_err(|e| errno_of(&e)),
        ));
    }
    drop(_restore);
    let _ = Command::new("umount").arg("-l").arg(&tmpfs).status();
    let _ = std::fs::remove_dir(&tmpfs);
    assert_eq!(got[0], (Ok(()), Err("EPERM")), "tmpfs (the oracle)");
    assert_eq!(got[1], got[0], "lanefs (0 then 1) against tmpfs");
}

on_both_transports!(protected_hardlinks_follows_the_host_as_tmpfs);
