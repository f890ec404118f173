//! The mount-stats attribute: the name through which a lanefs FUSE daemon
//! says how it serves a mount, and the one reader of it that `lanefs
//! stats` and `lanefs bench` share; and the mount-sync attribute, through
//! which `lanefs sync` asks the daemon to make everything durable. It lives here, in the lowest crate
//! that both the FUSE adapter and the benchmark depend on (the benchmark
//! through `lanefs`, which re-exports this crate), so that neither needs
//! the other. The engine itself never reads or answers it.
//!
//! No locks, no atomics: one `getxattr(2)` on the caller's thread (and,
//! for a sync, one `syncfs(2)` before it).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The extended attribute of a lanefs mount's root through which the FUSE
/// daemon says how it serves the mount: `key=value` lines (transport,
/// threads, protocol, INIT flags, …). The adapter answers GETXATTR of this
/// name on the root itself (`lanefs_fuse::dispatch`); a real xattr of that
/// name on the root cannot be read back.
pub const STATS_XATTR: &str = "user.lanefs.stats";

/// The extended attribute of a lanefs mount's root whose GETXATTR makes
/// the FUSE daemon write everything back and commit it (`Fs::sync`), as
/// `syncfs(2)` does on a local file system. Needed because the kernel
/// sends FUSE_SYNCFS only to virtiofs: on a `/dev/fuse` or io_uring mount
/// `syncfs(2)` and `sync(2)` write back the kernel's own dirty pages and
/// never reach the daemon. The value read is empty.
pub const SYNC_XATTR: &str = "user.lanefs.sync";

/// Most bytes of the stats text read (the daemon's is a few hundred).
const STATS_BYTES_MAX: usize = 4096;

/// The stats text ([`STATS_XATTR`]) of the lanefs mount whose root is
/// `root`: its `key=value` lines, as the daemon wrote them. Fails with the
/// error of `getxattr(2)` where `root` is not the root of a lanefs mount
/// (`ENODATA`, `EOPNOTSUPP`, `ENOENT`, …), and with
/// [`io::ErrorKind::InvalidInput`] for a path holding a NUL byte.
pub fn read_mount_stats(root: &Path) -> io::Result<String> {
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte");
    let path = CString::new(root.as_os_str().as_bytes()).map_err(|_| nul())?;
    let name = CString::new(STATS_XATTR).map_err(|_| nul())?;
    let mut buf = vec![0u8; STATS_BYTES_MAX];
    // SAFETY: `path` and `name` are NUL-terminated; `buf` is writable for
    // the length the call is given.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Make everything written to the lanefs mount whose root is `root`
/// durable: `syncfs(2)` (the kernel's writeback cache, if on, hands its
/// dirty pages to the daemon), then GETXATTR of [`SYNC_XATTR`] (the
/// daemon writes everything back and commits it; it returns once that is
/// durable). Fails with the error of either call where `root` is not the
/// root of a lanefs mount, as [`read_mount_stats`] does.
pub fn sync_mount(root: &Path) -> io::Result<()> {
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte");
    let path = CString::new(root.as_os_str().as_bytes()).map_err(|_| nul())?;
    let name = CString::new(SYNC_XATTR).map_err(|_| nul())?;
    let dir = std::fs::File::open(root)?;
    // SAFETY: `dir` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `path` and `name` are NUL-terminated; a null buffer of size
    // 0 asks only for the value's size.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_a_lanefs_mount_is_an_error() {
        let dir = std::env::temp_dir();
        let e = read_mount_stats(&dir).unwrap_err();
        assert!(e.raw_os_error().is_some(), "{e}");
        let e = read_mount_stats(Path::new("/nonexistent/lanefs-stats")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let e = read_mount_stats(Path::new("a\0b")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = sync_mount(&dir).unwrap_err();
        assert!(e.raw_os_error().is_some(), "{e}");
        let e = sync_mount(Path::new("/nonexistent/lanefs-sync")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
