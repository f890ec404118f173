//! File handles through a mount: `name_to_handle_at`, then
//! `open_by_handle_at` after the kernel dropped its inodes (xfstests
//! generic/426, 467, 477). The kernel encodes a FUSE handle as node id and
//! generation; to open one whose inode it evicted it asks the daemon for
//! the node id's inode (LOOKUP of `.`, with `FUSE_EXPORT_SUPPORT`) and, to
//! reconnect a directory, for its parent (LOOKUP of `..`). Until 2026-11
//! lanefs did not offer export support and every such open failed
//! `ESTALE`, as xfstests found.
//!
//! Checked: a file, a symlink (`O_PATH`), a directory two levels down and
//! its parent open by handle after `drop_caches`, with the right
//! contents; a handle of a file removed since is `ESTALE`, also once its
//! number is reused; the same on an image.

mod common;

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// `struct file_handle` with room for any handle (MAX_HANDLE_SZ 128).
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 128],
}

fn name_to_handle(path: &Path) -> FileHandle {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut h = FileHandle {
        handle_bytes: 128,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `c` is NUL-terminated, `h` has room for `handle_bytes`
    // bytes of handle, `mount_id` is a valid int; all outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut h as *mut FileHandle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "name_to_handle_at({}): {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    h
}

fn open_by_handle(mount_fd: &OwnedFd, h: &FileHandle, flags: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: `h` is a handle as name_to_handle_at filled it in; the
    // mount fd is open for the call's duration.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd.as_raw_fd(),
            h as *const FileHandle,
            flags,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn open_dir(path: &Path) -> OwnedFd {
    std::fs::File::open(path).unwrap().into()
}

/// Drop the kernel's dentries and inodes (FORGETs follow), so that an
/// `open_by_handle_at` has to ask the daemon.
fn evict() {
    std::fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
}

fn read_all(fd: OwnedFd) -> Vec<u8> {
    use std::io::Read;
    let mut f = std::fs::File::from(fd);
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// The names under `d` of the directory `fd` is open on (a listing
/// through the handle's descriptor).
fn list(fd: OwnedFd) -> Vec<String> {
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    let mut v: Vec<_> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn handles_open_after_eviction() {
    let m = TestMount::new("handles");
    std::fs::create_dir_all(m.path("a/b")).unwrap();
    std::fs::write(m.path("a/b/f"), b"by handle").unwrap();
    std::fs::write(m.path("a/g"), b"gone").unwrap();
    std::os::unix::fs::symlink("b/f", m.path("a/l")).unwrap();
    let f = name_to_handle(&m.path("a/b/f"));
    let g = name_to_handle(&m.path("a/g"));
    let l = name_to_handle(&m.path("a/l"));
    let b = name_to_handle(&m.path("a/b"));
    let a = name_to_handle(&m.path("a"));
    let l_ino = std::fs::symlink_metadata(m.path("a/l")).unwrap().ino();
    let root = open_dir(&m.mnt);
    std::fs::remove_file(m.path("a/g")).unwrap();
    for round in 0..3 {
        evict();
        let fd = open_by_handle(&root, &f, libc::O_RDONLY)
            .unwrap_or_else(|e| panic!("round {round}: open_by_handle(a/b/f): {e}"));
        assert_eq!(read_all(fd), b"by handle");
        let fd = open_by_handle(&root, &l, libc::O_PATH | libc::O_NOFOLLOW)
            .unwrap_or_else(|e| panic!("round {round}: open_by_handle(a/l): {e}"));
        // A non-directory opened by handle is a disconnected dentry (no
        // path): compare what it is.
        let got = std::fs::File::from(fd).metadata().unwrap();
        assert!(got.file_type().is_symlink(), "{got:?}");
        assert_eq!(got.ino(), l_ino);
        evict();
        let fd = open_by_handle(&root, &b, libc::O_RDONLY | libc::O_DIRECTORY)
            .unwrap_or_else(|e| panic!("round {round}: open_by_handle(a/b): {e}"));
        assert_eq!(list(fd), ["f"]);
        let fd = open_by_handle(&root, &a, libc::O_RDONLY | libc::O_DIRECTORY)
            .unwrap_or_else(|e| panic!("round {round}: open_by_handle(a): {e}"));
        assert_eq!(list(fd), ["b", "l"]);
        let e = open_by_handle(&root, &g, libc::O_RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "removed a/g: {e}");
    }
    // g's number reused by new files: still stale (another generation).
    for i in 0..64 {
        std::fs::write(m.path(&format!("a/n{i}")), b"new").unwrap();
    }
    evict();
    let e = open_by_handle(&root, &g, libc::O_RDONLY).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "removed a/g: {e}");
    drop(root);
    // Everything the kernel looked up by number is given back: all removable.
    std::fs::remove_dir_all(m.path("a")).unwrap();
    assert_eq!(std::fs::read_dir(&m.mnt).unwrap().count(), 0);
}

on_both_transports!(handles_open_after_eviction);
on_image_mount!(handles_open_after_eviction => handles_open_after_eviction_on_image);
