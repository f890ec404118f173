//! Any directory, through real system calls, as a [`Target`]; and a fresh
//! tmpfs to get such directories from.
//!
//! All steps of one [`KernelTarget`] run on one dedicated worker thread.
//! That thread first unshares its `fs_struct` (`unshare(CLONE_FS)`) and
//! `chroot`s into the directory, so absolute paths and `..` stay inside it
//! exactly as they stay inside the engine's root, and its umask is its own.
//! An unprivileged step switches only that thread's file-system
//! credentials with raw `SYS_setgroups`, `SYS_setfsgid` and `SYS_setfsuid`
//! (glibc's wrappers would change every thread of the process) and switches
//! back to root after the step. Needs root (`CAP_SYS_ADMIN` for the mount,
//! `CAP_SYS_CHROOT`, `CAP_SETUID`/`CAP_SETGID`).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use crate::op::{write_data, Op, Outcome, StatLite, Step, TimeArg, Value, Who, SLOTS};
use crate::tree::{hash_content, join, Node, Tree, TREE_DEPTH_MAX};
use crate::Target;

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn cstr(b: &[u8]) -> Result<CString, i32> {
    CString::new(b).map_err(|_| libc::EINVAL)
}

/// Turn a libc return value into an outcome.
fn check(r: libc::c_long) -> Result<libc::c_long, i32> {
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(r)
    }
}

/// Switch this thread's file-system credentials to `who`'s.
fn become_who(who: Who) -> io::Result<()> {
    let (uid, gid, groups) = who.ids();
    // SAFETY: setgroups reads `groups.len()` gid_t values from a valid
    // slice; setfsgid/setfsuid take plain integers. The raw syscalls change
    // only the calling thread's credentials (unlike glibc's wrappers, which
    // broadcast to every thread), and this thread is the harness's own.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if who == Who::Root {
            // Back to root: uid first, so the capabilities return.
            libc::syscall(libc::SYS_setfsuid, uid);
            libc::syscall(libc::SYS_setfsgid, gid);
        } else {
            libc::syscall(libc::SYS_setfsgid, gid);
            libc::syscall(libc::SYS_setfsuid, uid);
        }
        // setfsuid(-1) changes nothing and returns the current fsuid.
        let now = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
        let now_g = libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32;
        if now != uid || now_g != gid {
            return Err(io::Error::other(format!(
                "fsuid/fsgid switch to {}/{} failed (now {}/{})",
                uid, gid, now, now_g
            )));
        }
    }
    Ok(())
}

/// A tmpfs mounted for one test run; hands out fresh subdirectories.
/// Unmounted (lazily) when dropped.
pub struct TmpfsMount {
    dir: PathBuf,
    next: AtomicU64,
}

impl TmpfsMount {
    /// Detach tmpfs mounts this harness left behind in processes that no
    /// longer exist (a test process killed mid-run cannot unmount).
    fn reap_stale() {
        let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
            return;
        };
        let prefix = std::env::temp_dir().join("lanefs-difftest-");
        let prefix = prefix.to_string_lossy().into_owned();
        for target in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
            let Some(rest) = target.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let Some(pid) = rest.split('-').next() else {
                continue;
            };
            if pid.parse::<u32>().is_err() || Path::new("/proc").join(pid).exists() {
                continue;
            }
            if let Ok(c) = cstr(target.as_bytes()) {
                // SAFETY: valid NUL-terminated path.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
                let _ = fs::remove_dir(target);
            }
        }
    }

    /// Mount a new tmpfs on a new directory under the system temp dir.
    pub fn new() -> io::Result<TmpfsMount> {
        TmpfsMount::reap_stale();
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("lanefs-difftest-{}-{}", std::process::id(), n));
        fs::create_dir_all(&dir)?;
        let src = cstr(b"tmpfs").map_err(io::Error::from_raw_os_error)?;
        let target = cstr(dir.as_os_str().as_bytes()).map_err(io::Error::from_raw_os_error)?;
        let opts = cstr(b"mode=755,size=512m").map_err(io::Error::from_raw_os_error)?;
        // SAFETY: all pointers are valid NUL-terminated strings that outlive
        // the call.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                src.as_ptr(),
                0,
                opts.as_ptr() as *const libc::c_void,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            let _ = fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(TmpfsMount {
            dir,
            next: AtomicU64::new(0),
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A new empty directory owned by root with mode 0755, as the engine's
    /// root.
    pub fn fresh_dir(&self) -> io::Result<PathBuf> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let d = self.dir.join(format!("case-{}", n));
        fs::create_dir(&d)?;
        fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        std::os::unix::fs::chown(&d, Some(0), Some(0))?;
        Ok(d)
    }
}

impl TmpfsMount {
    /// Detach the mount now (also done on drop; for a process about to
    /// exit without running destructors). Calling it twice is harmless.
    pub fn unmount(&self) {
        if let Ok(target) = cstr(self.dir.as_os_str().as_bytes()) {
            // SAFETY: valid NUL-terminated path; umount2 of a path that is
            // no longer a mount point just fails with EINVAL.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        self.unmount();
    }
}

enum Req {
    Step(Box<Step>),
    CloseAll,
    Snapshot,
}

enum Resp {
    Outcome(Outcome),
    Tree(Result<Tree, String>),
    Done,
}

/// A directory reached through real system calls on a worker thread that
/// is `chroot`ed into it.
pub struct KernelTarget {
    tx: Option<Sender<Req>>,
    rx: Receiver<Resp>,
    worker: Option<JoinHandle<()>>,
    name: String,
}

impl KernelTarget {
    /// Start a worker rooted at `dir` with umask `umask`. `name` labels
    /// outcomes in reports (for example "tmpfs" or "fuse").
    pub fn new(dir: &Path, umask: u32, name: &str) -> io::Result<KernelTarget> {
        let (tx, wrx) = channel::<Req>();
        let (wtx, rx) = channel::<Resp>();
        let (setup_tx, setup_rx) = channel::<io::Result<()>>();
        let dir = dir.to_path_buf();
        let worker = std::thread::Builder::new()
            .name("difftest-kernel".into())
            .spawn(move || {
                let setup = Worker::setup(&dir, umask);
                let ok = setup.is_ok();
                let _ = setup_tx.send(setup);
                if ok {
                    Worker::new().serve(wrx, wtx);
                }
            })?;
        match setup_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => return Err(io::Error::other("kernel worker died during setup")),
        }
        Ok(KernelTarget {
            tx: Some(tx),
            rx,
            worker: Some(worker),
            name: name.to_string(),
        })
    }

    fn call(&mut self, req: Req) -> Option<Resp> {
        self.tx.as_ref()?.send(req).ok()?;
        self.rx.recv().ok()
    }
}

impl Drop for KernelTarget {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Target for KernelTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn apply(&mut self, step: &Step) -> Outcome {
        match self.call(Req::Step(Box::new(step.clone()))) {
            Some(Resp::Outcome(o)) => o,
            _ => Err(libc::EIO),
        }
    }

    fn close_all(&mut self) {
        let _ = self.call(Req::CloseAll);
    }

    fn snapshot(&mut self) -> Result<Tree, String> {
        match self.call(Req::Snapshot) {
            Some(Resp::Tree(t)) => t,
            _ => Err("kernel worker gone".into()),
        }
    }
}

struct Worker {
    fds: Vec<Option<libc::c_int>>,
}

impl Worker {
    fn setup(dir: &Path, umask: u32) -> io::Result<()> {
        let d = cstr(dir.as_os_str().as_bytes()).map_err(io::Error::from_raw_os_error)?;
        let root = cstr(b"/").map_err(io::Error::from_raw_os_error)?;
        // SAFETY: plain syscalls with valid NUL-terminated paths. After
        // unshare(CLONE_FS) the root, cwd and umask are this thread's own,
        // so chroot/chdir/umask do not affect the rest of the process.
        unsafe {
            if libc::unshare(libc::CLONE_FS) != 0
                || libc::chroot(d.as_ptr()) != 0
                || libc::chdir(root.as_ptr()) != 0
            {
                return Err(io::Error::last_os_error());
            }
            libc::umask(umask as libc::mode_t);
        }
        become_who(Who::Root)
    }

    fn new() -> Worker {
        Worker {
            fds: (0..SLOTS).map(|_| None).collect(),
        }
    }

    fn serve(mut self, rx: Receiver<Req>, tx: Sender<Resp>) {
        while let Ok(req) = rx.recv() {
            let resp = match req {
                Req::Step(step) => {
                    let r = match become_who(step.who) {
                        Ok(()) => self.step(&step.op),
                        Err(_) => Err(libc::EIO),
                    };
                    if become_who(Who::Root).is_err() {
                        // Never keep running with the wrong credentials.
                        let _ = tx.send(Resp::Outcome(Err(libc::EIO)));
                        break;
                    }
                    Resp::Outcome(r)
                }
                Req::CloseAll => {
                    self.close_all();
                    Resp::Done
                }
                Req::Snapshot => {
                    let mut t = Tree::default();
                    Resp::Tree(
                        snapshot(b"/", 0, &mut t)
                            .map(|()| t)
                            .map_err(|e| format!("kernel snapshot failed: {}", e)),
                    )
                }
            };
            if tx.send(resp).is_err() {
                break;
            }
        }
        self.close_all();
    }

    fn close_all(&mut self) {
        for fd in self.fds.iter_mut() {
            if let Some(fd) = fd.take() {
                // SAFETY: fd is an open descriptor this worker owns.
                unsafe { libc::close(fd) };
            }
        }
    }

    fn fd(&self, slot: usize) -> Result<libc::c_int, i32> {
        self.fds.get(slot).copied().flatten().ok_or(libc::EBADF)
    }

    fn step(&mut self, op: &Op) -> Outcome {
        let unit = |r: libc::c_int| check(r as libc::c_long).map(|_| Value::Unit);
        match op {
            Op::Create { path, mode, excl } => {
                if special(path) {
                    return Ok(Value::Skipped);
                }
                let c = cstr(path)?;
                let mut flags = libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC;
                if *excl {
                    flags |= libc::O_EXCL;
                }
                // SAFETY: valid path; the fd is closed right away.
                let fd = unsafe { libc::open(c.as_ptr(), flags, *mode as libc::c_uint) };
                check(fd as libc::c_long)?;
                // SAFETY: fd was just opened by us.
                unsafe { libc::close(fd) };
                Ok(Value::Unit)
            }
            Op::Mknod { path, mode, rdev } => {
                let c = cstr(path)?;
                // SAFETY: valid path.
                unit(unsafe {
                    libc::mknod(c.as_ptr(), *mode as libc::mode_t, *rdev as libc::dev_t)
                })
            }
            Op::Mkdir { path, mode } => {
                let c = cstr(path)?;
                // SAFETY: valid path.
                unit(unsafe { libc::mkdir(c.as_ptr(), *mode as libc::mode_t) })
            }
            Op::Unlink { path } => {
                let c = cstr(path)?;
                // SAFETY: valid path.
                unit(unsafe { libc::unlink(c.as_ptr()) })
            }
            Op::Rmdir { path } => {
                let c = cstr(path)?;
                // SAFETY: valid path.
                unit(unsafe { libc::rmdir(c.as_ptr()) })
            }
            Op::Symlink { target, path } => {
                let t = cstr(target)?;
                let c = cstr(path)?;
                // SAFETY: valid paths.
                unit(unsafe { libc::symlink(t.as_ptr(), c.as_ptr()) })
            }
            Op::Readlink { path } => {
                let c = cstr(path)?;
                let mut buf = vec![0u8; 8192];
                // SAFETY: buf is writable for buf.len() bytes.
                let n = unsafe {
                    libc::readlink(c.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len())
                };
                let n = check(n as libc::c_long)?;
                buf.truncate(n as usize);
                Ok(Value::Bytes(buf))
            }
            Op::Link { old, new } => {
                let o = cstr(old)?;
                let n = cstr(new)?;
                // SAFETY: valid paths.
                unit(unsafe {
                    libc::linkat(libc::AT_FDCWD, o.as_ptr(), libc::AT_FDCWD, n.as_ptr(), 0)
                })
            }
            Op::Rename { old, new, flags } => {
                let o = cstr(old)?;
                let n = cstr(new)?;
                // SAFETY: valid paths; renameat2 takes plain integers otherwise.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        o.as_ptr(),
                        libc::AT_FDCWD,
                        n.as_ptr(),
                        *flags,
                    )
                };
                check(r).map(|_| Value::Unit)
            }
            Op::Open {
                slot,
                path,
                flags,
                mode,
            } => {
                if let Some(fd) = self.fds.get_mut(*slot).and_then(|f| f.take()) {
                    // SAFETY: an fd this worker owns.
                    unsafe { libc::close(fd) };
                }
                if special(path) {
                    return Ok(Value::Skipped);
                }
                let c = cstr(path)?;
                // SAFETY: valid path.
                let fd = unsafe {
                    libc::open(c.as_ptr(), *flags | libc::O_CLOEXEC, *mode as libc::c_uint)
                };
                check(fd as libc::c_long)?;
                match self.fds.get_mut(*slot) {
                    Some(s) => *s = Some(fd),
                    // SAFETY: an fd this worker just opened and cannot keep.
                    None => unsafe {
                        libc::close(fd);
                    },
                }
                Ok(Value::Unit)
            }
            Op::Close { slot } => {
                let fd = self
                    .fds
                    .get_mut(*slot)
                    .and_then(|f| f.take())
                    .ok_or(libc::EBADF)?;
                // SAFETY: an fd this worker owns.
                unit(unsafe { libc::close(fd) })
            }
            Op::Write {
                slot,
                offset,
                len,
                seed,
            } => {
                let fd = self.fd(*slot)?;
                let data = write_data(*len, *seed);
                // SAFETY: data is readable for data.len() bytes.
                let n = unsafe {
                    match offset {
                        Some(o) => libc::pwrite(
                            fd,
                            data.as_ptr() as *const libc::c_void,
                            data.len(),
                            *o as i64,
                        ),
                        None => libc::write(fd, data.as_ptr() as *const libc::c_void, data.len()),
                    }
                };
                check(n as libc::c_long).map(|n| Value::Count(n as u64))
            }
            Op::Read { slot, offset, len } => {
                let fd = self.fd(*slot)?;
                let mut buf = vec![0u8; *len];
                // SAFETY: buf is writable for buf.len() bytes.
                let n = unsafe {
                    match offset {
                        Some(o) => libc::pread(
                            fd,
                            buf.as_mut_ptr() as *mut libc::c_void,
                            buf.len(),
                            *o as i64,
                        ),
                        None => libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()),
                    }
                };
                let n = check(n as libc::c_long)?;
                buf.truncate(n as usize);
                Ok(Value::Bytes(buf))
            }
            Op::Seek {
                slot,
                offset,
                whence,
            } => {
                let fd = self.fd(*slot)?;
                // SAFETY: plain integers.
                let r = unsafe { libc::lseek(fd, *offset, *whence) };
                check(r as libc::c_long).map(|n| Value::Count(n as u64))
            }
            Op::Ftruncate { slot, size } => {
                let fd = self.fd(*slot)?;
                // SAFETY: plain integers.
                unit(unsafe { libc::ftruncate(fd, *size as i64) })
            }
            Op::Fallocate {
                slot,
                mode,
                offset,
                len,
            } => {
                let fd = self.fd(*slot)?;
                // SAFETY: plain integers.
                unit(unsafe { libc::fallocate(fd, *mode, *offset, *len) })
            }
            Op::Fsync { slot, datasync } => {
                let fd = self.fd(*slot)?;
                // SAFETY: plain integers.
                unit(unsafe {
                    if *datasync {
                        libc::fdatasync(fd)
                    } else {
                        libc::fsync(fd)
                    }
                })
            }
            Op::Fchmod { slot, mode } => {
                let fd = self.fd(*slot)?;
                // SAFETY: plain integers.
                unit(unsafe { libc::fchmod(fd, *mode as libc::mode_t) })
            }
            Op::Fstat { slot } => {
                let fd = self.fd(*slot)?;
                // SAFETY: st is a valid out-pointer.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                check(unsafe { libc::fstat(fd, &mut st) } as libc::c_long)?;
                Ok(Value::Stat(lite(&st)))
            }
            Op::Truncate { path, size } => {
                let c = cstr(path)?;
                // SAFETY: valid path.
                unit(unsafe { libc::truncate(c.as_ptr(), *size as i64) })
            }
            Op::Chmod { path, mode } => {
                let c = cstr(path)?;
                // SAFETY: valid path.
                unit(unsafe { libc::chmod(c.as_ptr(), *mode as libc::mode_t) })
            }
            Op::Chown {
                path,
                uid,
                gid,
                follow,
            } => {
                let c = cstr(path)?;
                let u = uid.unwrap_or(u32::MAX);
                let g = gid.unwrap_or(u32::MAX);
                // SAFETY: valid path.
                unit(unsafe {
                    if *follow {
                        libc::chown(c.as_ptr(), u, g)
                    } else {
                        libc::lchown(c.as_ptr(), u, g)
                    }
                })
            }
            Op::Utimens {
                path,
                atime,
                mtime,
                follow,
            } => {
                let c = cstr(path)?;
                let ts = |t: &TimeArg| match *t {
                    TimeArg::Omit => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_OMIT,
                    },
                    TimeArg::Now => libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_NOW,
                    },
                    TimeArg::At { sec, nsec } => libc::timespec {
                        tv_sec: sec,
                        tv_nsec: nsec as i64,
                    },
                };
                let times = [ts(atime), ts(mtime)];
                let flags = if *follow {
                    0
                } else {
                    libc::AT_SYMLINK_NOFOLLOW
                };
                // SAFETY: valid path and a two-element times array.
                unit(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), flags) })
            }
            Op::Stat { path, follow } => {
                let c = cstr(path)?;
                // SAFETY: st is a valid out-pointer.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: valid path and out-pointer.
                let r = unsafe {
                    if *follow {
                        libc::stat(c.as_ptr(), &mut st)
                    } else {
                        libc::lstat(c.as_ptr(), &mut st)
                    }
                };
                check(r as libc::c_long)?;
                Ok(Value::Stat(lite(&st)))
            }
            Op::Access { path, mask } => {
                let c = cstr(path)?;
                // SAFETY: valid path; faccessat2 with AT_EACCESS checks with
                // the thread's fsuid/fsgid (plain access() would use the
                // real uid, root).
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_faccessat2,
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        *mask as libc::c_int,
                        libc::AT_EACCESS,
                    )
                };
                check(r).map(|_| Value::Unit)
            }
            Op::Readdir { path } => {
                let p = Path::new(std::ffi::OsStr::from_bytes(path));
                let io = |e: io::Error| e.raw_os_error().unwrap_or(libc::EIO);
                if path.is_empty() {
                    return Err(libc::ENOENT);
                }
                let mut names = Vec::new();
                for e in fs::read_dir(p).map_err(io)? {
                    let e = e.map_err(io)?;
                    let t = e.file_type().map_err(io)?;
                    names.push((e.file_name().as_bytes().to_vec(), dtype(&t)));
                }
                names.sort();
                Ok(Value::Names(names))
            }
            Op::SetXattr {
                path,
                name,
                value,
                flags,
            } => {
                let c = cstr(path)?;
                let n = cstr(name)?;
                // SAFETY: valid strings; value readable for value.len() bytes.
                unit(unsafe {
                    libc::setxattr(
                        c.as_ptr(),
                        n.as_ptr(),
                        value.as_ptr() as *const libc::c_void,
                        value.len(),
                        *flags as libc::c_int,
                    )
                })
            }
            Op::GetXattr { path, name, size } => {
                let c = cstr(path)?;
                let n = cstr(name)?;
                let mut buf = vec![0u8; *size];
                // SAFETY: buf writable for `size` bytes (null when 0).
                let r = unsafe {
                    libc::getxattr(
                        c.as_ptr(),
                        n.as_ptr(),
                        if *size == 0 {
                            std::ptr::null_mut()
                        } else {
                            buf.as_mut_ptr() as *mut libc::c_void
                        },
                        *size,
                    )
                };
                let r = check(r as libc::c_long)?;
                if *size == 0 {
                    return Ok(Value::Count(r as u64));
                }
                buf.truncate(r as usize);
                Ok(Value::Bytes(buf))
            }
            Op::ListXattr { path, size } => {
                let c = cstr(path)?;
                let mut buf = vec![0u8; *size];
                // SAFETY: buf writable for `size` bytes (null when 0).
                let r = unsafe {
                    libc::listxattr(
                        c.as_ptr(),
                        if *size == 0 {
                            std::ptr::null_mut()
                        } else {
                            buf.as_mut_ptr() as *mut libc::c_char
                        },
                        *size,
                    )
                };
                let r = check(r as libc::c_long)?;
                if *size == 0 {
                    return Ok(Value::Count(r as u64));
                }
                buf.truncate(r as usize);
                let mut names: Vec<_> = buf
                    .split(|&b| b == 0)
                    .filter(|n| !n.is_empty())
                    .map(|n| (n.to_vec(), 0u8))
                    .collect();
                names.sort();
                Ok(Value::Names(names))
            }
            Op::RemoveXattr { path, name } => {
                let c = cstr(path)?;
                let n = cstr(name)?;
                // SAFETY: valid strings.
                unit(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) })
            }
            Op::SetFlags { path, flags } => {
                if special(path) {
                    return Ok(Value::Skipped);
                }
                flags_ioctl(path, FS_IOC_SETFLAGS, *flags).map(|_| Value::Unit)
            }
            Op::GetFlags { path } => {
                if special(path) {
                    return Ok(Value::Skipped);
                }
                flags_ioctl(path, FS_IOC_GETFLAGS, 0).map(|f| Value::Count(f.into()))
            }
        }
    }
}

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;

/// `chattr`/`lsattr`'s system calls: `open(path, O_RDONLY | O_NONBLOCK)`,
/// the flags ioctl `cmd` with an `int` holding `flags`, close; the flags
/// after the call.
fn flags_ioctl(path: &[u8], cmd: libc::c_ulong, flags: u32) -> Result<u32, i32> {
    let c = cstr(path)?;
    // SAFETY: valid path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    check(fd as libc::c_long)?;
    let mut word = flags as libc::c_int;
    // SAFETY: `fd` is open; `word` is the `int` both commands use.
    let r = unsafe { libc::ioctl(fd, cmd, &mut word) };
    let r = check(r as libc::c_long);
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    r.map(|_| word as u32)
}

/// Take every inode flag off the files below `dir` (and `dir`), so that
/// it can be removed (`chattr -R = dir`). Errors are ignored: what stays
/// is only not removed.
pub fn clear_inode_flags(dir: &Path) {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_file() || m.is_dir() {
            let _ = flags_ioctl(p.as_os_str().as_bytes(), FS_IOC_SETFLAGS, 0);
        }
        if m.is_dir() {
            if let Ok(rd) = fs::read_dir(&p) {
                todo.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
}

/// Whether `path` (followed) is a fifo, socket or device node.
fn special(path: &[u8]) -> bool {
    match fs::metadata(Path::new(std::ffi::OsStr::from_bytes(path))) {
        Ok(m) => {
            let t = m.file_type();
            t.is_fifo() || t.is_socket() || t.is_block_device() || t.is_char_device()
        }
        Err(_) => false,
    }
}

fn dtype(t: &fs::FileType) -> u8 {
    if t.is_dir() {
        libc::DT_DIR
    } else if t.is_symlink() {
        libc::DT_LNK
    } else if t.is_fifo() {
        libc::DT_FIFO
    } else if t.is_socket() {
        libc::DT_SOCK
    } else if t.is_char_device() {
        libc::DT_CHR
    } else if t.is_block_device() {
        libc::DT_BLK
    } else {
        libc::DT_REG
    }
}

fn lite(st: &libc::stat) -> StatLite {
    StatLite {
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        nlink: st.st_nlink as u32,
        rdev: st.st_rdev,
    }
}

fn xattrs(path: &[u8]) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = cstr(path).map_err(io::Error::from_raw_os_error)?;
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: buf writable for its length.
    let n =
        unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    let mut out = Vec::new();
    for name in buf.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = cstr(name).map_err(io::Error::from_raw_os_error)?;
        let mut v = vec![0u8; 1 << 17];
        // SAFETY: v writable for its length.
        let m = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cn.as_ptr(),
                v.as_mut_ptr() as *mut libc::c_void,
                v.len(),
            )
        };
        if m < 0 {
            return Err(io::Error::last_os_error());
        }
        v.truncate(m as usize);
        out.push((name.to_vec(), v));
    }
    out.sort();
    Ok(out)
}

fn snapshot(path: &[u8], depth: usize, tree: &mut Tree) -> io::Result<()> {
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let m = fs::symlink_metadata(p)?;
    let t = m.file_type();
    let mut node = Node {
        flags: 0,
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        size: m.size(),
        nlink: m.nlink() as u32,
        rdev: m.rdev(),
        content: None,
        target: None,
        xattrs: Vec::new(),
    };
    if t.is_file() {
        let f = fs::File::open(p)?;
        node.content = Some(hash_content(m.size(), |buf, off| f.read_at(buf, off))?);
    } else if t.is_symlink() {
        node.target = Some(fs::read_link(p)?.as_os_str().as_bytes().to_vec());
    }
    if t.is_file() || t.is_dir() {
        node.xattrs = xattrs(path)?;
        node.flags = flags_ioctl(path, FS_IOC_GETFLAGS, 0).map_err(io::Error::from_raw_os_error)?;
    }
    tree.0.insert(path.to_vec(), node);
    if t.is_dir() && depth < TREE_DEPTH_MAX {
        let mut names = Vec::new();
        for e in fs::read_dir(p)? {
            names.push(e?.file_name().as_bytes().to_vec());
        }
        for n in names {
            snapshot(&join(path, &n), depth + 1, tree)?;
        }
    }
    Ok(())
}
