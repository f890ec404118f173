//! The operations of a test case and their outcomes.

use std::fmt;

/// Who performs a step. Unprivileged steps exercise permission failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Who {
    /// uid 0, gid 0, no supplementary groups.
    Root,
    /// uid 1000, gid 1000, no supplementary groups.
    Alice,
    /// uid 1001, gid 1001, supplementary group 1000 (Alice's group).
    Bob,
}

impl Who {
    /// `(uid, gid, supplementary groups)`.
    pub fn ids(self) -> (u32, u32, &'static [u32]) {
        match self {
            Who::Root => (0, 0, &[]),
            Who::Alice => (1000, 1000, &[]),
            Who::Bob => (1001, 1001, &[1000]),
        }
    }
}

/// A time argument of `utimensat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeArg {
    /// `UTIME_OMIT`
    Omit,
    /// `UTIME_NOW`
    Now,
    /// An explicit time.
    At { sec: i64, nsec: u32 },
}

/// Number of open-file slots a case can use.
pub const SLOTS: usize = 4;

/// One operation. Paths are bytes, relative to the target's root (a
/// leading `/` means the same root). `slot` names one of [`SLOTS`] open
/// files.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    /// `open(path, O_CREAT|O_WRONLY[|O_EXCL], mode)` then close.
    Create {
        path: Vec<u8>,
        mode: u32,
        excl: bool,
    },
    /// `mknod(path, mode, rdev)`; `mode` includes the type bits.
    Mknod {
        path: Vec<u8>,
        mode: u32,
        rdev: u64,
    },
    Mkdir {
        path: Vec<u8>,
        mode: u32,
    },
    Unlink {
        path: Vec<u8>,
    },
    Rmdir {
        path: Vec<u8>,
    },
    Symlink {
        target: Vec<u8>,
        path: Vec<u8>,
    },
    Readlink {
        path: Vec<u8>,
    },
    Link {
        old: Vec<u8>,
        new: Vec<u8>,
    },
    /// `renameat2(old, new, flags)`.
    Rename {
        old: Vec<u8>,
        new: Vec<u8>,
        flags: u32,
    },
    /// `open(path, flags, mode)` into `slot` (closing what was there).
    Open {
        slot: usize,
        path: Vec<u8>,
        flags: i32,
        mode: u32,
    },
    Close {
        slot: usize,
    },
    /// `pwrite` at `offset`, or `write` at the position when `None`.
    /// The data is `len` bytes made from `seed`.
    Write {
        slot: usize,
        offset: Option<u64>,
        len: usize,
        seed: u8,
    },
    /// `pread` at `offset`, or `read` at the position when `None`.
    Read {
        slot: usize,
        offset: Option<u64>,
        len: usize,
    },
    /// `lseek(slot, offset, whence)` with `SEEK_SET`/`SEEK_CUR`/`SEEK_END`.
    Seek {
        slot: usize,
        offset: i64,
        whence: i32,
    },
    Ftruncate {
        slot: usize,
        size: u64,
    },
    Fallocate {
        slot: usize,
        mode: i32,
        offset: i64,
        len: i64,
    },
    Fsync {
        slot: usize,
        datasync: bool,
    },
    Fchmod {
        slot: usize,
        mode: u32,
    },
    Fstat {
        slot: usize,
    },
    Truncate {
        path: Vec<u8>,
        size: u64,
    },
    Chmod {
        path: Vec<u8>,
        mode: u32,
    },
    /// `chown`/`lchown`; `None` is -1.
    Chown {
        path: Vec<u8>,
        uid: Option<u32>,
        gid: Option<u32>,
        follow: bool,
    },
    Utimens {
        path: Vec<u8>,
        atime: TimeArg,
        mtime: TimeArg,
        follow: bool,
    },
    /// `stat`/`lstat`.
    Stat {
        path: Vec<u8>,
        follow: bool,
    },
    /// `faccessat(path, mask, AT_EACCESS)`.
    Access {
        path: Vec<u8>,
        mask: u32,
    },
    /// List a directory (names and types, sorted; no `.`/`..`).
    Readdir {
        path: Vec<u8>,
    },
    SetXattr {
        path: Vec<u8>,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
    },
    /// `getxattr` with a buffer of `size` bytes (0: ask for the size).
    GetXattr {
        path: Vec<u8>,
        name: Vec<u8>,
        size: usize,
    },
    /// `listxattr` with a buffer of `size` bytes (0: ask for the size).
    ListXattr {
        path: Vec<u8>,
        size: usize,
    },
    RemoveXattr {
        path: Vec<u8>,
        name: Vec<u8>,
    },
    /// `chattr`: `open(path, O_RDONLY | O_NONBLOCK)`, then
    /// `ioctl(FS_IOC_SETFLAGS, flags)`.
    SetFlags {
        path: Vec<u8>,
        flags: u32,
    },
    /// `lsattr`: the same open, then `ioctl(FS_IOC_GETFLAGS)`.
    GetFlags {
        path: Vec<u8>,
    },
}

impl Op {
    /// The operation's name, for statistics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Create { .. } => "create",
            Op::Mknod { .. } => "mknod",
            Op::Mkdir { .. } => "mkdir",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Symlink { .. } => "symlink",
            Op::Readlink { .. } => "readlink",
            Op::Link { .. } => "link",
            Op::Rename { .. } => "rename",
            Op::Open { .. } => "open",
            Op::Close { .. } => "close",
            Op::Write { .. } => "write",
            Op::Read { .. } => "read",
            Op::Seek { .. } => "lseek",
            Op::Ftruncate { .. } => "ftruncate",
            Op::Fallocate { .. } => "fallocate",
            Op::Fsync { .. } => "fsync",
            Op::Fchmod { .. } => "fchmod",
            Op::Fstat { .. } => "fstat",
            Op::Truncate { .. } => "truncate",
            Op::Chmod { .. } => "chmod",
            Op::Chown { .. } => "chown",
            Op::Utimens { .. } => "utimensat",
            Op::Stat { .. } => "stat",
            Op::Access { .. } => "access",
            Op::Readdir { .. } => "readdir",
            Op::SetXattr { .. } => "setxattr",
            Op::GetXattr { .. } => "getxattr",
            Op::ListXattr { .. } => "listxattr",
            Op::RemoveXattr { .. } => "removexattr",
            Op::SetFlags { .. } => "setflags",
            Op::GetFlags { .. } => "getflags",
        }
    }
}

/// Every operation name of [`Op::kind_name`].
pub const OP_NAMES: [&str; 32] = [
    "create",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "readlink",
    "link",
    "rename",
    "open",
    "close",
    "write",
    "read",
    "lseek",
    "ftruncate",
    "fallocate",
    "fsync",
    "fchmod",
    "fstat",
    "truncate",
    "chmod",
    "chown",
    "utimensat",
    "stat",
    "access",
    "readdir",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "setflags",
    "getflags",
];

/// A step: an operation and who performs it.
#[derive(Clone, PartialEq, Eq)]
pub struct Step {
    pub who: Who,
    pub op: Op,
}

/// One generated test case: the umask of every step, then the steps.
#[derive(Clone, PartialEq, Eq)]
pub struct Case {
    pub umask: u32,
    pub steps: Vec<Step>,
}

/// Short printable form of a byte path.
pub struct ShowBytes<'a>(pub &'a [u8]);

impl fmt::Debug for ShowBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 40 {
            let head = String::from_utf8_lossy(&self.0[..12]);
            return write!(f, "\"{}…\"({} bytes)", head, self.0.len());
        }
        write!(f, "{:?}", String::from_utf8_lossy(self.0))
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = ShowBytes;
        match self {
            Op::Create { path, mode, excl } => {
                write!(f, "create({:?}, {:#o}, excl={})", b(path), mode, excl)
            }
            Op::Mknod { path, mode, rdev } => {
                write!(f, "mknod({:?}, {:#o}, {:#x})", b(path), mode, rdev)
            }
            Op::Mkdir { path, mode } => write!(f, "mkdir({:?}, {:#o})", b(path), mode),
            Op::Unlink { path } => write!(f, "unlink({:?})", b(path)),
            Op::Rmdir { path } => write!(f, "rmdir({:?})", b(path)),
            Op::Symlink { target, path } => write!(f, "symlink({:?}, {:?})", b(target), b(path)),
            Op::Readlink { path } => write!(f, "readlink({:?})", b(path)),
            Op::Link { old, new } => write!(f, "link({:?}, {:?})", b(old), b(new)),
            Op::Rename { old, new, flags } => {
                write!(f, "rename({:?}, {:?}, flags={})", b(old), b(new), flags)
            }
            Op::Open {
                slot,
                path,
                flags,
                mode,
            } => {
                write!(
                    f,
                    "fd{} = open({:?}, {:#o}, {:#o})",
                    slot,
                    b(path),
                    flags,
                    mode
                )
            }
            Op::Close { slot } => write!(f, "close(fd{})", slot),
            Op::Write {
                slot,
                offset,
                len,
                seed,
            } => {
                write!(
                    f,
                    "write(fd{}, at={:?}, len={}, seed={})",
                    slot, offset, len, seed
                )
            }
            Op::Read { slot, offset, len } => {
                write!(f, "read(fd{}, at={:?}, len={})", slot, offset, len)
            }
            Op::Seek {
                slot,
                offset,
                whence,
            } => {
                write!(f, "lseek(fd{}, {}, whence={})", slot, offset, whence)
            }
            Op::Ftruncate { slot, size } => write!(f, "ftruncate(fd{}, {})", slot, size),
            Op::Fallocate {
                slot,
                mode,
                offset,
                len,
            } => {
                write!(
                    f,
                    "fallocate(fd{}, mode={:#x}, {}, {})",
                    slot, mode, offset, len
                )
            }
            Op::Fsync { slot, datasync } => write!(f, "fsync(fd{}, datasync={})", slot, datasync),
            Op::Fchmod { slot, mode } => write!(f, "fchmod(fd{}, {:#o})", slot, mode),
            Op::Fstat { slot } => write!(f, "fstat(fd{})", slot),
            Op::Truncate { path, size } => write!(f, "truncate({:?}, {})", b(path), size),
            Op::Chmod { path, mode } => write!(f, "chmod({:?}, {:#o})", b(path), mode),
            Op::Chown {
                path,
                uid,
                gid,
                follow,
            } => {
                write!(
                    f,
                    "chown({:?}, {:?}, {:?}, follow={})",
                    b(path),
                    uid,
                    gid,
                    follow
                )
            }
            Op::Utimens {
                path,
                atime,
                mtime,
                follow,
            } => {
                write!(
                    f,
                    "utimensat({:?}, {:?}, {:?}, follow={})",
                    b(path),
                    atime,
                    mtime,
                    follow
                )
            }
            Op::Stat { path, follow } => write!(f, "stat({:?}, follow={})", b(path), follow),
            Op::Access { path, mask } => write!(f, "access({:?}, {})", b(path), mask),
            Op::Readdir { path } => write!(f, "readdir({:?})", b(path)),
            Op::SetXattr {
                path,
                name,
                value,
                flags,
            } => write!(
                f,
                "setxattr({:?}, {:?}, {} bytes, flags={})",
                b(path),
                b(name),
                value.len(),
                flags
            ),
            Op::GetXattr { path, name, size } => {
                write!(f, "getxattr({:?}, {:?}, size={})", b(path), b(name), size)
            }
            Op::ListXattr { path, size } => write!(f, "listxattr({:?}, size={})", b(path), size),
            Op::RemoveXattr { path, name } => {
                write!(f, "removexattr({:?}, {:?})", b(path), b(name))
            }
            Op::SetFlags { path, flags } => write!(f, "setflags({:?}, {:#x})", b(path), flags),
            Op::GetFlags { path } => write!(f, "getflags({:?})", b(path)),
        }
    }
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {:?}", self.who, self.op)
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Case (umask {:#o}):", self.umask)?;
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "  {:3} {:?}", i, s)?;
        }
        Ok(())
    }
}

/// The data a `Write` step writes.
pub fn write_data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8).wrapping_mul(3) | 1)
        .collect()
}

/// The file-relevant attributes compared after `stat` (no times: see
/// `docs/SEMANTICS.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatLite {
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub rdev: u64,
}

/// What a successful step returned.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    Unit,
    /// A count or an offset (bytes written, new position, value size).
    Count(u64),
    /// Data read, a symlink target, an xattr value.
    Bytes(Vec<u8>),
    Stat(StatLite),
    /// Sorted names with their `d_type` (or xattr names with 0).
    Names(Vec<(Vec<u8>, u8)>),
    /// The step was not run, the same way on every target (for example
    /// opening a fifo, which would block on the kernel).
    Skipped,
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unit => write!(f, "ok"),
            Value::Count(n) => write!(f, "{}", n),
            Value::Bytes(b) if b.len() > 64 => {
                write!(f, "{} bytes, fnv {:#018x}", b.len(), crate::tree::fnv(b))
            }
            Value::Bytes(b) => write!(f, "{:?}", ShowBytes(b)),
            Value::Stat(s) => write!(f, "{:?}", s),
            Value::Names(n) => f
                .debug_list()
                .entries(n.iter().map(|(n, t)| (ShowBytes(n), *t)))
                .finish(),
            Value::Skipped => write!(f, "skipped"),
        }
    }
}

/// Success with a value, or an errno.
pub type Outcome = Result<Value, i32>;

/// Printable outcome.
pub fn show(o: &Outcome) -> String {
    match o {
        Ok(v) => format!("{:?}", v),
        Err(e) => {
            let name = lanefs::Errno(*e).name().unwrap_or("?");
            format!("{} ({})", name, e)
        }
    }
}
