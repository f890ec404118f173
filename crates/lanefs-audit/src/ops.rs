//! The audited operations: POSIX calls of COMMUTER's kinds, with concrete
//! arguments over the prepared tree (see `world`), and how one runs.
//!
//! File-descriptor operations (`read`, `write`, `fstat`, `close`) act on a
//! handle the preparation opened for the side (thread) that runs the op —
//! as two processes' descriptors of one file: the two sides never share a
//! handle, as they never share a descriptor table.
//!
//! `mount` and `umount` make and drop whole file-system instances (an
//! `Fs` registers its shrinker in the process-wide reclaim registry of its
//! design when made, and unregisters it when dropped): `mount` makes an
//! empty instance on a fresh memory store with the world's variants,
//! kept until the world is dropped; `umount(k)` drops the side's prepared
//! extra instance `k` (see `world`) on the running thread. Neither
//! touches the main instance; both return `Raw::Unit`.
//!
//! No locks or atomics of its own.

use std::fmt;

use lanefs_core::Attr;

use crate::world::{World, FILES};

/// The operation kinds, in the heatmap's order.
pub const KINDS: [&str; 17] = [
    "stat", "open", "read", "write", "create", "unlink", "rename", "mkdir", "rmdir", "link",
    "readdir", "truncate", "chmod", "fstat", "close", "mount", "umount",
];

/// The kinds that make or drop a file-system instance rather than act in
/// one (reported apart: `VariantReport::file_op_counts`).
pub const INSTANCE_KINDS: [&str; 2] = ["mount", "umount"];

/// The kinds that are calls of COMMUTER's model of POSIX (Clements et al.,
/// SOSP 2013: `open` with and without `O_CREAT`, `link`, `unlink`,
/// `rename`, `stat`, `fstat`, `close`, `read`/`pread`, `write`/`pwrite`,
/// beside `lseek`, `pipe` and the memory calls the audit does not have):
/// its Linux and sv6 figures are over pairs of these
/// (`VariantReport::commuter_op_counts`).
pub const COMMUTER_KINDS: [&str; 10] = [
    "stat", "open", "read", "write", "create", "unlink", "rename", "link", "fstat", "close",
];

/// One operation with its arguments. Paths are absolute in the prepared
/// tree; `file` indexes [`FILES`] (the handle of the running side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Stat(&'static str),
    /// `open(path, O_RDONLY)`; the handle stays open until the run ends.
    Open(&'static str),
    /// `pread(handle, len, off)`.
    Read {
        file: usize,
        off: u64,
        len: usize,
    },
    /// `pwrite(handle, [byte; len], off)`.
    Write {
        file: usize,
        off: u64,
        len: usize,
        byte: u8,
    },
    /// `open(path, O_CREAT | O_EXCL | O_WRONLY, 0644)`.
    Create(&'static str),
    Unlink(&'static str),
    Rename(&'static str, &'static str),
    Mkdir(&'static str),
    Rmdir(&'static str),
    /// `link(from, to)`.
    Link(&'static str, &'static str),
    /// All entries of a directory (names and kinds; the order is not part
    /// of the result, as POSIX leaves it unspecified).
    Readdir(&'static str),
    Truncate(&'static str, u64),
    Chmod(&'static str, u32),
    Fstat(usize),
    Close(usize),
    /// A new file-system instance (fresh memory store, the world's
    /// variants), kept until the world is dropped.
    Mount,
    /// Drop the running side's prepared extra instance `k`
    /// (`k < world::EXTRA_MOUNTS`).
    Umount(usize),
}

impl Op {
    /// The kind's name (one of [`KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Stat(_) => "stat",
            Op::Open(_) => "open",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Create(_) => "create",
            Op::Unlink(_) => "unlink",
            Op::Rename(..) => "rename",
            Op::Mkdir(_) => "mkdir",
            Op::Rmdir(_) => "rmdir",
            Op::Link(..) => "link",
            Op::Readdir(_) => "readdir",
            Op::Truncate(..) => "truncate",
            Op::Chmod(..) => "chmod",
            Op::Fstat(_) => "fstat",
            Op::Close(_) => "close",
            Op::Mount => "mount",
            Op::Umount(_) => "umount",
        }
    }

    /// Index of the kind in [`KINDS`].
    pub fn kind_index(&self) -> usize {
        KINDS.iter().position(|k| *k == self.kind()).unwrap_or(0)
    }

    /// Paths the op names (for the pair's configuration).
    pub fn paths(&self) -> Vec<&'static str> {
        match self {
            Op::Stat(p)
            | Op::Open(p)
            | Op::Create(p)
            | Op::Unlink(p)
            | Op::Mkdir(p)
            | Op::Rmdir(p)
            | Op::Readdir(p)
            | Op::Truncate(p, _)
            | Op::Chmod(p, _) => vec![p],
            Op::Rename(a, b) | Op::Link(a, b) => vec![a, b],
            Op::Read { file, .. } | Op::Write { file, .. } | Op::Fstat(file) | Op::Close(file) => {
                vec![FILES[*file]]
            }
            Op::Mount | Op::Umount(_) => Vec::new(),
        }
    }

    /// The byte range the op reads or writes, if it is a data op.
    pub fn range(&self) -> Option<(u64, u64)> {
        match self {
            Op::Read { off, len, .. } | Op::Write { off, len, .. } => {
                Some((*off, off + *len as u64))
            }
            _ => None,
        }
    }

    /// Run the op on `world` as side `side` (0 or 1).
    pub fn run(&self, world: &World, side: usize) -> Raw {
        let fs = &world.fs;
        let res = match self {
            Op::Stat(p) => fs.symlink_metadata(p).map(|m| Raw::Attr(m.0)),
            Op::Open(p) => fs.open(p).map(|f| {
                world.keep(f);
                Raw::Unit
            }),
            Op::Read { file, off, len } => world.with_handle(side, *file, |f| {
                let mut buf = vec![0u8; *len];
                let n = f.read_at(&mut buf, *off)?;
                buf.truncate(n);
                Ok(Raw::Bytes(buf))
            }),
            Op::Write {
                file,
                off,
                len,
                byte,
            } => world.with_handle(side, *file, |f| {
                f.write_at(&vec![*byte; *len], *off).map(Raw::Count)
            }),
            Op::Create(p) => {
                let f = fs.open_flags(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644);
                f.map(|f| {
                    world.keep(f);
                    Raw::Unit
                })
            }
            Op::Unlink(p) => fs.remove_file(p).map(|_| Raw::Unit),
            Op::Rename(a, b) => fs.rename(a, b).map(|_| Raw::Unit),
            Op::Mkdir(p) => fs.create_dir(p).map(|_| Raw::Unit),
            Op::Rmdir(p) => fs.remove_dir(p).map(|_| Raw::Unit),
            Op::Link(a, b) => fs.hard_link(a, b).map(|_| Raw::Unit),
            Op::Readdir(p) => fs.read_dir(p).and_then(|rd| {
                let mut names = Vec::new();
                for e in rd {
                    let e = e?;
                    names.push((e.name_bytes().to_vec(), format!("{:?}", e.kind()), e.ino()));
                }
                names.sort();
                Ok(Raw::Names(names))
            }),
            Op::Truncate(p, size) => fs.truncate(p, *size).map(|_| Raw::Unit),
            Op::Chmod(p, mode) => fs.set_permissions(p, *mode).map(|_| Raw::Unit),
            Op::Fstat(file) => {
                world.with_handle(side, *file, |f| f.metadata().map(|m| Raw::Attr(m.0)))
            }
            Op::Close(file) => Ok(world.close(side, *file)),
            Op::Mount => world.mount(side),
            Op::Umount(k) => Ok(world.umount(side, *k)),
        };
        res.unwrap_or_else(|e| Raw::Err(e.raw_os_error().unwrap_or(-1)))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Stat(p) => write!(f, "stat({p})"),
            Op::Open(p) => write!(f, "open({p}, O_RDONLY)"),
            Op::Read { file, off, len } => write!(f, "pread({}, {len}, {off})", FILES[*file]),
            Op::Write {
                file,
                off,
                len,
                byte,
            } => {
                write!(
                    f,
                    "pwrite({}, {len}x{:?}, {off})",
                    FILES[*file], *byte as char
                )
            }
            Op::Create(p) => write!(f, "open({p}, O_CREAT|O_EXCL)"),
            Op::Unlink(p) => write!(f, "unlink({p})"),
            Op::Rename(a, b) => write!(f, "rename({a}, {b})"),
            Op::Mkdir(p) => write!(f, "mkdir({p})"),
            Op::Rmdir(p) => write!(f, "rmdir({p})"),
            Op::Link(a, b) => write!(f, "link({a}, {b})"),
            Op::Readdir(p) => write!(f, "readdir({p})"),
            Op::Truncate(p, n) => write!(f, "truncate({p}, {n})"),
            Op::Chmod(p, m) => write!(f, "chmod({p}, {m:o})"),
            Op::Fstat(file) => write!(f, "fstat({})", FILES[*file]),
            Op::Close(file) => write!(f, "close({})", FILES[*file]),
            Op::Mount => write!(f, "mount(new memory store)"),
            Op::Umount(k) => write!(f, "umount(extra #{k})"),
        }
    }
}

/// What an op returned, before normalisation (inode numbers and
/// timestamps are made comparable across runs by `world::Observed`).
#[derive(Clone, Debug)]
pub enum Raw {
    Unit,
    Err(i32),
    Attr(Attr),
    Bytes(Vec<u8>),
    Count(usize),
    /// (name, kind, inode number), sorted.
    Names(Vec<(Vec<u8>, String, u64)>),
}
