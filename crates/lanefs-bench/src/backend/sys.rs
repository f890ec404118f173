//! The syscall backend: any directory of any mounted file system.
//!
//! Every operation is one or a few plain syscalls relative to a directory
//! file descriptor opened on the run's root (`fstatat`, `openat`,
//! `getdents64`, `unlinkat`, `renameat`, `pread`, `pwrite`, `write`,
//! `ftruncate`, `fsync`, `close`), exactly what a C program would call, so the
//! kernel does its full path walk on each path operation.
//!
//! Shared state: only the root directory fd, opened before the threads start
//! and closed when the backend drops; the kernel serialises nothing of ours.

use super::{Backend, Meta, OpError, OpResult, OpenMode, PATH_BYTES_MAX};
use std::ffi::CString;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};

/// Size of the `getdents64` buffer (what glibc's `readdir` uses).
const DIRENT_BUF_BYTES: usize = 32 * 1024;

/// A directory driven through syscalls.
pub struct SysFs {
    root: PathBuf,
    dirfd: libc::c_int,
}

/// An open file descriptor, closed on drop.
pub struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: `self.0` is an fd this process opened and owns; it is
        // closed exactly once, here.
        unsafe { libc::close(self.0) };
    }
}

fn errno_str() -> String {
    std::io::Error::last_os_error().to_string()
}

/// Copy `path` into a NUL-terminated stack buffer and call `f` with it (the
/// kernel copies the path from user memory the same way).
fn with_cpath<R>(op: &str, path: &str, f: impl FnOnce(*const c_char) -> R) -> OpResult<R> {
    let bytes = path.as_bytes();
    if bytes.len() > PATH_BYTES_MAX || bytes.contains(&0) {
        return Err(OpError::new(op, path, "path too long or contains NUL"));
    }
    let mut buf = [0u8; PATH_BYTES_MAX + 1];
    buf[..bytes.len()].copy_from_slice(bytes);
    Ok(f(buf.as_ptr() as *const c_char))
}

fn check(op: &str, path: &str, rc: libc::c_int) -> OpResult<libc::c_int> {
    if rc < 0 {
        Err(OpError::new(op, path, errno_str()))
    } else {
        Ok(rc)
    }
}

impl SysFs {
    /// Use directory `root` (it must exist).
    pub fn open(root: &Path) -> Result<SysFs, String> {
        let c = CString::new(root.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{}: path contains NUL", root.display()))?;
        // SAFETY: `c` is a valid NUL-terminated string for the duration of
        // the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(format!("open {}: {}", root.display(), errno_str()));
        }
        Ok(SysFs {
            root: root.to_path_buf(),
            dirfd: fd,
        })
    }

    /// The directory this backend works in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn openat(&self, op: &str, path: &str, flags: libc::c_int) -> OpResult<Fd> {
        let rc = with_cpath(op, path, |p| {
            // SAFETY: `p` is NUL-terminated and lives for the call; `dirfd`
            // is open for the life of `self`.
            unsafe { libc::openat(self.dirfd, p, flags | libc::O_CLOEXEC, 0o644) }
        })?;
        Ok(Fd(check(op, path, rc)?))
    }
}

impl Drop for SysFs {
    fn drop(&mut self) {
        // SAFETY: `dirfd` was opened in `SysFs::open` and is closed only here.
        unsafe { libc::close(self.dirfd) };
    }
}

fn io_result(op: &str, rc: isize) -> OpResult<usize> {
    if rc < 0 {
        Err(OpError::new(op, "(fd)", errno_str()))
    } else {
        Ok(rc as usize)
    }
}

impl Backend for SysFs {
    type File = Fd;

    fn kind(&self) -> &'static str {
        "syscalls"
    }

    fn mkdir(&self, path: &str) -> OpResult<()> {
        let rc = with_cpath("mkdir", path, |p| {
            // SAFETY: as in `openat`.
            unsafe { libc::mkdirat(self.dirfd, p, 0o755) }
        })?;
        check("mkdir", path, rc).map(|_| ())
    }

    fn stat(&self, path: &str) -> OpResult<Meta> {
        // SAFETY: `stat` is plain old data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = with_cpath("stat", path, |p| {
            // SAFETY: `p` is NUL-terminated, `st` is a valid out-pointer,
            // `dirfd` is open.
            unsafe { libc::fstatat(self.dirfd, p, &mut st, 0) }
        })?;
        check("stat", path, rc)?;
        Ok(Meta {
            size: st.st_size as u64,
            is_dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
        })
    }

    fn readdir(&self, path: &str) -> OpResult<usize> {
        let fd = self.openat("readdir", path, libc::O_RDONLY | libc::O_DIRECTORY)?;
        // Not zeroed: glibc's readdir does not clear its buffer either, and
        // a 32 KiB memset per call would be charged to the kernel.
        let mut buf = std::mem::MaybeUninit::<[u8; DIRENT_BUF_BYTES]>::uninit();
        let mut count = 0usize;
        loop {
            // SAFETY: `buf` is writable for DIRENT_BUF_BYTES bytes; `fd` is open.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fd.0,
                    buf.as_mut_ptr().cast::<u8>(),
                    DIRENT_BUF_BYTES,
                )
            };
            if n < 0 {
                return Err(OpError::new("getdents64", path, errno_str()));
            }
            if n == 0 {
                break;
            }
            // SAFETY: the kernel initialised the first `n` (<= DIRENT_BUF_BYTES)
            // bytes of `buf`; only those are read.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let mut at = 0usize;
            // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
            while at < bytes.len() {
                let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
                let name = &bytes[at + 19..at + reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if name != b"." && name != b".." {
                    count += 1;
                }
                at += reclen;
            }
        }
        Ok(count)
    }

    fn create(&self, path: &str) -> OpResult<()> {
        let fd = self.openat(
            "create",
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        )?;
        drop(fd);
        Ok(())
    }

    fn create_write(&self, path: &str, data: &[u8], fsync: bool) -> OpResult<()> {
        let fd = self.openat(
            "create",
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        )?;
        // SAFETY: `data` is readable for its length; `fd` is open.
        let n = unsafe { libc::write(fd.0, data.as_ptr().cast(), data.len()) };
        if io_result("write", n)? != data.len() {
            return Err(OpError::new("write", path, "short write"));
        }
        if fsync {
            // SAFETY: `fd` is open.
            check("fsync", path, unsafe { libc::fsync(fd.0) })?;
        }
        Ok(())
    }

    fn unlink(&self, path: &str) -> OpResult<()> {
        let rc = with_cpath("unlink", path, |p| {
            // SAFETY: as in `openat`.
            unsafe { libc::unlinkat(self.dirfd, p, 0) }
        })?;
        check("unlink", path, rc).map(|_| ())
    }

    fn rename(&self, from: &str, to: &str) -> OpResult<()> {
        let rc = with_cpath("rename", from, |f| {
            with_cpath("rename", to, |t| {
                // SAFETY: both paths are NUL-terminated for the call.
                unsafe { libc::renameat(self.dirfd, f, self.dirfd, t) }
            })
        })??;
        check("rename", from, rc).map(|_| ())
    }

    fn open(&self, path: &str, mode: OpenMode) -> OpResult<Fd> {
        let flags = match mode {
            OpenMode::Read => libc::O_RDONLY,
            OpenMode::ReadWrite => libc::O_RDWR,
            OpenMode::Append => libc::O_WRONLY | libc::O_APPEND,
            OpenMode::Truncate => libc::O_WRONLY | libc::O_TRUNC | libc::O_CREAT,
        };
        self.openat("open", path, flags)
    }

    fn pread(&self, file: &mut Fd, offset: u64, buf: &mut [u8]) -> OpResult<usize> {
        // SAFETY: `buf` is writable for its length; the fd is open.
        let n = unsafe { libc::pread(file.0, buf.as_mut_ptr().cast(), buf.len(), offset as i64) };
        io_result("pread", n)
    }

    fn pwrite(&self, file: &mut Fd, offset: u64, data: &[u8]) -> OpResult<usize> {
        // SAFETY: `data` is readable for its length; the fd is open.
        let n = unsafe { libc::pwrite(file.0, data.as_ptr().cast(), data.len(), offset as i64) };
        io_result("pwrite", n)
    }

    fn append(&self, file: &mut Fd, data: &[u8]) -> OpResult<usize> {
        // SAFETY: `data` is readable for its length; the fd is open.
        let n = unsafe { libc::write(file.0, data.as_ptr().cast(), data.len()) };
        io_result("write", n)
    }

    fn truncate(&self, file: &mut Fd, size: u64) -> OpResult<()> {
        // SAFETY: the fd is open.
        let rc = unsafe { libc::ftruncate(file.0, size as i64) };
        check("ftruncate", "(fd)", rc).map(|_| ())
    }
}
