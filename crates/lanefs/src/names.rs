//! The calls that create, remove or rename one name: `create_dir` and
//! `create_dir_mode`, `remove_dir`, `remove_file`, `rename` and
//! `rename_flags`, `hard_link`, `link_file`, `symlink`, `read_link` and
//! `mknod`.
//!
//! Locks and atomics: none of its own. The walk to the parent counts
//! nothing and keeps the parent's generation, which the core checks
//! (`walk.rs`); a new inode's counted lookup is given back (`forget`)
//! once made; the rest is the core's.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use lanefs_core::{Errno, FileKind, NAME_MAX, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};

use crate::walk::{self, Last};
use crate::{bytes, File, Filesystem};

impl Filesystem {
    /// `mkdir(path, 0o777)`, less the umask.
    pub fn create_dir<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.create_dir_mode(path, 0o777)
    }

    /// `mkdir(path, mode)`, less the umask.
    pub fn create_dir_mode<P: AsRef<Path>>(&self, path: P, mode: u32) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        let name = self.create_target(&p, true)?;
        let attr = self
            .core()
            .mkdir(&self.cred, p.dir.at(), name, mode, self.umask)?;
        self.core().forget(attr.ino, 1);
        Ok(())
    }

    /// `rmdir(path)`.
    pub fn remove_dir<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        match &p.last {
            Last::Root => Err(Errno::EBUSY.into()),
            Last::Dot => Err(Errno::EINVAL.into()),
            Last::DotDot => Err(Errno::ENOTEMPTY.into()),
            Last::Name(n) => Ok(self.core().rmdir(&self.cred, p.dir.at(), n)?),
        }
    }

    /// `unlink(path)`.
    pub fn remove_file<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        let Some(name) = p.name() else {
            return Err(Errno::EISDIR.into());
        };
        if p.trailing_slash {
            let attr = self.core().lookup(&self.cred, p.dir.at(), name)?;
            return Err(if attr.kind == FileKind::Directory {
                Errno::EISDIR
            } else {
                Errno::ENOTDIR
            }
            .into());
        }
        Ok(self.core().unlink(&self.cred, p.dir.at(), name)?)
    }

    /// `rename(from, to)`.
    pub fn rename<P: AsRef<Path>, Q: AsRef<Path>>(&self, from: P, to: Q) -> io::Result<()> {
        self.rename_flags(from, to, 0)
    }

    /// `renameat2(from, to, flags)` with [`RENAME_NOREPLACE`],
    /// [`RENAME_EXCHANGE`] and [`RENAME_WHITEOUT`] (the source name is left
    /// naming a whiteout: a 0/0 character device of mode 0).
    ///
    /// ```
    /// use lanefs::{Filesystem, RENAME_EXCHANGE, RENAME_NOREPLACE};
    /// let fs = Filesystem::new_in_memory()?;
    /// fs.write("/old", b"1")?;
    /// fs.write("/new", b"2")?;
    /// let err = fs.rename_flags("/old", "/new", RENAME_NOREPLACE).unwrap_err();
    /// assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    /// fs.rename_flags("/old", "/new", RENAME_EXCHANGE)?;
    /// assert_eq!(fs.read("/new")?, b"1");
    /// assert_eq!(fs.read("/old")?, b"2");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn rename_flags<P: AsRef<Path>, Q: AsRef<Path>>(
        &self,
        from: P,
        to: Q,
        flags: u32,
    ) -> io::Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || (flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0)
        {
            return Err(Errno::EINVAL.into());
        }
        let old = self.walker().parent(bytes(&from))?;
        let new = self.walker().parent(bytes(&to))?;
        let Some(old_name) = old.name() else {
            return Err(Errno::EBUSY.into());
        };
        let Some(new_name) = new.name() else {
            return Err(if flags & RENAME_NOREPLACE != 0 {
                Errno::EEXIST
            } else {
                Errno::EBUSY
            }
            .into());
        };
        if new_name.len() > NAME_MAX {
            // Linux looks the old name up first (ENOENT wins).
            self.core().lookup(&self.cred, old.dir.at(), old_name)?;
            return Err(Errno::ENAMETOOLONG.into());
        }
        if old.trailing_slash || new.trailing_slash {
            // Linux's do_renameat2: the slash rules need both entries' types.
            let core = self.core();
            let src = core.lookup(&self.cred, old.dir.at(), old_name)?;
            let dst = core.lookup(&self.cred, new.dir.at(), new_name);
            if let Err(e) = dst {
                if e != Errno::ENOENT || flags & RENAME_EXCHANGE != 0 {
                    return Err(e.into());
                }
            }
            let dst = dst.ok();
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(Errno::EEXIST.into());
            }
            if flags & RENAME_EXCHANGE != 0 {
                if let Some(d) = dst {
                    if d.kind != FileKind::Directory && new.trailing_slash {
                        return Err(Errno::ENOTDIR.into());
                    }
                }
            }
            if src.kind != FileKind::Directory
                && (old.trailing_slash || (flags & RENAME_EXCHANGE == 0 && new.trailing_slash))
            {
                return Err(Errno::ENOTDIR.into());
            }
        }
        Ok(self.core().rename(
            &self.cred,
            old.dir.at(),
            old_name,
            new.dir.at(),
            new_name,
            flags,
        )?)
    }

    /// `link(original, link)`: a new name for `original` (not followed if
    /// it is a symlink, as Linux's `link`).
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.write("/a", b"shared")?;
    /// fs.hard_link("/a", "/b")?;
    /// fs.remove_file("/a")?;
    /// assert_eq!(fs.read("/b")?, b"shared");
    /// assert_eq!(fs.metadata("/b")?.nlink(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hard_link<P: AsRef<Path>, Q: AsRef<Path>>(
        &self,
        original: P,
        link: Q,
    ) -> io::Result<()> {
        // The source as seen, not counted (as the parent): the core checks
        // the generation, and a taken name fails before it touches it.
        let src = self.walker().resolve_seen(bytes(&original), false)?;
        let mut w = self.walker();
        let p = w.parent(bytes(&link))?;
        let name = self.create_target(&p, false)?;
        self.core()
            .link_no_attr(&self.cred, src.at(), p.dir.at(), name)?;
        Ok(())
    }

    /// `linkat(fd, "", AT_FDCWD, link, AT_EMPTY_PATH)`: a new name `link`
    /// for the open `file` — also the first name of a file opened
    /// `O_TMPFILE` without `O_EXCL`; `ENOENT` for another file with no
    /// name left.
    pub fn link_file<Q: AsRef<Path>>(&self, file: &File, link: Q) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&link))?;
        let name = self.create_target(&p, false)?;
        self.core()
            .link_no_attr(&self.cred, file.ino(), p.dir.at(), name)?;
        Ok(())
    }

    /// `symlink(target, link)`: `link` will point at `target` (empty:
    /// `ENOENT`; longer than 4095 bytes: `ENAMETOOLONG`).
    pub fn symlink<P: AsRef<Path>, Q: AsRef<Path>>(&self, target: P, link: Q) -> io::Result<()> {
        let target = bytes(&target);
        walk::check_path(target)?;
        let mut w = self.walker();
        let p = w.parent(bytes(&link))?;
        let name = self.create_target(&p, false)?;
        let attr = self.core().symlink(&self.cred, p.dir.at(), name, target)?;
        self.core().forget(attr.ino, 1);
        Ok(())
    }

    /// The target of symlink `path` (`EINVAL` if it is not a symlink).
    pub fn read_link<P: AsRef<Path>>(&self, path: P) -> io::Result<PathBuf> {
        let h = self.resolve(bytes(&path), false)?;
        if h.kind != FileKind::Symlink {
            return Err(Errno::EINVAL.into());
        }
        let target = self.core().readlink(h.ino)?;
        Ok(PathBuf::from(OsString::from_vec(target)))
    }

    /// `mknod(path, mode, rdev)`: `mode` carries the type (regular when
    /// zero, fifo, socket, character or block device; a directory is
    /// `EPERM`, anything else `EINVAL`) and permission bits, less the umask.
    /// `rdev` is a `libc::makedev` number; one the kernel's 32-bit device
    /// number cannot hold (a major above 4095 or a minor above 2^20 - 1)
    /// is `EINVAL` for every type, before anything else (glibc's
    /// `mknodat`).
    pub fn mknod<P: AsRef<Path>>(&self, path: P, mode: u32, rdev: u64) -> io::Result<()> {
        if rdev > u64::from(u32::MAX) {
            return Err(Errno::EINVAL.into());
        }
        match mode & libc::S_IFMT {
            0 | libc::S_IFREG | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK => {}
            libc::S_IFDIR => return Err(Errno::EPERM.into()),
            _ => return Err(Errno::EINVAL.into()),
        }
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        let name = self.create_target(&p, false)?;
        let attr = self
            .core()
            .mknod(&self.cred, p.dir.at(), name, mode, self.umask, rdev)?;
        self.core().forget(attr.ino, 1);
        Ok(())
    }
}
