//! Shared helpers for the real-mount tests: each test mounts its own fresh
//! lanefs on its own temporary mount point and unmounts it on drop, even
//! when the test fails.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_lanefs");

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty directory under /tmp unique to this process and call.
pub fn unique_dir(name: &str) -> PathBuf {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("lanefs-t-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Path of an external tool; the test FAILS (not skips) when it is missing.
/// A count from environment variable `var`, or `default`.
#[allow(dead_code)]
pub fn env_count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A seed from environment variable `var` (hex, `0x` optional), or a fresh
/// odd one from the clock; print it so a failure can be replayed.
#[allow(dead_code)]
pub fn env_seed(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
                | 1
        })
}

/// xorshift64*: a small deterministic generator (tests print its seed).
#[allow(dead_code)]
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    pub fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len() as u64) as usize]
    }
}

pub fn require_tool(name: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    for dir in ["/usr/bin", "/usr/sbin", "/bin", "/sbin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("required tool `{name}` is not installed (run scripts/setup.sh as root)");
}

/// Is `path` a mount point of a FUSE file system right now?
pub fn is_fuse_mounted(path: &Path) -> bool {
    mount_fstype(path).is_some_and(|t| t.starts_with("fuse"))
}

/// The file-system type mounted at `path`, from /proc/self/mountinfo.
pub fn mount_fstype(path: &Path) -> Option<String> {
    mountinfo_field(path, 1)
}

/// The source of the mount at `path` (`fsname=`), from mountinfo.
pub fn mount_source(path: &Path) -> Option<String> {
    mountinfo_field(path, 2)
}

/// Field `n` after the separator of the top mount at `path` in
/// /proc/self/mountinfo (1: type, 2: source).
fn mountinfo_field(path: &Path, n: usize) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = path.to_string_lossy().to_string();
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        if f.get(4).map(|s| s.replace("\\040", " ")) == Some(want.clone()) {
            f.get(sep + n).map(|s| s.replace("\\040", " "))
        } else {
            None
        }
    })
}

/// A fresh tmpfs (the oracle of the differential tests), unmounted on
/// drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mode 0755, as a lanefs root.
    pub fn new(name: &str) -> Tmpfs {
        Tmpfs::with(name, "mode=0755")
    }

    /// Mounted with the options `opts`.
    pub fn with(name: &str, opts: &str) -> Tmpfs {
        let dir = unique_dir(name);
        let out = run_timeout(
            30,
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", opts, "none"])
                .arg(&dir),
        );
        assert!(out.status.success(), "mount tmpfs: {}", show(&out));
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Run `f` in a forked child as `uid`, gid `gid`, supplementary groups
/// `groups`; returns what `f` returned (0 or an errno).
pub fn as_ids(uid: u32, gid: u32, groups: &[u32], f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes async-signal-safe system calls
    // (setgroups, setresgid, setresuid, what `f` does, _exit).
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setresgid(gid, gid, gid) == 0
                && libc::setresuid(uid, uid, uid) == 0;
            libc::_exit(if ok { f() } else { 255 });
        }
        let mut st = 0;
        assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
        assert!(libc::WIFEXITED(st), "child died: {st:#x}");
        libc::WEXITSTATUS(st)
    }
}

/// The calling thread's errno (254 if none).
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(254)
}

/// Wait until `cond` holds, up to `secs` seconds.
pub fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Run a command under `timeout` (seconds), capturing output.
pub fn run_timeout(secs: u64, cmd: &mut Command) -> Output {
    let prog = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut t = Command::new("timeout");
    t.arg("-k")
        .arg("10")
        .arg(secs.to_string())
        .arg(&prog)
        .args(&args);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        t.current_dir(d);
    }
    t.stdin(Stdio::null());
    t.output()
        .unwrap_or_else(|e| panic!("cannot run {prog:?}: {e}"))
}

/// Run `script` with `sh -c` as user 1000, group 1000, no supplementary
/// groups (`setpriv`), under a 30-second `timeout`, capturing output.
pub fn sh_as_user_1000(script: &str) -> Output {
    run_timeout(
        30,
        Command::new("setpriv").args([
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ]),
    )
}

pub fn show(o: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        tail(&String::from_utf8_lossy(&o.stdout), 6000),
        tail(&String::from_utf8_lossy(&o.stderr), 6000)
    )
}

fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        s
    } else {
        let mut i = s.len() - n;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        &s[i..]
    }
}

/// Environment variable naming the transport every test mount uses
/// (`dev`, `uring`, `auto`; default `dev`). `scripts/test.sh` runs the
/// suite once per transport.
pub const TRANSPORT_ENV: &str = "LANEFS_TEST_TRANSPORT";

/// Environment variable that turns the kernel's writeback cache on for
/// every test mount (`1`), to run the whole mount suite with it; tests
/// named `*_writeback` have it on regardless.
pub const WRITEBACK_ENV: &str = "LANEFS_TEST_WRITEBACK";

/// Environment variable with extra `lanefs mount` arguments for every
/// test mount, split at whitespace (e.g. `-o cache_dir` to run a suite
/// with the kernel's directory-listing cache forced on, or
/// `-o nocache_dir` with it off). They come before a test's own
/// arguments, which therefore win; a test that checks a default (such as
/// `dircache.rs`'s `listings_are_cached_with_cache_dir`) expects none.
pub const MOUNT_OPTS_ENV: &str = "LANEFS_TEST_MOUNT_OPTS";

/// The arguments [`MOUNT_OPTS_ENV`] asks for (none when unset).
pub fn env_mount_args() -> Vec<String> {
    std::env::var(MOUNT_OPTS_ENV)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Environment variable: `image` mounts every test mount on a fresh image
/// (`lanefs mkfs`, then `mount IMAGE` with a small cache budget) instead of
/// the memory store, and checks the image with `lanefs fsck` after the
/// unmount (as [`on_image`] does for one test). Tests that size a memory
/// store (`--capacity`, `--inodes`: the ENOSPC tests) fail their mount in
/// this mode; every other test of `difftest.rs`, `multiuser.rs`,
/// `dircache.rs`, `writeback.rs`, `system.rs`, `nonroot.rs` and
/// `integrity.rs` passed in it (tenth session).
pub const STORE_ENV: &str = "LANEFS_TEST_STORE";

/// The image test mounts get: sparse, so its size costs nothing unused.
const TEST_IMAGE_SIZE: &str = "4G";
/// Their `--cache-size`: small, so that the store evicts and reads back
/// objects, and the engine its inodes and pages, under load.
const TEST_IMAGE_CACHE: &str = "32M";

std::thread_local! {
    /// Whether test mounts on this thread are image mounts (set by
    /// [`on_image`]).
    static IMAGE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The transport of the test running on this thread (set by
    /// [`on_transport`]).
    static TRANSPORT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    /// Whether test mounts on this thread get `-o writeback_cache` (set
    /// by [`on_transport_writeback`]).
    static WRITEBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether test mounts on this thread ask for the writeback cache: set by
/// [`on_transport_writeback`], or by [`WRITEBACK_ENV`] for all.
pub fn writeback() -> bool {
    WRITEBACK.with(|w| w.get()) || std::env::var(WRITEBACK_ENV).is_ok_and(|v| v == "1")
}

/// Mount options under which the engine alone makes every permission
/// check: `no_default_permissions`, and entry timeouts of 0, since without
/// the kernel's check a walk through cached dentries asks no search
/// permission (docs/FUSE.md, `default_permissions`). `None` with the
/// writeback cache, which implies `default_permissions`.
pub fn engine_checks_opts() -> Option<[&'static str; 2]> {
    (!writeback()).then_some([
        "-o",
        "allow_other,no_default_permissions,entry_timeout=0,negative_timeout=0",
    ])
}

/// The transport test mounts on this thread use: the one [`on_transport`]
/// set, else [`TRANSPORT_ENV`], else `dev`.
pub fn transport() -> String {
    TRANSPORT
        .with(|t| t.borrow().clone())
        .or_else(|| std::env::var(TRANSPORT_ENV).ok())
        .unwrap_or_else(|| "dev".into())
}

/// Where the kernel says whether FUSE-over-io_uring may be used.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why the io_uring transport cannot be tested here, or `None` when it
/// can (switching `enable_uring` on if the kernel has it but it is off).
pub fn uring_unavailable() -> Option<String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Err(_) => Some(format!(
            "this kernel has no FUSE-over-io_uring ({ENABLE_URING} missing: CONFIG_FUSE_IO_URING is off or the kernel is older than 6.14)"
        )),
        Ok(v) if v.trim() == "Y" => None,
        Ok(_) => match std::fs::write(ENABLE_URING, "Y") {
            Ok(()) => None,
            Err(e) => Some(format!("{ENABLE_URING} is N and cannot be switched on: {e}")),
        },
    }
}

/// Run a mount test with every test mount on this thread served by
/// `transport`; an io_uring run is skipped, saying why, where the kernel
/// lacks the feature.
pub fn on_transport(transport: &str, test: fn()) {
    if transport == "uring" {
        if let Some(why) = uring_unavailable() {
            eprintln!("SKIPPED (io_uring transport): {why}");
            return;
        }
    }
    TRANSPORT.with(|t| *t.borrow_mut() = Some(transport.to_string()));
    test();
}

/// Whether test mounts on this thread are on an image: set by
/// [`on_image`], or by [`STORE_ENV`] for all.
pub fn image_store() -> bool {
    IMAGE.with(|i| i.get()) || std::env::var(STORE_ENV).is_ok_and(|v| v == "image")
}

/// As [`on_transport`], with every test mount of this thread on a fresh
/// image store (issue 13: the mount suite's checkers on an image mount),
/// checked by `lanefs fsck` after its unmount.
pub fn on_image(transport: &str, test: fn()) {
    IMAGE.with(|i| i.set(true));
    on_transport(transport, test);
}

/// Make `name` (a plain `fn()`) a test on an image mount, on each
/// transport: `module::dev` and `module::uring`.
#[macro_export]
macro_rules! on_image_mount {
    ($($name:ident => $module:ident),* $(,)?) => {
        $(
            mod $module {
                #[test]
                fn dev() {
                    $crate::common::on_image("dev", super::$name)
                }
                #[test]
                fn uring() {
                    $crate::common::on_image("uring", super::$name)
                }
            }
        )*
    };
}

/// As [`on_transport`], with every test mount of this thread mounted with
/// `-o writeback_cache` (explicit options of a mount come after it and
/// win, so `no_writeback_cache` turns it off again).
pub fn on_transport_writeback(transport: &str, test: fn()) {
    WRITEBACK.with(|w| w.set(true));
    on_transport(transport, test);
}

/// As [`on_both_transports!`], plus `name::dev_writeback` and
/// `name::uring_writeback`: the same test with the kernel's writeback
/// cache on (docs/FUSE.md, "Writeback cache").
#[macro_export]
macro_rules! on_both_transports_and_writeback {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn dev() {
                    $crate::common::on_transport("dev", super::$name)
                }
                #[test]
                fn uring() {
                    $crate::common::on_transport("uring", super::$name)
                }
                #[test]
                fn dev_writeback() {
                    $crate::common::on_transport_writeback("dev", super::$name)
                }
                #[test]
                fn uring_writeback() {
                    $crate::common::on_transport_writeback("uring", super::$name)
                }
            }
        )*
    };
}

/// Make `name` (a plain `fn()`) a test on each transport: `name::dev`
/// and `name::uring`.
#[macro_export]
macro_rules! on_both_transports {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn dev() {
                    $crate::common::on_transport("dev", super::$name)
                }
                #[test]
                fn uring() {
                    $crate::common::on_transport("uring", super::$name)
                }
            }
        )*
    };
}

/// One mounted lanefs; unmounted (lazily if need be) on drop, and on an
/// image store (`image_store`) the image checked by `lanefs fsck` then.
pub struct TestMount {
    pub base: PathBuf,
    pub mnt: PathBuf,
    pub log: PathBuf,
    /// The image, for an image mount.
    pub image: Option<PathBuf>,
}

impl TestMount {
    pub fn new(name: &str) -> TestMount {
        Self::with(name, &[], &[])
    }

    /// Mount with extra `lanefs mount` arguments and environment.
    pub fn with(name: &str, args: &[&str], env: &[(&str, &str)]) -> TestMount {
        let base = unique_dir(name);
        let mnt = base.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let log = base.join("lanefs.log");
        let image = image_store().then(|| {
            let img = base.join("fs.img");
            let out = run_timeout(
                60,
                Command::new(BIN)
                    .arg("mkfs")
                    .arg(&img)
                    .args(["--size", TEST_IMAGE_SIZE]),
            );
            assert!(out.status.success(), "lanefs mkfs failed:\n{}", show(&out));
            img
        });
        let mut cmd = Command::new(BIN);
        cmd.arg("mount");
        match &image {
            Some(img) => cmd.arg(img).args(["--cache-size", TEST_IMAGE_CACHE]),
            None => cmd.arg("--memory"),
        };
        cmd.arg("--log-file")
            .arg(&log)
            .arg("--transport")
            .arg(transport())
            .args(if writeback() {
                &["-o", "writeback_cache"][..]
            } else {
                &[]
            })
            .args(env_mount_args())
            .args(args)
            .arg(&mnt)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or("warn".into()),
            );
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run_timeout(60, &mut cmd);
        assert!(out.status.success(), "lanefs mount failed:\n{}", show(&out));
        assert!(
            is_fuse_mounted(&mnt),
            "lanefs mount returned before the mount was visible"
        );
        TestMount {
            base,
            mnt,
            log,
            image,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if is_fuse_mounted(&self.mnt) {
            let ok = Command::new(BIN)
                .arg("umount")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                let _ = Command::new("fusermount3")
                    .arg("-uz")
                    .arg(&self.mnt)
                    .status();
            }
        }
        if let Some(img) = &self.image {
            if !is_fuse_mounted(&self.mnt) {
                check_image_after_unmount(img, &self.log, &self.mnt);
            }
        }
        if !is_fuse_mounted(&self.mnt) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}

/// Whether a process has `path` open (the daemon of an image mount keeps
/// its image open until it has written everything back and exited).
fn open_by_any_process(path: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path))
        })
    })
}

/// After an image mount's unmount: wait for its daemon to let go of the
/// image, then `lanefs fsck` it; anything but a clean image fails the test
/// (unless it is failing already).
fn check_image_after_unmount(img: &Path, log: &Path, mnt: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while open_by_any_process(img) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if std::thread::panicking() {
        return;
    }
    assert!(
        !open_by_any_process(img),
        "the daemon of {} still has its image open 120 s after the unmount",
        mnt.display()
    );
    let out = run_timeout(120, Command::new(BIN).arg("fsck").arg(img));
    assert!(
        out.status.success(),
        "lanefs fsck of the image after unmounting {}:\n{}\n--- daemon log ---\n{}",
        mnt.display(),
        show(&out),
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// The write end of a pipe whose read end is already closed: the first
/// write to it fails with EPIPE (deterministically, unlike `| head -1`,
/// which may read everything before it exits).
pub fn closed_pipe() -> Stdio {
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

/// A foreground daemon (`lanefs mount -f`) and its mount point: kills the
/// daemon and unmounts if the test fails half-way.
pub struct ForegroundDaemon(pub std::process::Child, pub PathBuf);

impl Drop for ForegroundDaemon {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
        if is_fuse_mounted(&self.1) {
            let _ = Command::new("fusermount3").arg("-uz").arg(&self.1).status();
        }
    }
}
