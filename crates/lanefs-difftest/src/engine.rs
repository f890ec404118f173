//! The engine as a [`Target`], through the `lanefs` Rust API.

use std::ffi::OsStr;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use lanefs::iflags::{FlagsSet, FS_APPEND_FL, FS_IMMUTABLE_FL};
use lanefs::{
    Cred, Errno, File, FileKind, Filesystem, FsConfig, MemoryStoreConfig, TimeSet, Timespec,
    Variants,
};

use crate::op::{write_data, Op, Outcome, StatLite, Step, Value, Who, SLOTS};
use crate::tree::{hash_content, join, Node, Tree, TREE_DEPTH_MAX};
use crate::Target;

fn p(b: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(b))
}

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// `d_type` of a kind.
pub fn dtype(kind: FileKind) -> u8 {
    match kind {
        FileKind::Regular => libc::DT_REG,
        FileKind::Directory => libc::DT_DIR,
        FileKind::Symlink => libc::DT_LNK,
        FileKind::CharDevice => libc::DT_CHR,
        FileKind::BlockDevice => libc::DT_BLK,
        FileKind::Fifo => libc::DT_FIFO,
        FileKind::Socket => libc::DT_SOCK,
    }
}

fn stat_lite(m: &lanefs::Metadata) -> StatLite {
    StatLite {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        size: m.len(),
        nlink: m.nlink(),
        rdev: m.rdev(),
    }
}

fn time(t: crate::op::TimeArg) -> Option<TimeSet> {
    match t {
        crate::op::TimeArg::Omit => None,
        crate::op::TimeArg::Now => Some(TimeSet::Now),
        crate::op::TimeArg::At { sec, nsec } => Some(TimeSet::At(Timespec { sec, nsec })),
    }
}

/// Whether opening `path` would open a fifo, socket or device node (which
/// the harness never does: a fifo would block on the kernel).
fn is_special(kind: FileKind) -> bool {
    !matches!(
        kind,
        FileKind::Regular | FileKind::Directory | FileKind::Symlink
    )
}

/// The lanefs engine, reached through [`Filesystem`].
pub struct EngineTarget {
    root: Filesystem,
    alice: Filesystem,
    bob: Filesystem,
    files: Vec<Option<File>>,
    shrink_every_step: bool,
}

impl EngineTarget {
    /// A fresh in-memory engine; `protected_hardlinks` as the host's
    /// `fs.protected_hardlinks`, created files masked with `umask`; the
    /// engine variants named by `$LANEFS_VARIANTS` (see
    /// [`crate::variants_from_env`]), the default if unset.
    pub fn new(umask: u32, shrink_every_step: bool) -> io::Result<EngineTarget> {
        let variants = crate::variants_from_env().map_err(io::Error::other)?;
        EngineTarget::with_variants(umask, shrink_every_step, variants)
    }

    /// As [`EngineTarget::new`], with the engine's mechanisms set to
    /// `variants` (the seeds' before-designs, for their differential runs).
    pub fn with_variants(
        umask: u32,
        shrink_every_step: bool,
        variants: Variants,
    ) -> io::Result<EngineTarget> {
        let config = FsConfig {
            protected_hardlinks: crate::host_protected_hardlinks(),
            variants,
            ..FsConfig::default()
        };
        let fs = Filesystem::in_memory(MemoryStoreConfig::default(), config)?;
        Ok(EngineTarget::with_fs(fs, umask, shrink_every_step))
    }

    /// Run on an existing instance (its root view is used for snapshots).
    pub fn with_fs(fs: Filesystem, umask: u32, shrink_every_step: bool) -> EngineTarget {
        let fs = fs.with_cred(Cred::root()).with_umask(umask);
        let view = |w: Who| {
            let (uid, gid, groups) = w.ids();
            fs.with_cred(Cred {
                uid,
                gid,
                groups: groups.to_vec(),
            })
        };
        EngineTarget {
            alice: view(Who::Alice),
            bob: view(Who::Bob),
            root: fs,
            files: (0..SLOTS).map(|_| None).collect(),
            shrink_every_step,
        }
    }

    /// The file system (root view).
    pub fn fs(&self) -> &Filesystem {
        &self.root
    }

    fn view(&self, who: Who) -> &Filesystem {
        match who {
            Who::Root => &self.root,
            Who::Alice => &self.alice,
            Who::Bob => &self.bob,
        }
    }

    fn file(&mut self, slot: usize) -> Result<&mut File, i32> {
        self.files
            .get_mut(slot)
            .and_then(|f| f.as_mut())
            .ok_or(libc::EBADF)
    }

    fn special(&self, fs: &Filesystem, path: &[u8]) -> bool {
        matches!(fs.metadata(p(path)), Ok(m) if is_special(m.kind()))
    }

    fn run(&mut self, step: &Step) -> Result<Value, io::Error> {
        let fs = self.view(step.who).clone();
        let unit = |r: io::Result<()>| r.map(|()| Value::Unit);
        match &step.op {
            Op::Create { path, mode, excl } => {
                if self.special(&fs, path) {
                    return Ok(Value::Skipped);
                }
                let mut flags = libc::O_CREAT | libc::O_WRONLY;
                if *excl {
                    flags |= libc::O_EXCL;
                }
                unit(fs.open_flags(p(path), flags, *mode).map(drop))
            }
            Op::Mknod { path, mode, rdev } => unit(fs.mknod(p(path), *mode, *rdev)),
            Op::Mkdir { path, mode } => unit(fs.create_dir_mode(p(path), *mode)),
            Op::Unlink { path } => unit(fs.remove_file(p(path))),
            Op::Rmdir { path } => unit(fs.remove_dir(p(path))),
            Op::Symlink { target, path } => unit(fs.symlink(p(target), p(path))),
            Op::Readlink { path } => fs
                .read_link(p(path))
                .map(|t| Value::Bytes(t.as_os_str().as_bytes().to_vec())),
            Op::Link { old, new } => unit(fs.hard_link(p(old), p(new))),
            Op::Rename { old, new, flags } => unit(fs.rename_flags(p(old), p(new), *flags)),
            Op::Open {
                slot,
                path,
                flags,
                mode,
            } => {
                if let Some(f) = self.files.get_mut(*slot) {
                    *f = None;
                }
                if self.special(&fs, path) {
                    return Ok(Value::Skipped);
                }
                let f = fs.open_flags(p(path), *flags, *mode)?;
                if let Some(s) = self.files.get_mut(*slot) {
                    *s = Some(f);
                }
                Ok(Value::Unit)
            }
            Op::Close { slot } => match self.files.get_mut(*slot).and_then(|f| f.take()) {
                Some(_) => Ok(Value::Unit),
                None => Err(Errno::EBADF.into()),
            },
            Op::Write {
                slot,
                offset,
                len,
                seed,
            } => {
                let data = write_data(*len, *seed);
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                let n = match offset {
                    Some(o) => f.write_at(&data, *o)?,
                    None => f.write(&data)?,
                };
                Ok(Value::Count(n as u64))
            }
            Op::Read { slot, offset, len } => {
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                let mut buf = vec![0u8; *len];
                let n = match offset {
                    Some(o) => f.read_at(&mut buf, *o)?,
                    None => f.read(&mut buf)?,
                };
                buf.truncate(n);
                Ok(Value::Bytes(buf))
            }
            Op::Seek {
                slot,
                offset,
                whence,
            } => {
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                // lseek checks the descriptor before its arguments.
                if f.is_path() {
                    return Err(Errno::EBADF.into());
                }
                let pos = match *whence {
                    libc::SEEK_SET if *offset < 0 => return Err(Errno::EINVAL.into()),
                    libc::SEEK_SET => SeekFrom::Start(*offset as u64),
                    libc::SEEK_CUR => SeekFrom::Current(*offset),
                    libc::SEEK_END => SeekFrom::End(*offset),
                    _ => return Err(Errno::EINVAL.into()),
                };
                Ok(Value::Count(f.seek(pos)?))
            }
            Op::Ftruncate { slot, size } => {
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                unit(f.set_len(*size))
            }
            Op::Fallocate {
                slot,
                mode,
                offset,
                len,
            } => {
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                unit(f.fallocate(*mode, *offset, *len))
            }
            Op::Fsync { slot, datasync } => {
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                unit(if *datasync {
                    f.sync_data()
                } else {
                    f.sync_all()
                })
            }
            Op::Fchmod { slot, mode } => {
                // fchmod checks the caller's credential, not the opener's.
                let cred = fs.cred().clone();
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                let changes = lanefs::SetAttr {
                    mode: Some(*mode & 0o7777),
                    ..lanefs::SetAttr::default()
                };
                fs.core()
                    .setattr(&cred, f.ino(), &changes, Some(f.handle()))
                    .map(|_| Value::Unit)
                    .map_err(io::Error::from)
            }
            Op::Fstat { slot } => {
                let f = self.file(*slot).map_err(io::Error::from_raw_os_error)?;
                Ok(Value::Stat(stat_lite(&f.metadata()?)))
            }
            Op::Truncate { path, size } => unit(fs.truncate(p(path), *size)),
            Op::Chmod { path, mode } => unit(fs.set_permissions(p(path), *mode)),
            Op::Chown {
                path,
                uid,
                gid,
                follow,
            } => unit(if *follow {
                fs.chown(p(path), *uid, *gid)
            } else {
                fs.lchown(p(path), *uid, *gid)
            }),
            Op::Utimens {
                path,
                atime,
                mtime,
                follow,
            } => unit(if *follow {
                fs.set_times(p(path), time(*atime), time(*mtime))
            } else {
                fs.set_symlink_times(p(path), time(*atime), time(*mtime))
            }),
            Op::Stat { path, follow } => {
                let m = if *follow {
                    fs.metadata(p(path))?
                } else {
                    fs.symlink_metadata(p(path))?
                };
                Ok(Value::Stat(stat_lite(&m)))
            }
            Op::Access { path, mask } => unit(fs.access(p(path), *mask)),
            Op::Readdir { path } => {
                let mut names = Vec::new();
                for e in fs.read_dir(p(path))? {
                    let e = e?;
                    names.push((e.name_bytes().to_vec(), dtype(e.kind())));
                }
                names.sort();
                Ok(Value::Names(names))
            }
            Op::SetXattr {
                path,
                name,
                value,
                flags,
            } => unit(fs.set_xattr(p(path), name, value, *flags)),
            Op::GetXattr { path, name, size } => {
                let v = fs.get_xattr(p(path), name)?;
                sized(v.len(), *size).map(|n| match n {
                    Some(n) => Value::Count(n),
                    None => Value::Bytes(v),
                })
            }
            Op::ListXattr { path, size } => {
                let names = fs.list_xattr(p(path))?;
                let total: usize = names.iter().map(|n| n.len() + 1).sum();
                sized(total, *size).map(|n| match n {
                    Some(n) => Value::Count(n),
                    None => {
                        let mut v: Vec<_> = names.into_iter().map(|n| (n, 0)).collect();
                        v.sort();
                        Value::Names(v)
                    }
                })
            }
            Op::RemoveXattr { path, name } => unit(fs.remove_xattr(p(path), name)),
            Op::SetFlags { path, flags } => {
                if self.special(&fs, path) {
                    return Ok(Value::Skipped);
                }
                unit(fs.set_flags(p(path), FlagsSet::Flags(*flags)))
            }
            Op::GetFlags { path } => {
                if self.special(&fs, path) {
                    return Ok(Value::Skipped);
                }
                fs.flags(p(path)).map(|f| Value::Count(f.into()))
            }
        }
    }
}

/// The `size` argument rules of `getxattr`/`listxattr`: 0 asks for the
/// size; a smaller buffer than needed is `ERANGE`; `Ok(None)`: return the
/// data.
pub fn sized(len: usize, size: usize) -> io::Result<Option<u64>> {
    if size == 0 {
        Ok(Some(len as u64))
    } else if size < len {
        Err(Errno::ERANGE.into())
    } else {
        Ok(None)
    }
}

fn snapshot_dir(fs: &Filesystem, dir: &[u8], depth: usize, tree: &mut Tree) -> io::Result<()> {
    let m = fs.symlink_metadata(p(dir))?;
    let mut node = Node {
        flags: 0,
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        size: m.len(),
        nlink: m.nlink(),
        rdev: m.rdev(),
        content: None,
        target: None,
        xattrs: Vec::new(),
    };
    match m.kind() {
        FileKind::Regular => {
            let f = fs.open(p(dir))?;
            node.content = Some(hash_content(m.len(), |buf, off| f.read_at(buf, off))?);
        }
        FileKind::Symlink => {
            node.target = Some(fs.read_link(p(dir))?.as_os_str().as_bytes().to_vec());
        }
        _ => {}
    }
    if matches!(m.kind(), FileKind::Regular | FileKind::Directory) {
        node.flags = fs.flags(p(dir))?;
        for name in fs.list_xattr(p(dir))? {
            let v = fs.get_xattr(p(dir), &name)?;
            node.xattrs.push((name, v));
        }
        node.xattrs.sort();
    }
    tree.0.insert(dir.to_vec(), node);
    if m.kind() == FileKind::Directory && depth < TREE_DEPTH_MAX {
        let mut names = Vec::new();
        for e in fs.read_dir(p(dir))? {
            names.push(e?.name_bytes().to_vec());
        }
        for n in names {
            snapshot_dir(fs, &join(dir, &n), depth + 1, tree)?;
        }
    }
    Ok(())
}

impl Target for EngineTarget {
    fn name(&self) -> &str {
        "lanefs"
    }

    fn apply(&mut self, step: &Step) -> Outcome {
        let r = self.run(step).map_err(errno);
        if self.shrink_every_step {
            self.root.core().shrink();
        }
        r
    }

    fn close_all(&mut self) {
        for f in &mut self.files {
            *f = None;
        }
    }

    fn snapshot(&mut self) -> Result<Tree, String> {
        let mut tree = Tree::default();
        snapshot_dir(&self.root, b"/", 0, &mut tree)
            .map_err(|e| format!("lanefs snapshot failed: {}", e))?;
        Ok(tree)
    }

    /// `chown(f, -1, -1)` of an immutable or append-only setuid/setgid
    /// file (docs/SEMANTICS.md, accepted divergences).
    fn known_divergence(&mut self, step: &Step) -> bool {
        let Op::Chown {
            path,
            uid,
            gid,
            follow,
        } = &step.op
        else {
            return false;
        };
        // `None` or chown's -1: no id changes.
        let keep = |id: &Option<u32>| id.is_none_or(|i| i == u32::MAX);
        if !keep(uid) || !keep(gid) {
            return false;
        }
        let m = if *follow {
            self.root.metadata(p(path))
        } else {
            self.root.symlink_metadata(p(path))
        };
        let Ok(m) = m else {
            return false;
        };
        m.kind() == FileKind::Regular
            && m.permissions() & 0o6000 != 0
            && self
                .root
                .flags(p(path))
                .is_ok_and(|f| f & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0)
    }
}

/// Take every inode flag off the tree of `fs` (a root view), as
/// `chattr -R =`, so that the cleanup after a case can remove everything.
pub fn clear_engine_flags(fs: &Filesystem) -> io::Result<()> {
    let mut todo = vec![b"/".to_vec()];
    while let Some(path) = todo.pop() {
        let m = fs.symlink_metadata(p(&path))?;
        if matches!(m.kind(), FileKind::Regular | FileKind::Directory) && fs.flags(p(&path))? != 0 {
            fs.set_flags(p(&path), FlagsSet::Flags(0))?;
        }
        if m.kind() == FileKind::Directory {
            for e in fs.read_dir(p(&path))? {
                todo.push(join(&path, e?.name_bytes()));
            }
        }
    }
    Ok(())
}
