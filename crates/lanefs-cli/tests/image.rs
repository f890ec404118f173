//! The image store as a user meets it: `lanefs mkfs`, `lanefs mount IMAGE`,
//! `lanefs fsck`. Real mounts (as root), each daemon run in the foreground
//! as a child of the test so that it can be waited for (a clean unmount
//! ends with the daemon's final write-back) or SIGKILLed; every mount is
//! taken down on drop, even when a test fails.

mod common;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::*;

/// Seconds a daemon gets to mount, or to exit after its unmount.
const DAEMON_WAIT_SECS: u64 = 30;
/// Image size for the tests.
const IMAGE_SIZE: &str = "64M";
/// Files the workloads write.
const FILES: usize = 24;

/// `lanefs fsck` exit statuses (documented in `lanefs fsck --help`).
const FSCK_CLEAN: i32 = 0;
const FSCK_REPAIRED: i32 = 1;
const FSCK_UNCORRECTED: i32 = 4;
const FSCK_OPERATIONAL_ERROR: i32 = 8;

fn lanefs(args: &[&str]) -> Output {
    run_timeout(120, Command::new(BIN).args(args))
}

fn mkfs(img: &Path) {
    let out = lanefs(&["mkfs", img.to_str().unwrap(), "--size", IMAGE_SIZE]);
    assert!(out.status.success(), "mkfs failed:\n{}", show(&out));
}

fn fsck(img: &Path, repair: bool) -> Output {
    let mut args = vec!["fsck", img.to_str().unwrap()];
    if repair {
        args.push("--repair");
    }
    lanefs(&args)
}

/// A `lanefs mount IMAGE MNT --foreground` daemon, child of the test.
struct ImageMount {
    mnt: PathBuf,
    log: PathBuf,
    daemon: Option<Child>,
}

impl ImageMount {
    fn new(img: &Path, mnt: &Path, extra: &[&str]) -> ImageMount {
        let log = mnt.with_extension("log");
        let daemon = Command::new(BIN)
            .arg("mount")
            .arg("--foreground")
            .arg("--transport")
            .arg(transport())
            .arg("--log-file")
            .arg(&log)
            .args(extra)
            .arg(img)
            .arg(mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start lanefs mount");
        let mut m = ImageMount {
            mnt: mnt.to_path_buf(),
            log,
            daemon: Some(daemon),
        };
        let up = wait_until(DAEMON_WAIT_SECS, || {
            is_fuse_mounted(mnt) || m.daemon_exited()
        });
        assert!(
            up && is_fuse_mounted(mnt),
            "image mount did not come up:\n{}",
            m.take_output()
        );
        m
    }

    fn daemon_exited(&mut self) -> bool {
        self.daemon
            .as_mut()
            .is_none_or(|d| d.try_wait().ok().flatten().is_some())
    }

    /// Wait for the daemon to end; its stderr (the recovery report, errors).
    fn take_output(&mut self) -> String {
        let Some(d) = self.daemon.take() else {
            return String::new();
        };
        let out = d.wait_with_output().expect("wait for daemon");
        format!(
            "{}\n{}\n--- log ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// Clean unmount; waits for the daemon's final write-back and exit.
    fn unmount(mut self) -> String {
        let out = lanefs(&["umount", self.mnt.to_str().unwrap()]);
        assert!(out.status.success(), "umount failed:\n{}", show(&out));
        let d = self.daemon.as_mut().unwrap();
        assert!(
            wait_until(DAEMON_WAIT_SECS, || d.try_wait().ok().flatten().is_some()),
            "daemon did not exit after unmount"
        );
        let text = self.take_output();
        assert!(text.starts_with("exit status: 0"), "daemon failed: {text}");
        text
    }

    /// SIGKILL the daemon (a crash), then detach the dead mount.
    fn kill(mut self) {
        let mut d = self.daemon.take().unwrap();
        d.kill().expect("SIGKILL the daemon");
        let _ = d.wait();
        detach(&self.mnt);
    }
}

fn detach(mnt: &Path) {
    if is_fuse_mounted(mnt) {
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(mnt)
            .stderr(Stdio::null())
            .status();
    }
    if is_fuse_mounted(mnt) {
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    }
    assert!(!is_fuse_mounted(mnt), "could not detach {}", mnt.display());
}

impl Drop for ImageMount {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            if is_fuse_mounted(&self.mnt) {
                let _ = Command::new(BIN).arg("umount").arg(&self.mnt).status();
            }
            let exited = wait_until(DAEMON_WAIT_SECS, || d.try_wait().ok().flatten().is_some());
            if !exited {
                let _ = d.kill();
                let _ = d.wait();
            }
        }
        if is_fuse_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .status();
        }
    }
}

/// The test's directory: the image and a mount point.
struct Scene {
    base: PathBuf,
    img: PathBuf,
    mnt: PathBuf,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let base = unique_dir(name);
        let mnt = base.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Scene {
            img: base.join("fs.img"),
            base,
            mnt,
        }
    }

    fn mount(&self) -> ImageMount {
        ImageMount::new(&self.img, &self.mnt, &[])
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if !is_fuse_mounted(&self.mnt) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}

/// Deterministic contents of file `i`: sizes from 0 to ~300 KiB, crossing
/// page and extent boundaries.
fn body(i: usize) -> Vec<u8> {
    let len = (i * i * 577) % 300_000;
    (0..len)
        .map(|k| (k * 31 + i * 7 + k / 4096) as u8)
        .collect()
}

/// Where file `i` lives: spread over nested directories.
fn file_path(root: &Path, i: usize) -> PathBuf {
    root.join(format!("d{}/sub{}/f{i}", i % 3, i % 2))
}

fn write_file(path: &Path, data: &[u8], fsync: bool) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(data).unwrap();
    if fsync {
        f.sync_all().unwrap();
    }
}

/// Make the directory tree and write every file (fsyncing every other
/// one); returns the indexes of the fsynced files.
/// fsync every directory [`populate`] made, deepest first, and the root:
/// as POSIX asks, so that the path to each fsynced file is durable too.
fn fsync_populated_dirs(root: &Path) {
    for dir in [
        "d0/sub0", "d0/sub1", "d1/sub0", "d1/sub1", "d2/sub0", "d2/sub1", "d0", "d1", "d2", ".",
    ] {
        std::fs::File::open(root.join(dir))
            .unwrap()
            .sync_all()
            .unwrap();
    }
}

fn populate(root: &Path) -> Vec<usize> {
    for d in 0..3 {
        for s in 0..2 {
            std::fs::create_dir_all(root.join(format!("d{d}/sub{s}"))).unwrap();
        }
    }
    let mut synced = Vec::new();
    for i in 0..FILES {
        let fsync = i % 2 == 0;
        write_file(&file_path(root, i), &body(i), fsync);
        if fsync {
            synced.push(i);
        }
    }
    synced
}

fn check_file(root: &Path, i: usize) {
    let p = file_path(root, i);
    let got = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    assert!(
        got == body(i),
        "{}: {} bytes, expected {} (first difference at {:?})",
        p.display(),
        got.len(),
        body(i).len(),
        got.iter().zip(body(i)).position(|(a, b)| *a != b)
    );
}

fn assert_fsck(img: &Path, repair: bool, want: i32) -> String {
    let out = fsck(img, repair);
    assert_eq!(
        out.status.code(),
        Some(want),
        "fsck{} exit status:\n{}",
        if repair { " --repair" } else { "" },
        show(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tree_survives_unmount_and_remount() {
    let s = Scene::new("img-remount");
    mkfs(&s.img);
    let m = s.mount();
    populate(&s.mnt);
    std::os::unix::fs::symlink("d0/sub0/f0", s.mnt.join("link")).unwrap();
    std::fs::rename(file_path(&s.mnt, 1), s.mnt.join("moved")).unwrap();
    std::fs::hard_link(file_path(&s.mnt, 2), s.mnt.join("hard")).unwrap();
    std::fs::remove_file(file_path(&s.mnt, 3)).unwrap();
    std::fs::remove_dir(s.mnt.join("d2/sub1")).unwrap_or_else(|e| {
        assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "{e}");
    });
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);

    let m = s.mount();
    for i in (0..FILES).filter(|i| ![1, 3].contains(i)) {
        check_file(&s.mnt, i);
    }
    assert_eq!(std::fs::read(s.mnt.join("moved")).unwrap(), body(1));
    assert_eq!(std::fs::read(s.mnt.join("hard")).unwrap(), body(2));
    assert_eq!(
        std::fs::metadata(s.mnt.join("hard")).unwrap().nlink(),
        2,
        "hard link count"
    );
    assert!(!file_path(&s.mnt, 3).exists(), "unlinked file came back");
    assert_eq!(
        std::fs::read_link(s.mnt.join("link")).unwrap(),
        Path::new("d0/sub0/f0")
    );
    let mode = std::fs::metadata(file_path(&s.mnt, 0)).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o640 & !0o022, "mode of f0");
    let mut names: Vec<_> = std::fs::read_dir(&s.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d0", "d1", "d2", "hard", "link", "moved"]);
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);
}

fn fsynced_data_survives_sigkill() {
    let s = Scene::new("img-kill");
    mkfs(&s.img);
    // No background commit: only what fsync made durable may survive, so
    // the test checks exactly the fsync guarantee.
    let m = ImageMount::new(&s.img, &s.mnt, &["--commit-interval", "0"]);
    let synced = populate(&s.mnt);
    // As POSIX asks, fsync the directories created above so that the path
    // to each fsynced file is durable too. Without these fsyncs the files
    // are lost today: see `fsync_alone_makes_new_parent_directories_durable`.
    fsync_populated_dirs(&s.mnt);
    // Unsynced changes in flight at the kill.
    write_file(&s.mnt.join("d0/unsynced"), &[7u8; 70_000], false);
    m.kill();

    let mut m = ImageMount::new(&s.img, &s.mnt, &[]);
    for &i in &synced {
        check_file(&s.mnt, i);
    }
    // Files that were not fsynced may be missing, empty or whole; never
    // anything else.
    for i in (0..FILES).filter(|i| !synced.contains(i)) {
        if let Ok(got) = std::fs::read(file_path(&s.mnt, i)) {
            assert!(
                got.is_empty() || got == body(i),
                "unsynced f{i}: {} bytes of garbage",
                got.len()
            );
        }
    }
    let out = m.take_output_after_unmount();
    assert!(out.contains("recovered in"), "no recovery report: {out}");
    // TODO(issue 13 item 2): lanefs-core does not yet hand the store one
    // Txn per operation, so a SIGKILL between the records of one operation
    // can leave a directory inconsistent (crates/lanefs-image/tests/
    // engine_crash.rs, ignored). Until it does, fsck may find problems
    // after such a crash: recovery must still have made the image
    // mountable and every fsynced file whole (checked above), and
    // `fsck --repair` must leave it clean.
    let text = fsck(&s.img, false);
    if text.status.code() != Some(FSCK_CLEAN) {
        eprintln!(
            "KNOWN (engine without per-operation Txn): fsck after SIGKILL:\n{}",
            show(&text)
        );
        let after = fsck(&s.img, true);
        assert!(
            matches!(after.status.code(), Some(FSCK_CLEAN | FSCK_REPAIRED)),
            "fsck --repair could not fix the image after SIGKILL:\n{}",
            show(&after)
        );
        assert_fsck(&s.img, false, FSCK_CLEAN);
    }
}

impl ImageMount {
    /// Clean unmount; the daemon's stderr (its recovery report first).
    fn take_output_after_unmount(&mut self) -> String {
        let out = lanefs(&["umount", self.mnt.to_str().unwrap()]);
        assert!(out.status.success(), "umount failed:\n{}", show(&out));
        self.take_output()
    }
}

/// Issue 13 item 4: a file's fsync makes its directory entry durable, and
/// the path to it. Each operation reaches the store as one `Txn` (entry
/// and record together), and fsync commits every lane's journal buffer,
/// so every operation made before the fsync is durable with it (the new
/// directories too, without an fsync of theirs). Until the one-`Txn`
/// change this failed (the root's entry `a` named an inode whose record,
/// link count 0, recovery freed as an orphan); it stayed `#[ignore]`d
/// after, untried, until 2026-11.
fn fsync_alone_makes_new_parent_directories_durable() {
    let s = Scene::new("img-fsync-path");
    mkfs(&s.img);
    let m = ImageMount::new(&s.img, &s.mnt, &["--commit-interval", "0"]);
    std::fs::create_dir_all(s.mnt.join("a/b")).unwrap();
    write_file(&s.mnt.join("a/b/f"), &body(7), true);
    m.kill();
    let m = s.mount();
    assert_eq!(std::fs::read(s.mnt.join("a/b/f")).unwrap(), body(7));
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);
}

/// Commit interval of the background-commit test, and how long it waits
/// before the kill (many intervals, so a loaded machine still commits).
const SHORT_INTERVAL: &str = "0.2";
const WAIT_FOR_COMMITS: std::time::Duration = std::time::Duration::from_secs(3);

fn background_commit_bounds_what_sigkill_loses() {
    let s = Scene::new("img-commit");
    mkfs(&s.img);
    let m = ImageMount::new(&s.img, &s.mnt, &["--commit-interval", SHORT_INTERVAL]);
    std::fs::create_dir(s.mnt.join("late")).unwrap();
    for i in 0..4 {
        write_file(&s.mnt.join(format!("late/f{i}")), &body(i + 10), false);
    }
    std::thread::sleep(WAIT_FOR_COMMITS);
    m.kill();
    let m = s.mount();
    for i in 0..4 {
        let got = std::fs::read(s.mnt.join(format!("late/f{i}"))).unwrap();
        assert!(got == body(i + 10), "late/f{i}: {} bytes", got.len());
    }
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);
}

/// `-o dirsync`: directory changes are durable when the call returns
/// (here: new directories and a new, empty file survive SIGKILL with no
/// background commit and no fsync); `-o sync`: data writes too.
fn sync_and_dirsync_make_changes_durable() {
    let s = Scene::new("img-dirsync");
    mkfs(&s.img);
    let m = ImageMount::new(&s.img, &s.mnt, &["--commit-interval", "0", "-o", "dirsync"]);
    std::fs::create_dir_all(s.mnt.join("a/b")).unwrap();
    std::fs::write(s.mnt.join("a/b/empty"), b"").unwrap();
    std::fs::rename(s.mnt.join("a/b/empty"), s.mnt.join("a/moved")).unwrap();
    m.kill();
    let m = ImageMount::new(&s.img, &s.mnt, &["--commit-interval", "0", "-o", "sync"]);
    assert!(s.mnt.join("a/b").is_dir(), "dirsync: mkdir lost");
    assert_eq!(std::fs::metadata(s.mnt.join("a/moved")).unwrap().len(), 0);
    assert!(!s.mnt.join("a/b/empty").exists(), "dirsync: rename lost");
    std::fs::create_dir(s.mnt.join("c")).unwrap();
    write_file(&s.mnt.join("c/data"), &body(11), false);
    m.kill();
    let m = s.mount();
    assert_eq!(
        std::fs::read(s.mnt.join("c/data")).unwrap(),
        body(11),
        "sync: data lost"
    );
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);
}

/// `syncfs(2)` on a FUSE mount never reaches the daemon (the kernel sends
/// FUSE_SYNCFS only to virtiofs), so it keeps nothing through a SIGKILL;
/// `lanefs sync MNT` does (the daemon writes everything back and commits
/// it), with the kernel's writeback cache too. Until 2026-11 there was no
/// way to sync a whole mount, and README promised `syncfs` durability.
fn lanefs_sync_makes_everything_durable() {
    for wb in [false, true] {
        let s = Scene::new(if wb { "img-sync-wb" } else { "img-sync" });
        mkfs(&s.img);
        let mut args = vec!["--commit-interval", "0"];
        if wb {
            args.extend(["-o", "writeback_cache"]);
        }
        let m = ImageMount::new(&s.img, &s.mnt, &args);
        std::fs::create_dir(s.mnt.join("d")).unwrap();
        write_file(&s.mnt.join("d/a"), &body(1), false);
        let out = lanefs(&["sync", s.mnt.to_str().unwrap()]);
        assert!(out.status.success(), "lanefs sync failed:\n{}", show(&out));
        // Not synced: may be lost.
        write_file(&s.mnt.join("d/b"), &body(2), false);
        m.kill();
        assert_fsck(&s.img, false, FSCK_CLEAN);
        let m = s.mount();
        assert_eq!(
            std::fs::read(s.mnt.join("d/a")).ok(),
            Some(body(1)),
            "writeback_cache {wb}: a file written before lanefs sync lost"
        );
        m.unmount();
    }
    let out = lanefs(&["sync", std::env::temp_dir().to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "lanefs sync of a non-lanefs directory succeeded"
    );
}

/// `(blocks, free, available, inodes in use)` of the file system at `path`.
fn df(path: &Path) -> (u64, u64, u64, u64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: zeroed statvfs is a valid out-buffer for statvfs(3).
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `s` a valid out-buffer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    (s.f_blocks, s.f_bfree, s.f_bavail, s.f_files - s.f_ffree)
}

/// `df` after `rm -r` and `lanefs sync` shows what it showed before the
/// files were made, as on ext4 or tmpfs. Until 2026-11 the entry and chain
/// blocks a checkpoint had written for them (here the remount's) stayed
/// counted until the next checkpoint, which nothing but a half-full
/// journal or cache pressure starts: `df` stayed below its start until a
/// remount.
fn removals_show_in_df_after_lanefs_sync() {
    let s = Scene::new("img-df");
    mkfs(&s.img);
    let args = ["--commit-interval", "0"];
    let m = ImageMount::new(&s.img, &s.mnt, &args);
    let start = df(&s.mnt);
    let d = s.mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..3000 {
        // Long names: more entry blocks than the directory's slot lists.
        let name = format!("a-file-with-a-name-long-enough-to-fill-blocks-{i:06}");
        let data = if i % 3 == 0 {
            vec![i as u8; 4096]
        } else {
            Vec::new()
        };
        std::fs::write(d.join(name), data).unwrap();
    }
    m.unmount();
    // Its recovery checkpoint writes the directory's and files' homes.
    let m = ImageMount::new(&s.img, &s.mnt, &args);
    let full = df(&s.mnt);
    assert!(full.0 < start.0, "no home blocks? {start:?} {full:?}");
    std::fs::remove_dir_all(&d).unwrap();
    let out = lanefs(&["sync", s.mnt.to_str().unwrap()]);
    assert!(out.status.success(), "lanefs sync failed:\n{}", show(&out));
    // The kernel's FORGETs of the removed inodes may still be on their way.
    wait_until(10, || df(&s.mnt) == start);
    assert_eq!(
        df(&s.mnt),
        start,
        "before the files {start:?}, with them {full:?}"
    );
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);
}

/// An image is used by one process at a time: while it is mounted, a
/// second mount of it, `fsck` (with and without `--repair`) and
/// `mkfs --force` refuse with one line naming it in use, and leave the
/// mount and the image as they were. Until this held, each went ahead:
/// two daemons wrote the same image, `fsck --repair` rewrote a live one,
/// `mkfs --force` formatted it under the mount.
fn a_mounted_image_is_refused_by_mount_fsck_and_mkfs() {
    let s = Scene::new("img-in-use");
    mkfs(&s.img);
    let m = s.mount();
    populate(&s.mnt);
    let img = s.img.to_str().unwrap();
    let other = s.base.join("other");
    std::fs::create_dir(&other).unwrap();
    let out = lanefs(&["mount", img, other.to_str().unwrap()]);
    assert_one_line_error(&out, None, "in use");
    assert!(!is_fuse_mounted(&other), "second mount of a live image");
    for repair in [false, true] {
        let out = fsck(&s.img, repair);
        assert_one_line_error(&out, Some(FSCK_OPERATIONAL_ERROR), "in use");
    }
    let out = lanefs(&["mkfs", img, "--size", IMAGE_SIZE, "--force"]);
    assert_one_line_error(&out, None, "in use");
    for i in 0..FILES {
        check_file(&s.mnt, i);
    }
    m.unmount();
    assert_fsck(&s.img, false, FSCK_CLEAN);
    let m = s.mount();
    for i in 0..FILES {
        check_file(&s.mnt, i);
    }
    m.unmount();
}

/// The shutdown signals (SIGHUP, SIGINT, SIGTERM) as a bit mask of
/// `/proc/PID/task/TID/status`'s `SigBlk`.
const SHUTDOWN_SIGNALS_MASK: u64 =
    1 << (libc::SIGHUP - 1) | 1 << (libc::SIGINT - 1) | 1 << (libc::SIGTERM - 1);

/// Threads of process `pid` other than its main thread that leave one of
/// the shutdown signals unblocked: `(name, SigBlk)`.
fn threads_taking_shutdown_signals(pid: u32) -> Vec<(String, String)> {
    let mut open = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap();
        if t.file_name().to_str() == Some(&pid.to_string()) {
            // The main thread unblocks them inside sigtimedwait only,
            // where it spends its time: what it shows is not its mask.
            continue;
        }
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue; // exited meanwhile
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let blocked = u64::from_str_radix(&field("SigBlk:"), 16).unwrap_or(0);
        if blocked & SHUTDOWN_SIGNALS_MASK != SHUTDOWN_SIGNALS_MASK {
            open.push((field("Name:"), field("SigBlk:")));
        }
    }
    open
}

/// SIGTERM unmounts cleanly whichever thread the kernel hands it to. A
/// process-directed signal goes to any thread that does not block it, and
/// its default action there ends the process. Until 2026-11 the image
/// store's commit thread (started with the store, before the daemon
/// blocked its shutdown signals) left them unblocked: a SIGTERM that came
/// while the main thread was out of `sigtimedwait` (running a background
/// commit, say) killed the daemon with no unmount (a dead mount answering
/// `ENOTCONN` left behind) and no final write-back (1 of 3 SIGTERMs in a
/// mount/write/SIGTERM loop with `--commit-interval 1`). Now every thread
/// but the main one blocks them, and a SIGTERM writes everything back.
fn sigterm_unmounts_whichever_thread_takes_it() {
    let s = Scene::new("img-sigterm");
    mkfs(&s.img);
    for round in 0..3 {
        let mut m = ImageMount::new(&s.img, &s.mnt, &["--commit-interval", "1"]);
        let pid = m.daemon.as_ref().unwrap().id();
        let open = threads_taking_shutdown_signals(pid);
        assert!(
            open.is_empty(),
            "daemon threads that a SIGTERM may kill (name, SigBlk): {open:?}"
        );
        if round == 0 {
            populate(&s.mnt);
        } else {
            // Not fsynced: only the clean unmount SIGTERM starts keeps it.
            write_file(&s.mnt.join(format!("r{round}")), &body(round + 7), false);
        }
        // SAFETY: kill(2) on our own child, which we have not reaped.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
        let d = m.daemon.as_mut().unwrap();
        assert!(
            wait_until(DAEMON_WAIT_SECS, || d.try_wait().ok().flatten().is_some()),
            "daemon did not exit after SIGTERM"
        );
        let text = m.take_output();
        assert!(
            text.starts_with("exit status: 0"),
            "SIGTERM: daemon failed: {text}"
        );
        assert!(!is_fuse_mounted(&s.mnt), "SIGTERM left the mount behind");
        assert_fsck(&s.img, false, FSCK_CLEAN);
    }
    let m = s.mount();
    for i in 0..FILES {
        check_file(&s.mnt, i);
    }
    for round in 1..3 {
        assert_eq!(
            std::fs::read(s.mnt.join(format!("r{round}"))).unwrap(),
            body(round + 7)
        );
    }
    m.unmount();
}

/// A small tmpfs for an image to live on, unmounted on drop.
struct HostTmpfs(PathBuf);

impl HostTmpfs {
    fn new(dir: PathBuf, size: &str) -> HostTmpfs {
        std::fs::create_dir(&dir).unwrap();
        let out = run_timeout(
            30,
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "none"])
                .arg(&dir),
        );
        assert!(out.status.success(), "mount tmpfs: {}", show(&out));
        HostTmpfs(dir)
    }
}

impl Drop for HostTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The image's host file system runs out of room under a sparse image
/// (the image bigger than the host's free space: lanefs thinks it has
/// room). What fails is the write-back, and the store fails (calls then
/// answer `EIO`; docs/FORMAT.md, "Errors"): the unmount's final write-back
/// cannot land, and the daemon says so and exits non-zero (until 2026-11
/// it logged the error and exited 0, as if nothing was lost). The image
/// stays recoverable: fsck is clean, a mount fails with one line while the
/// host is full (recovery's checkpoint needs room), and once there is room
/// it mounts with every fsynced file intact.
fn host_full_under_a_sparse_image_loses_only_what_was_not_fsynced() {
    let s = Scene::new("img-host-full");
    let host = HostTmpfs::new(s.base.join("host"), "24m");
    let img = host.0.join("fs.img");
    mkfs(&img);
    let m = ImageMount::new(&img, &s.mnt, &["--commit-interval", "0"]);
    let synced = populate(&s.mnt);
    fsync_populated_dirs(&s.mnt);
    // Fill the host beside the image, then write through the mount what
    // the image has room for but its host has not.
    let mut filler = std::fs::File::create(host.0.join("filler")).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    while filler.write_all(&chunk).is_ok() {}
    while filler.write_all(&chunk[..4096]).is_ok() {}
    drop(filler);
    write_file(&s.mnt.join("unsynced"), &vec![7u8; 4 << 20], false);

    // SIGTERM rather than `lanefs umount`: the kernel may still hold the
    // file just closed (its RELEASE in flight, or a child of a parallel
    // test between fork and exec) and answer EBUSY; the daemon then
    // detaches lazily.
    let mut m = m;
    let pid = m.daemon.as_ref().unwrap().id();
    // SAFETY: kill(2) on our own child, which we have not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let d = m.daemon.as_mut().unwrap();
    assert!(
        wait_until(DAEMON_WAIT_SECS, || d.try_wait().ok().flatten().is_some()),
        "daemon did not exit after SIGTERM"
    );
    assert!(!is_fuse_mounted(&s.mnt), "SIGTERM left the mount behind");
    let text = m.take_output();
    assert!(
        !text.starts_with("exit status: 0")
            && text.contains("final write-back to the image failed"),
        "the final write-back failed and the daemon did not say so: {text}"
    );
    // And why: every call after the failure answers EIO, but the daemon
    // names the error that failed the store.
    assert!(
        text.contains("the image store failed on ENOSPC"),
        "the daemon did not say the host is full: {text}"
    );
    assert!(!text.contains("panicked"), "{text}");
    assert_fsck(&img, false, FSCK_CLEAN);
    let out = lanefs(&["mount", img.to_str().unwrap(), s.mnt.to_str().unwrap()]);
    assert_one_line_error(&out, None, "No space left on device");
    assert!(!is_fuse_mounted(&s.mnt), "mounted on a full host");

    std::fs::remove_file(host.0.join("filler")).unwrap();
    assert_fsck(&img, false, FSCK_CLEAN);
    let m = ImageMount::new(&img, &s.mnt, &[]);
    for &i in &synced {
        check_file(&s.mnt, i);
    }
    m.unmount();
    assert_fsck(&img, false, FSCK_CLEAN);
}

/// A failed store fails every background commit from then on: the daemon
/// logs the first, with the store's error, and at the end how many failed
/// (until 2026-11 it logged `EIO` every commit interval for as long as it
/// ran). It still exits non-zero naming the store's error.
fn a_failed_store_is_logged_once_not_every_commit() {
    let s = Scene::new("img-fail-log");
    let host = HostTmpfs::new(s.base.join("host"), "24m");
    let img = host.0.join("fs.img");
    mkfs(&img);
    let mut m = ImageMount::new(&img, &s.mnt, &["--commit-interval", "0.1"]);
    let mut filler = std::fs::File::create(host.0.join("filler")).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    while filler.write_all(&chunk).is_ok() {}
    while filler.write_all(&chunk[..4096]).is_ok() {}
    drop(filler);
    write_file(&s.mnt.join("unsynced"), &vec![7u8; 4 << 20], false);
    // Some twenty commit intervals after the failure.
    let failed = wait_until(DAEMON_WAIT_SECS, || {
        std::fs::read_to_string(&m.log).is_ok_and(|t| t.contains("background commit failed"))
    });
    assert!(failed, "no commit failed: {}", m.take_output());
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = m.daemon.as_ref().unwrap().id();
    // SAFETY: kill(2) on our own child, which we have not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let d = m.daemon.as_mut().unwrap();
    assert!(
        wait_until(DAEMON_WAIT_SECS, || d.try_wait().ok().flatten().is_some()),
        "daemon did not exit after SIGTERM"
    );
    let text = m.take_output();
    assert!(!text.starts_with("exit status: 0"), "{text}");
    assert_eq!(
        text.matches("background commit failed").count(),
        1,
        "logged more than once: {text}"
    );
    assert!(
        text.contains("background commit failed (the image store failed on ENOSPC"),
        "{text}"
    );
    assert!(
        text.contains("background commits failed ("),
        "no count at the end: {text}"
    );
    assert!(text.contains("the image store failed on ENOSPC"), "{text}");
    assert_fsck(&img, false, FSCK_CLEAN);
}

on_both_transports!(
    host_full_under_a_sparse_image_loses_only_what_was_not_fsynced,
    a_failed_store_is_logged_once_not_every_commit,
    sigterm_unmounts_whichever_thread_takes_it,
    a_mounted_image_is_refused_by_mount_fsck_and_mkfs,
    lanefs_sync_makes_everything_durable,
    removals_show_in_df_after_lanefs_sync,
    fsync_alone_makes_new_parent_directories_durable,
    tree_survives_unmount_and_remount,
    fsynced_data_survives_sigkill,
    background_commit_bounds_what_sigkill_loses,
    sync_and_dirsync_make_changes_durable
);

/// Whether another open of `img` holds its `flock` (a daemon that has not
/// let go of it).
fn image_held(img: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(img).unwrap();
    // SAFETY: flock on a descriptor we own; no memory is touched.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    r != 0
}

/// The kernel lets go of a FUSE mount before its daemon has written the
/// image back. Plain `umount` then a mount or `fsck` of the image met a
/// daemon still writing, and failed "in use" once the write-back took more
/// than 5 s (xfstests generic/650); `lanefs umount` returned before the
/// image was whole, so a copy of it taken next missed the last changes.
/// Now the daemon marks the image as finishing from the end of its
/// session (an opener waits for it), and `lanefs umount` returns once the
/// daemon has let go. The mount's source is the image's path.
#[test]
fn unmounted_daemons_finish_before_the_next_user_of_the_image() {
    let s = Scene::new("img-finish");
    let img = s.img.to_str().unwrap();
    let out = lanefs(&["mkfs", img, "--size", "512M"]);
    assert!(out.status.success(), "{}", show(&out));
    let canonical = s.img.canonicalize().unwrap();
    let dirty = vec![0x5a_u8; 96 << 20];
    // Only the final write-back writes the data (no background commit).
    let extra = ["--commit-interval", "0"];

    // umount(8): the next `fsck` waits for the daemon's mark, not 5 s.
    let mut m = ImageMount::new(&s.img, &s.mnt, &extra);
    assert_eq!(
        mount_source(&s.mnt).as_deref(),
        canonical.to_str(),
        "the source is the image"
    );
    std::fs::write(s.mnt.join("big"), &dirty).unwrap();
    let st = Command::new("umount").arg(&s.mnt).status().unwrap();
    assert!(st.success(), "umount: {st}");
    let probe = std::fs::File::open(&s.img).unwrap();
    let mut marked = false;
    assert!(
        wait_until(DAEMON_WAIT_SECS, || {
            marked |= lanefs_image::is_finishing(&probe);
            !image_held(&s.img)
        }),
        "the daemon never let go of the image"
    );
    assert!(marked, "the daemon wrote back without marking the image");
    assert!(m.take_output().starts_with("exit status: 0"));
    assert_fsck(&s.img, false, FSCK_CLEAN);

    // `lanefs umount`: the image is free when it returns.
    let m = ImageMount::new(&s.img, &s.mnt, &extra);
    assert_eq!(
        std::fs::metadata(s.mnt.join("big")).unwrap().len(),
        dirty.len() as u64
    );
    std::fs::write(s.mnt.join("big2"), &dirty).unwrap();
    let out = lanefs(&["umount", s.mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        !image_held(&s.img),
        "lanefs umount returned before the daemon let go"
    );
    drop(m);
    assert_fsck(&s.img, false, FSCK_CLEAN);
}

/// Build an image through the Rust API (no mount needed).
fn image_with_files(img: &Path) {
    let fs = lanefs::Filesystem::create_image(img, 32 << 20).unwrap();
    fs.create_dir_all("/a/b").unwrap();
    for i in 0..8 {
        fs.write(format!("/a/b/f{i}"), body(i + 5)).unwrap();
    }
    fs.write("/top", b"top").unwrap();
    fs.sync().unwrap();
}

/// Inode numbers of every live inode slot in the image (512-byte slots
/// with magic `INOD`, state 1; docs/FORMAT.md "Inode table and slots").
fn live_slots(image: &[u8]) -> Vec<(usize, u64)> {
    const SLOT: usize = 512;
    (0..image.len() / SLOT)
        .map(|k| k * SLOT)
        .filter(|&off| &image[off..off + 4] == b"INOD" && image[off + 4] == 1)
        .map(|off| {
            let ino = u64::from_le_bytes(image[off + 8..off + 16].try_into().unwrap());
            (off, ino)
        })
        .collect()
}

#[test]
fn fsck_clean_image_exits_0_and_repair_fixes_a_corrupt_copy() {
    let s = Scene::new("img-fsck");
    image_with_files(&s.img);
    let text = assert_fsck(&s.img, false, FSCK_CLEAN);
    assert!(text.contains(": clean:"), "{text}");
    // Corrupt every slot of the newest inode (a file under /a/b): both
    // copies fail their checksum, so the inode is unreadable.
    let mut bytes = std::fs::read(&s.img).unwrap();
    let slots = live_slots(&bytes);
    let victim = slots.iter().map(|&(_, ino)| ino).max().unwrap();
    assert!(victim > 1, "only the root is live: {slots:?}");
    for &(off, _) in slots.iter().filter(|&&(_, ino)| ino == victim) {
        bytes[off + 100] ^= 0xff;
    }
    let bad = s.base.join("bad.img");
    std::fs::write(&bad, &bytes).unwrap();
    let text = assert_fsck(&bad, false, FSCK_UNCORRECTED);
    assert!(
        text.contains("PROBLEMS") && text.contains("problem:"),
        "{text}"
    );
    let text = assert_fsck(&bad, true, FSCK_REPAIRED);
    assert!(text.contains("repaired:"), "{text}");
    assert_fsck(&bad, false, FSCK_CLEAN);
    // The rest is still there.
    let fs = lanefs::Filesystem::open_image(&bad).unwrap();
    let mut left = 0;
    if let Ok(top) = fs.read("/top") {
        assert_eq!(top, b"top");
        left += 1;
    }
    for i in 0..8 {
        if let Ok(got) = fs.read(format!("/a/b/f{i}")) {
            assert!(got == body(i + 5), "/a/b/f{i} changed");
            left += 1;
        }
    }
    assert_eq!(left, 8, "exactly the corrupt file was dropped");
}

/// A failed command: non-zero status `want` (any when `None`), one line
/// on stderr, no panic.
fn assert_one_line_error(out: &Output, want: Option<i32>, mentions: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded:\n{}", show(out));
    if let Some(w) = want {
        assert_eq!(out.status.code(), Some(w), "{}", show(out));
    }
    assert_eq!(err.trim_end().lines().count(), 1, "not one line:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(mentions), "expected '{mentions}' in: {err}");
}

#[test]
fn bad_input_gives_one_line_errors() {
    let s = Scene::new("img-bad");
    let p = |name: &str| s.base.join(name).to_str().unwrap().to_string();
    // mkfs: too small, no size, an existing image without --force.
    let out = lanefs(&["mkfs", &p("small.img"), "--size", "64k"]);
    assert_one_line_error(&out, None, "too small");
    let out = lanefs(&["mkfs", &p("nosize.img")]);
    assert_one_line_error(&out, None, "--size");
    mkfs(&s.img);
    let img = s.img.to_str().unwrap();
    let out = lanefs(&["mkfs", img, "--size", IMAGE_SIZE]);
    assert_one_line_error(&out, None, "--force");
    let out = lanefs(&["mkfs", img, "--size", IMAGE_SIZE, "--force"]);
    assert!(out.status.success(), "{}", show(&out));

    // A missing, a foreign, a truncated and a zeroed image.
    std::fs::write(p("foreign.img"), vec![0x5au8; 1 << 20]).unwrap();
    let mut whole = std::fs::read(&s.img).unwrap();
    std::fs::write(p("truncated.img"), &whole[..4 << 20]).unwrap();
    whole[..2 * 4096].fill(0);
    std::fs::write(p("nosuper.img"), &whole).unwrap();
    std::fs::write(p("tiny.img"), b"tiny").unwrap();
    let mnt = s.mnt.to_str().unwrap();
    for (name, says) in [
        ("missing.img", "No such file"),
        ("foreign.img", "not a lanefs image"),
        ("truncated.img", "truncated"),
        ("nosuper.img", "not a lanefs image"),
        ("tiny.img", "too small"),
    ] {
        let out = lanefs(&["fsck", &p(name)]);
        assert_one_line_error(&out, Some(FSCK_OPERATIONAL_ERROR), says);
        let out = lanefs(&["mount", &p(name), mnt]);
        assert_one_line_error(&out, None, says);
        assert!(!is_fuse_mounted(&s.mnt), "{name} got mounted");
    }
    // The API says the same.
    let err = lanefs::Filesystem::open_image(p("foreign.img")).unwrap_err();
    assert!(err.to_string().contains("not a lanefs image"), "{err}");
}

/// A foreground daemon whose stderr is a pipe nobody reads any more (a
/// supervisor gone, `lanefs mount -f … 2>&1 | head -0`) mounts, serves and
/// unmounts on SIGTERM; a command's error there exits as it would with
/// its stderr open (mount 1, fsck 8). Until 2026-11 the
/// daemon's `eprintln!` of the recovery line panicked ("failed printing to
/// stderr: Broken pipe"): no mount, exit 101, as did every error line.
#[test]
fn a_closed_pipe_is_no_panic() {
    let s = Scene::new("img-stderr");
    mkfs(&s.img);
    let mut m = ImageMount {
        mnt: s.mnt.clone(),
        log: s.base.join("daemon.log"),
        daemon: Some(
            Command::new(BIN)
                .args(["mount", "--foreground", "--log-file"])
                .arg(s.base.join("daemon.log"))
                .arg(&s.img)
                .arg(&s.mnt)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(closed_pipe())
                .spawn()
                .unwrap(),
        ),
    };
    let up = wait_until(DAEMON_WAIT_SECS, || {
        is_fuse_mounted(&s.mnt) || m.daemon_exited()
    });
    assert!(
        up && is_fuse_mounted(&s.mnt),
        "no mount: {}",
        m.take_output()
    );
    write_file(&s.mnt.join("f"), b"kept", false);
    let pid = m.daemon.as_ref().unwrap().id();
    // SAFETY: kill(2) on our own child, which we have not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let status = m.daemon.take().unwrap().wait().unwrap();
    assert!(status.success(), "daemon: {status}");
    assert!(!is_fuse_mounted(&s.mnt));

    let status = Command::new(BIN)
        .args(["mount", "--foreground"])
        .arg(s.base.join("missing.img"))
        .arg(&s.mnt)
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "mount of a missing image: {status}");
    let status = Command::new(BIN)
        .arg("fsck")
        .arg(s.base.join("missing.img"))
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(FSCK_OPERATIONAL_ERROR),
        "fsck of a missing image: {status}"
    );
    // The same for stdout: a report nobody reads (`lanefs fsck img | head
    // -0`) is no panic (exit 101 before) but the report's own status.
    let status = Command::new(BIN)
        .arg("fsck")
        .arg(&s.img)
        .stdout(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "fsck of a clean image: {status}");
    let status = Command::new(BIN)
        .args(["mkfs", "--size", IMAGE_SIZE])
        .arg(s.base.join("second.img"))
        .stdout(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "mkfs: {status}");
    let m = s.mount();
    assert_eq!(std::fs::read(s.mnt.join("f")).unwrap(), b"kept");
    m.unmount();
}
