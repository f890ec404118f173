//! A mount that fits the system (issue 12, item 4), on a real mount and on
//! both transports: the mount-helper form through `mount -t fuse.lanefs`
//! and an fstab line, systemd readiness on `NOTIFY_SOCKET`, logging of a
//! backgrounded daemon to syslog, `auto_unmount` after SIGKILL, and a
//! worker thread that dies ending the session loudly with the mount gone.
//! Needs root and /dev/fuse.

mod common;

use std::ffi::OsStr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use common::*;

/// Where `mount.fuse3` finds `lanefs`: mount(8) runs its helpers with no
/// PATH, so `/bin/sh` searches its default path, which starts here.
const HELPER_LINK: &str = "/usr/local/sbin/lanefs";

/// Serialises the tests that install [`HELPER_LINK`].
static HELPER_LOCK: Mutex<()> = Mutex::new(());

/// `/usr/local/sbin/lanefs` -> the binary under test, for the life of the
/// guard; removed on drop (also when the test fails).
struct HelperLink;

impl HelperLink {
    fn install() -> HelperLink {
        match std::fs::read_link(HELPER_LINK) {
            Ok(t) if t == Path::new(BIN) => {}
            Ok(_) | Err(_) if Path::new(HELPER_LINK).symlink_metadata().is_ok() => panic!(
                "{HELPER_LINK} exists and is not this build's binary; move it away to run this test"
            ),
            _ => {
                std::fs::create_dir_all("/usr/local/sbin").unwrap();
                std::os::unix::fs::symlink(BIN, HELPER_LINK).unwrap();
            }
        }
        HelperLink
    }
}

impl Drop for HelperLink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(HELPER_LINK);
    }
}

/// Unmounts `mnt` if still mounted when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_fuse_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// `lanefs mount --memory` started without `-f` (the daemon backgrounds
/// itself, as under systemd) on a fresh mountpoint, with `envs` set.
struct Backgrounded {
    base: PathBuf,
    mnt: PathBuf,
    guard: Unmount,
}

impl Backgrounded {
    fn start(tag: &str, envs: &[(&str, &OsStr)]) -> Backgrounded {
        let base = unique_dir(tag);
        let mnt = base.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let guard = Unmount(mnt.clone());
        let mut cmd = Command::new(BIN);
        cmd.args(["mount", "--memory", "--transport", &transport()])
            .arg(&mnt)
            .envs(envs.iter().copied());
        let out = run_timeout(60, &mut cmd);
        assert!(out.status.success(), "{}", show(&out));
        Backgrounded { base, mnt, guard }
    }

    /// `lanefs umount` (which must succeed), then the directory goes.
    fn umount(self) {
        let out = run_timeout(30, Command::new(BIN).arg("umount").arg(&self.mnt));
        assert!(out.status.success(), "{}", show(&out));
        drop(self.guard);
        let _ = std::fs::remove_dir_all(self.base);
    }
}

/// A file system mounted by `mount(8)` must be usable, be listed as
/// `fuse.lanefs` with SOURCE as its source, and go away with `umount`
/// (the daemon then exits).
fn check_helper_mount(mnt: &Path, out: &std::process::Output) {
    assert!(out.status.success(), "mount failed:\n{}", show(out));
    assert!(is_fuse_mounted(mnt), "not mounted after mount(8) returned");
    assert_eq!(mount_fstype(mnt).as_deref(), Some("fuse.lanefs"));
    assert_eq!(mount_source(mnt).as_deref(), Some("memory"));
    std::fs::write(mnt.join("f"), b"through mount(8)").unwrap();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"through mount(8)");
    let out = run_timeout(30, Command::new("umount").arg(mnt));
    assert!(out.status.success(), "umount failed:\n{}", show(&out));
    assert!(wait_until(10, || !is_fuse_mounted(mnt)));
}

fn mount_helper_form_and_fstab() {
    let _serial = HELPER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let _link = HelperLink::install();
    let base = unique_dir("helper");
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _guard = Unmount(mnt.clone());
    let t = transport();
    // mount -t fuse.lanefs SOURCE MNT -o ..., with fstab-only words.
    let opts = format!("defaults,nofail,_netdev,x-systemd.automount,noatime,transport={t}");
    let out = run_timeout(
        60,
        Command::new("mount")
            .args(["-t", "fuse.lanefs", "memory"])
            .arg(&mnt)
            .args(["-o", &opts]),
    );
    check_helper_mount(&mnt, &out);
    // The same from an fstab line (`mount -T FILE MNT`).
    let fstab = base.join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# lanefs test\nmemory {} fuse.lanefs defaults,nofail,_netdev,allow_other,transport={t} 0 0\n",
            mnt.display()
        ),
    )
    .unwrap();
    let out = run_timeout(60, Command::new("mount").arg("-T").arg(&fstab).arg(&mnt));
    check_helper_mount(&mnt, &out);
    // An unknown option: mount fails, saying which option.
    let out = run_timeout(
        60,
        Command::new("mount")
            .args(["-t", "fuse.lanefs", "memory"])
            .arg(&mnt)
            .args(["-o", "bogus_option"]),
    );
    assert!(!out.status.success(), "bad option accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown mount option 'bogus_option'"), "{err}");
    assert!(!is_fuse_mounted(&mnt));
    drop(_guard);
    std::fs::remove_dir_all(&base).unwrap();
}

/// A foreground daemon (`lanefs mount --memory -f`) as the test's child;
/// killed and its mount detached on drop.
struct Daemon {
    child: Child,
    mnt: PathBuf,
    base: PathBuf,
}

impl Daemon {
    fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let base = unique_dir(name);
        let mnt = base.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["mount", "--memory", "-f", "--transport", &transport()])
            .arg("--log-file")
            .arg(base.join("log"))
            .args(args)
            .arg(&mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        Daemon { child, mnt, base }
    }

    fn wait_mounted(&self) {
        assert!(
            wait_until(30, || is_fuse_mounted(&self.mnt)),
            "mount did not appear"
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if is_fuse_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if !is_fuse_mounted(&self.mnt) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}

/// A datagram socket bound in a fresh directory (systemd's side).
fn listening_socket(name: &str) -> (UnixDatagram, PathBuf, PathBuf) {
    let dir = unique_dir(name);
    let path = dir.join("sock");
    let s = UnixDatagram::bind(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    (s, path, dir)
}

fn recv_text(s: &UnixDatagram) -> String {
    let mut buf = vec![0u8; 65536];
    let n = s.recv(&mut buf).expect("no datagram within 30 s");
    String::from_utf8_lossy(&buf[..n]).to_string()
}

/// `Type=notify`: READY=1 (with MAINPID) arrives once the mount is live;
/// STOPPING=1 on SIGTERM.
fn notify_socket_gets_ready_then_stopping() {
    let (sock, path, dir) = listening_socket("notify");
    let mut d = Daemon::start("notify", &[], &[("NOTIFY_SOCKET", path.to_str().unwrap())]);
    let msg = recv_text(&sock);
    assert!(is_fuse_mounted(&d.mnt), "READY=1 before the mount was live");
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    assert!(
        msg.lines()
            .any(|l| l == format!("MAINPID={}", d.child.id())),
        "{msg}"
    );
    // The mount answers right away.
    std::fs::write(d.mnt.join("x"), b"1").unwrap();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let msg = recv_text(&sock);
    assert!(msg.lines().any(|l| l == "STOPPING=1"), "{msg}");
    assert!(wait_until(30, || matches!(d.child.try_wait(), Ok(Some(_)))));
    assert!(d.child.wait().unwrap().success());
    drop(d);
    let _ = std::fs::remove_dir_all(dir);
}

/// Backgrounded (`lanefs mount` without `-f`, systemd's main process):
/// the parent sends READY=1 with MAINPID = the daemon, which stays.
fn notify_socket_backgrounded_hands_over_mainpid() {
    let (sock, path, dir) = listening_socket("notifybg");
    let m = Backgrounded::start("notifybgmnt", &[("NOTIFY_SOCKET", path.as_os_str())]);
    let msg = recv_text(&sock);
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    let pid: u32 = msg
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .expect("no MAINPID")
        .parse()
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("--foreground"),
        "MAINPID {pid} is not the running daemon"
    );
    assert!(is_fuse_mounted(&m.mnt));
    m.umount();
    let _ = std::fs::remove_dir_all(dir);
}

/// A daemon started without `-f` and without `--log-file` logs to syslog
/// (here a test socket in place of /dev/log).
fn backgrounded_daemon_logs_to_syslog() {
    let (sock, path, dir) = listening_socket("syslog");
    let m = Backgrounded::start(
        "syslogmnt",
        &[
            ("LANEFS_SYSLOG_SOCKET", path.as_os_str()),
            ("RUST_LOG", OsStr::new("info")),
        ],
    );
    let mut seen = Vec::new();
    let found = loop {
        let line = recv_text(&sock);
        if line.contains("mounted") && line.contains(&*m.mnt.to_string_lossy()) {
            break line;
        }
        seen.push(line);
        assert!(seen.len() < 100, "no 'mounted' line: {seen:?}");
    };
    // <daemon.info>lanefs[PID]: ...
    assert!(found.starts_with("<30>lanefs["), "{found}");
    m.umount();
    let _ = std::fs::remove_dir_all(dir);
}

/// `-o auto_unmount`: SIGKILL of the daemon, and the mount goes away.
fn auto_unmount_after_sigkill() {
    let mut d = Daemon::start("autoumount", &["-o", "auto_unmount"], &[]);
    d.wait_mounted();
    std::fs::write(d.mnt.join("x"), b"1").unwrap();
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    assert!(
        wait_until(10, || !is_fuse_mounted(&d.mnt)),
        "still mounted 10 s after the daemon died"
    );
}

/// A worker that dies (injected: a panic outside the request guard on
/// LOOKUP of `die`) ends the session at once: the waiting request fails,
/// the daemon exits non-zero with the reason in its log, the mount is gone.
fn dead_worker_tears_the_mount_down() {
    let mut d = Daemon::start(
        "deadworker",
        &[],
        &[("LANEFS_FAULT_WORKER_PANIC_NAME", "die")],
    );
    d.wait_mounted();
    std::fs::write(d.mnt.join("x"), b"1").unwrap();
    let out = run_timeout(30, Command::new("stat").arg(d.mnt.join("die")));
    assert!(!out.status.success(), "stat of the fault name succeeded");
    assert!(
        wait_until(10, || matches!(d.child.try_wait(), Ok(Some(_)))),
        "daemon still running after a worker died"
    );
    let st = d.child.wait().unwrap();
    assert!(!st.success(), "daemon exited {st} after a worker died");
    assert!(
        wait_until(10, || !is_fuse_mounted(&d.mnt)),
        "mount left behind"
    );
    let log = d.log();
    assert!(log.contains("worker died"), "{log}");
}

on_both_transports!(
    mount_helper_form_and_fstab,
    notify_socket_gets_ready_then_stopping,
    notify_socket_backgrounded_hands_over_mainpid,
    backgrounded_daemon_logs_to_syslog,
    auto_unmount_after_sigkill,
    dead_worker_tears_the_mount_down,
);
