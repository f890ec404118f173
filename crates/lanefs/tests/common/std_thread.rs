//! std's side of a `std_parity_*` test on a thread of its own, for the
//! calls whose std counterpart needs a per-thread state: an unprivileged
//! user's ([`as_user`]: per-thread `setfsuid`/`setfsgid`/`setgroups`,
//! beside a lanefs view with that credential) or the tmpfs directory as the
//! root ([`in_chroot`]: `unshare(CLONE_FS)`, then `chroot`, for the calls
//! about the root itself and absolute symlinks). The rest of the test
//! process stays root with its own root. Both need root.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Run `f` on a thread whose file-system ids are `uid`/`gid` with no
/// supplementary groups (per-thread system calls: the rest of the test
/// process stays root).
pub fn as_user<T: Send + 'static>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        // SAFETY: raw per-thread credential calls with valid arguments
        // (glibc's wrappers of setgroups would change every thread).
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
                0
            );
            libc::syscall(libc::SYS_setfsgid, gid);
            libc::syscall(libc::SYS_setfsuid, uid);
        }
        f()
    })
    .join()
    .expect("user thread")
}

/// Run `f` on a thread whose root and working directory are `root`
/// (`unshare(CLONE_FS)` first, so the rest of the process keeps its own):
/// absolute paths and `..` stay inside, as in lanefs.
pub fn in_chroot<T: Send + 'static>(root: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
    let dir = std::ffi::CString::new(root.as_os_str().as_bytes()).unwrap();
    std::thread::spawn(move || {
        // SAFETY: per-thread calls on valid NUL-terminated paths.
        unsafe {
            assert_eq!(libc::unshare(libc::CLONE_FS), 0, "unshare");
            assert_eq!(libc::chroot(dir.as_ptr()), 0, "chroot");
            assert_eq!(libc::chdir(c"/".as_ptr()), 0, "chdir");
        }
        f()
    })
    .join()
    .expect("chroot thread")
}
