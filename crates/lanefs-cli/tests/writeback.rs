//! The kernel's writeback cache (`-o writeback_cache`) through a real
//! mount: INIT asks for it exactly when configured, write-only opens serve
//! the kernel's partial-page reads, `O_APPEND` from several descriptors
//! lands at the end, the kernel's mtime/size reach the daemon at close and
//! fsync, and a writer who is not the owner can close, fsync, truncate and
//! touch (the kernel's explicit-time SETATTRs), and `ENOSPC` comes back at
//! fsync, and at close where no other close of the file (a forked
//! child's close-on-exec) took it first. The fio, fsx, setuid-kill
//! and differential tests run with it too (integrity.rs, cli.rs,
//! difftest.rs). Needs root and /dev/fuse.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::*;

const WB: &[&str] = &["-o", "writeback_cache"];

fn stats(m: &TestMount) -> String {
    let out = run_timeout(30, Command::new(BIN).arg("stats").arg(&m.mnt));
    assert!(out.status.success(), "{}", show(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `FUSE_WRITEBACK_CACHE` (bit 16 of the INIT flags).
const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;

fn init_flags(text: &str) -> u64 {
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("init_flags="))
        .unwrap_or_else(|| panic!("no init_flags in:\n{text}"));
    u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
}

/// INIT asks for the writeback cache exactly when `-o writeback_cache`
/// is given, and the kernel grants it (the agreed flags are what
/// `lanefs stats` shows).
fn writeback_flag_negotiated_only_when_asked() {
    let m = TestMount::with("wb-init", WB, &[]);
    let text = stats(&m);
    assert!(text.lines().any(|l| l == "writeback_cache=true"), "{text}");
    assert_ne!(init_flags(&text) & FUSE_WRITEBACK_CACHE, 0, "{text}");
    drop(m);
    let m = TestMount::with("wb-off", &["-o", "no_writeback_cache"], &[]);
    let text = stats(&m);
    assert!(text.lines().any(|l| l == "writeback_cache=false"), "{text}");
    assert_eq!(init_flags(&text) & FUSE_WRITEBACK_CACHE, 0, "{text}");
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn open(p: &Path, flags: i32) -> i32 {
    // SAFETY: valid C string.
    let fd = unsafe { libc::open(c_path(p).as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    assert!(
        fd >= 0,
        "open {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    fd
}

fn pwrite(fd: i32, data: &[u8], off: i64) {
    // SAFETY: fd is open; the buffer is valid for its length.
    let n = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), off) };
    assert_eq!(
        n,
        data.len() as isize,
        "pwrite: {}",
        std::io::Error::last_os_error()
    );
}

fn write(fd: i32, data: &[u8]) {
    // SAFETY: fd is open; the buffer is valid for its length.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    assert_eq!(
        n,
        data.len() as isize,
        "write: {}",
        std::io::Error::last_os_error()
    );
}

fn fsync(fd: i32) {
    // SAFETY: fd is open.
    assert_eq!(
        unsafe { libc::fsync(fd) },
        0,
        "fsync: {}",
        std::io::Error::last_os_error()
    );
}

fn close(fd: i32) {
    // SAFETY: fd is open and ours.
    assert_eq!(
        unsafe { libc::close(fd) },
        0,
        "close: {}",
        std::io::Error::last_os_error()
    );
}

/// Drop the kernel's clean cached pages of `p` (so that the next partial
/// write must read the page from the daemon).
fn drop_pages(p: &Path) {
    let fd = open(p, libc::O_RDONLY);
    // SAFETY: fd is open.
    let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    close(fd);
}

/// Partial-page writes through a write-only descriptor: the kernel reads
/// the rest of each page through that same write-only handle. Read back
/// through another descriptor, the file is the old content with the new
/// bytes in place.
fn write_only_open_partial_pages() {
    let m = TestMount::with("wb-wronly", WB, &[]);
    let p = m.path("f");
    let mut model: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
    std::fs::write(&p, &model).unwrap();
    drop_pages(&p);
    let fd = open(&p, libc::O_WRONLY);
    for (off, data) in [
        (100usize, &b"first"[..]),
        (4096 + 4000, &b"straddles a page boundary"[..]),
        (3 * 4096 + 50, &b"past the old end"[..]),
    ] {
        pwrite(fd, data, off as i64);
        let end = off + data.len();
        if end > model.len() {
            model.resize(end, 0);
        }
        model[off..end].copy_from_slice(data);
    }
    // Read back through another descriptor while the first is open
    // (served from the kernel's cache), then after close and a page drop
    // (served by the daemon).
    assert_eq!(std::fs::read(&p).unwrap(), model, "before close");
    close(fd);
    drop_pages(&p);
    assert_eq!(std::fs::read(&p).unwrap(), model, "after close");
    // A write-only creat()ed file too.
    let q = m.path("g");
    let fd = open(&q, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
    pwrite(fd, b"abc", 5000);
    fsync(fd);
    close(fd);
    drop_pages(&q);
    let fd = open(&q, libc::O_WRONLY);
    pwrite(fd, b"Z", 4999);
    close(fd);
    let mut want = vec![0u8; 5003];
    want[4999..].copy_from_slice(b"Zabc");
    assert_eq!(std::fs::read(&q).unwrap(), want);
}

/// `O_APPEND` writes from two descriptors, interleaved: each lands at the
/// end (the kernel picks the offsets; the daemon must not re-apply
/// `O_APPEND` when the pages are written back).
fn append_from_two_fds_lands_at_end() {
    let m = TestMount::with("wb-append", WB, &[]);
    let p = m.path("log");
    std::fs::write(&p, b"head\n").unwrap();
    let a = open(&p, libc::O_WRONLY | libc::O_APPEND);
    let b = open(&p, libc::O_RDWR | libc::O_APPEND);
    let mut want = b"head\n".to_vec();
    for i in 0..600 {
        let (fd, tag) = if i % 3 == 0 { (b, 'B') } else { (a, 'A') };
        let rec = format!("{tag}{i:05} {}\n", "x".repeat(i % 37));
        write(fd, rec.as_bytes());
        want.extend_from_slice(rec.as_bytes());
        if i % 97 == 0 {
            fsync(fd);
        }
    }
    close(a);
    close(b);
    assert_eq!(std::fs::read(&p).unwrap(), want, "in the kernel's cache");
    drop_pages(&p);
    assert_eq!(std::fs::read(&p).unwrap(), want, "from the daemon");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), want.len() as u64);
}

fn stat_fd(fd: i32) -> libc::stat {
    // SAFETY: zeroed stat is a valid out-buffer; fd is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
    st
}

/// Ask the kernel to forget cached inodes and dentries (so the next
/// `stat` shows what the daemon has) when `LANEFS_TEST_DROP_CACHES=1`;
/// `false` otherwise. Off by default: `drop_caches` acts on every file
/// system of the machine and can wait on someone else's hung mount.
fn drop_inodes() -> bool {
    std::env::var("LANEFS_TEST_DROP_CACHES").is_ok_and(|v| v == "1")
        && std::fs::write("/proc/sys/vm/drop_caches", "2").is_ok()
}

/// The kernel owns mtime, ctime and size under the writeback cache: after
/// write + fsync and after write + close, the daemon holds exactly what
/// the kernel showed (seen again once the kernel has forgotten the inode).
fn mtime_and_size_reach_the_daemon() {
    let m = TestMount::with("wb-times", WB, &[]);
    let p = m.path("f");
    std::fs::write(&p, b"").unwrap();
    let before = std::fs::metadata(&p).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let fd = open(&p, libc::O_WRONLY);
    write(fd, &[7u8; 10000]);
    fsync(fd);
    let synced = stat_fd(fd);
    assert_eq!(synced.st_size, 10000);
    let mt = |st: &libc::stat| (st.st_mtime, st.st_mtime_nsec);
    assert!(
        mt(&synced) > (before.mtime(), before.mtime_nsec()),
        "a write moves mtime"
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    pwrite(fd, b"tail", 20000);
    let written = stat_fd(fd);
    assert_eq!(written.st_size, 20004);
    assert!(mt(&written) > mt(&synced));
    close(fd);
    let check = |what: &str| {
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.len(), 20004, "{what}: size");
        assert_eq!((md.mtime(), md.mtime_nsec()), mt(&written), "{what}: mtime");
        assert!(
            (md.ctime(), md.ctime_nsec()) >= mt(&written),
            "{what}: ctime before mtime"
        );
    };
    check("after close");
    if drop_inodes() {
        check("from the daemon");
    } else {
        eprintln!("daemon-side check skipped (LANEFS_TEST_DROP_CACHES=1 runs it)");
    }
    // ftruncate: size and mtime move together.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let fd = open(&p, libc::O_WRONLY);
    // SAFETY: fd is open.
    assert_eq!(unsafe { libc::ftruncate(fd, 5) }, 0);
    let t = stat_fd(fd);
    close(fd);
    assert!(mt(&t) > mt(&written));
    if drop_inodes() {
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(
            (md.len(), md.mtime(), md.mtime_nsec()),
            (5, t.st_mtime, t.st_mtime_nsec)
        );
    }
    assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 5]);
}

/// A writer who is not the owner: the kernel sends its own mtime/ctime as
/// explicit times at close and fsync and with a truncate, which the
/// engine alone would refuse to anyone but the owner. Close, fsync,
/// truncate and touch must all succeed, and `utimensat` with an explicit
/// time still needs the owner — checked by the kernel under
/// `default_permissions` (which `writeback_cache` implies), and by the
/// daemon with `no_default_permissions` for a `utimensat` that sets atime
/// (`touch -d` sets both).
fn non_owner_writer_close_fsync_truncate_touch() {
    non_owner_writer_case("allow_other,writeback_cache");
    non_owner_writer_case("allow_other,no_default_permissions,writeback_cache");
}

fn non_owner_writer_case(opts: &str) {
    require_tool("setpriv");
    require_tool("dd");
    let m = TestMount::with("wb-writer", &["-o", opts], &[]);
    let p = m.path("shared");
    std::fs::write(&p, b"").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = format!(
        "set -e; f={0}; \
         dd if=/dev/zero of=$f bs=1000 count=9 conv=fsync,notrunc status=none; \
         echo more >> $f; \
         truncate -s 4000 $f; \
         touch $f; \
         if touch -d @1000000000 $f 2>/dev/null; then echo explicit-time-allowed; exit 1; fi",
        p.display()
    );
    let out = sh_as_user_1000(&script);
    assert!(out.status.success(), "-o {opts}: {}", show(&out));
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!((md.len(), md.uid()), (4000, 0));
    assert!(md.mtime() > 1_000_000_000);
}

/// 8 MiB of `x` into `fd` in 64 KiB writes: the first write's errno, if any
/// (none expected: the writes only fill the kernel's page cache).
fn write_8m(fd: i32) -> Option<i32> {
    let chunk = vec![b'x'; 64 << 10];
    for _ in 0..128 {
        // SAFETY: fd is open; the buffer is valid for its length.
        let n = unsafe { libc::write(fd, chunk.as_ptr().cast(), chunk.len()) };
        if n < 0 {
            return std::io::Error::last_os_error().raw_os_error();
        }
        assert_eq!(n, chunk.len() as isize, "short write");
    }
    None
}

/// The errno of `fsync(fd)`; `None` when it succeeds.
fn fsync_errno(fd: i32) -> Option<i32> {
    // SAFETY: fd is open.
    let rc = unsafe { libc::fsync(fd) };
    (rc < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
}

/// The errno of `close(fd)`; `None` when it succeeds.
fn close_errno(fd: i32) -> Option<i32> {
    // SAFETY: fd is open and ours; it is not used again.
    let rc = unsafe { libc::close(fd) };
    (rc < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
}

/// What did not fit is never shown as written: read back from the
/// daemon (the kernel's clean pages dropped), the file holds only `x`
/// and zeros (pages are written back in any order, several at once, so
/// ones that did not fit may lie before ones that did and read back as a
/// hole), and no more `x` than 4 MiB. With `LANEFS_TEST_DROP_CACHES=1`
/// also once the kernel forgot the inode (the size the daemon stored).
fn lost_data_reads_back_as_holes(p: &Path) {
    let check = |what: &str| {
        let data = std::fs::read(p).unwrap();
        assert!(data.len() <= 8 << 20, "{what}: size {}", data.len());
        assert!(
            data.iter().all(|&b| b == b'x' || b == 0),
            "{what}: foreign bytes"
        );
        let kept = data.iter().filter(|&&b| b == b'x').count();
        assert!(
            kept <= 4 << 20,
            "{what}: {kept} bytes kept in a 4 MiB file system"
        );
    };
    drop_pages(p);
    check("the kernel's pages dropped");
    if drop_inodes() {
        check("the inode forgotten");
    }
}

fn enospc_mount() -> TestMount {
    TestMount::with(
        "wb-enospc",
        &["--capacity", "4M", "-o", "writeback_cache"],
        &[],
    )
}

/// What happens when the data does not fit: `write(2)` only fills the
/// kernel's page cache and succeeds; the daemon's `ENOSPC` comes back when
/// the pages are written back. Never lost silently, in the terms Linux
/// guarantees (docs/FUSE.md, "Writeback cache"):
///
/// * `fsync` of the descriptor reports it (the kernel's per-open-file
///   error sequence, `file_check_and_advance_wb_err`).
/// * Without `fsync`, `close` reports it — to the *first* close of any
///   descriptor of the file after the failure: FUSE's flush tests and
///   clears the mapping's `AS_ENOSPC` (`filemap_check_errors`). Here a
///   single-threaded writer (`dd`, its own process) closes.
/// * In a multi-threaded program another thread's `fork`/`posix_spawn`
///   copies the descriptor table, and the child's close-on-exec of the
///   inherited (`O_CLOEXEC`) descriptor is such a first close: it takes
///   the error, and the program's own `close` returns 0 (the CI flake of
///   this test, whose other tests spawn mounts and `umount`s in parallel;
///   forced here with one spawn between the writes and the close). The
///   error is still not lost: `fsync` of a descriptor opened after that
///   close, and of one open across the writes, each report it (no fsync
///   has seen it yet).
///
/// What did not fit reads back as holes, never as data.
fn enospc_surfaces_at_fsync_or_close() {
    // fsync.
    let m = enospc_mount();
    let p = m.path("big");
    let fd = open(&p, libc::O_WRONLY | libc::O_CREAT);
    let err = write_8m(fd).or_else(|| fsync_errno(fd));
    let _ = close_errno(fd);
    assert_eq!(err, Some(libc::ENOSPC), "8 MiB into 4 MiB, fsync");
    lost_data_reads_back_as_holes(&p);
    drop(m);

    // close, with nothing else holding the descriptor: `dd` checks the
    // close of its output and fails with the errno.
    require_tool("dd");
    let m = enospc_mount();
    let p = m.path("big");
    let out = run_timeout(
        60,
        Command::new("sh").arg("-c").arg(format!(
            "head -c {} /dev/zero | tr '\\0' x | dd of={} bs=64k iflag=fullblock status=none",
            8 << 20,
            p.display()
        )),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("closing output file")
            && err.contains("No space left on device"),
        "8 MiB into 4 MiB by dd, no fsync: close must report ENOSPC\n{}",
        show(&out)
    );
    lost_data_reads_back_as_holes(&p);
    drop(m);

    // close after a child inherited the descriptor and exec'ed: close
    // may return 0, the error stays for fsync.
    let m = enospc_mount();
    let p = m.path("big");
    let fd = open(&p, libc::O_WRONLY | libc::O_CREAT);
    let witness = open(&p, libc::O_RDONLY);
    assert_eq!(write_8m(fd), None, "write");
    let st = Command::new("true").status().unwrap();
    assert!(st.success());
    let closed = close_errno(fd);
    assert!(
        matches!(closed, None | Some(libc::ENOSPC)),
        "close after the child's close-on-exec: {closed:?}"
    );
    eprintln!(
        "close after a child's close-on-exec took the flag: {}",
        if closed.is_some() { "ENOSPC" } else { "0" }
    );
    let later = open(&p, libc::O_RDONLY);
    assert_eq!(
        fsync_errno(later),
        Some(libc::ENOSPC),
        "fsync of a descriptor opened after the close (close gave {closed:?})"
    );
    assert_eq!(
        fsync_errno(witness),
        Some(libc::ENOSPC),
        "fsync of a descriptor open across the writes (close gave {closed:?})"
    );
    let _ = close_errno(later);
    let _ = close_errno(witness);
    lost_data_reads_back_as_holes(&p);
}

on_both_transports!(
    writeback_flag_negotiated_only_when_asked,
    write_only_open_partial_pages,
    append_from_two_fds_lands_at_end,
    mtime_and_size_reach_the_daemon,
    non_owner_writer_close_fsync_truncate_touch,
    enospc_surfaces_at_fsync_or_close,
);
