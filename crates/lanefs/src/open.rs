//! Opening by path: `open`, `create`, `create_new`, `open_with` and
//! `open_flags` (with `O_CREAT`, `O_TMPFILE` and `O_PATH`), and the whole
//! file calls built on them (`read`, `read_to_string`, `write`).
//!
//! Locks and atomics: none of its own. The walk holds what it resolves
//! by the generation it saw, not by a count, which the core's open checks
//! (`walk.rs`); the new [`File`] counts itself on its lane (`handle.rs`),
//! and its position is a plain field until shared (`file.rs`); the rest
//! is the core's.

use std::io;
use std::path::Path;

use lanefs_core::{Attr, DirAt, Errno, FileKind, Result};

use crate::{bytes, File, Filesystem, OpenOptions};

/// The access-mode and open-time flags the core's `open` understands.
const CORE_OPEN_FLAGS: i32 = libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND | libc::O_NOATIME;

/// Linux's `__O_TMPFILE`: `O_TMPFILE` less `O_DIRECTORY`.
const O_TMPFILE_BIT: i32 = libc::O_TMPFILE & !libc::O_DIRECTORY;

impl Filesystem {
    /// Open `path` read-only.
    pub fn open<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        self.open_flags(path, libc::O_RDONLY, 0)
    }

    /// Create or truncate `path` and open it write-only (mode `0o666` less
    /// the umask), as [`std::fs::File::create`].
    pub fn create<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        self.open_flags(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o666)
    }

    /// Create `path`, which must not exist (not even as a dangling
    /// symlink: `EEXIST`), and open it for reading and writing, as
    /// [`std::fs::File::create_new`].
    pub fn create_new<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        self.open_flags(path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o666)
    }

    /// Open with [`OpenOptions`].
    pub fn open_with<P: AsRef<Path>>(&self, path: P, options: &OpenOptions) -> io::Result<File> {
        options.open(self, path)
    }

    /// `open(path, flags, mode)` with raw flags: access mode, `O_CREAT`,
    /// `O_EXCL`, `O_TRUNC`, `O_APPEND`, `O_NOFOLLOW`, `O_DIRECTORY`,
    /// `O_NOATIME`, `O_TMPFILE` (an unnamed file in directory `path`; see
    /// [`link_file`](Self::link_file)), `O_PATH` (a handle that only names
    /// the file, as Linux's: only `O_DIRECTORY` and `O_NOFOLLOW` count, any
    /// kind of file opens, only search permission on the path is needed,
    /// and the [`File`] allows `metadata` and [`link_file`](Self::link_file)
    /// alone — every other call is `EBADF`); `O_DIRECT` opens a regular
    /// file (any alignment, as tmpfs) and is `EINVAL` for a directory;
    /// `__O_TMPFILE` without `O_DIRECTORY`, or with `O_CREAT`, is `EINVAL`;
    /// other flags are ignored.
    pub fn open_flags<P: AsRef<Path>>(&self, path: P, flags: i32, mode: u32) -> io::Result<File> {
        let path = bytes(&path);
        if flags & libc::O_PATH != 0 {
            return Ok(self.open_path(path, flags)?);
        }
        // build_open_flags: `__O_TMPFILE` is only `O_TMPFILE` with
        // `O_DIRECTORY` and without `O_CREAT`; `O_CREAT | O_DIRECTORY` is
        // refused (6.4+).
        if flags & O_TMPFILE_BIT != 0
            && flags & (libc::O_TMPFILE | libc::O_CREAT) != libc::O_TMPFILE
        {
            return Err(Errno::EINVAL.into());
        }
        if flags & libc::O_CREAT != 0 && flags & libc::O_DIRECTORY != 0 {
            return Err(Errno::EINVAL.into());
        }
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Ok(self.open_tmpfile(path, flags, mode)?);
        }
        if flags & libc::O_CREAT != 0 {
            return Ok(self.open_create(path, flags, mode)?);
        }
        let h = self
            .walker()
            .resolve_seen(path, flags & libc::O_NOFOLLOW == 0)?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        // Linux's do_open: O_DIRECTORY first, then may_open's type checks.
        match h.kind {
            FileKind::Directory if write => return Err(Errno::EISDIR.into()),
            FileKind::Directory => {}
            _ if flags & libc::O_DIRECTORY != 0 => return Err(Errno::ENOTDIR.into()),
            FileKind::Symlink => return Err(Errno::ELOOP.into()),
            _ => {}
        }
        let handle = self
            .core()
            .open_checked(&self.cred, h.at(), flags & CORE_OPEN_FLAGS)?;
        if h.kind == FileKind::Directory && flags & libc::O_DIRECT != 0 {
            // do_dentry_open, after the permission checks: a directory
            // cannot do direct I/O (no FMODE_CAN_ODIRECT), as on tmpfs and
            // ext4 (the handle is closed again).
            return Err(Errno::EINVAL.into());
        }
        Ok(File::new(self, handle, h.kind, flags))
    }

    /// `open(path, O_PATH | …)`: as `open(2)` (`build_open_how`), every
    /// flag but `O_DIRECTORY` and `O_NOFOLLOW` is ignored — no create, no
    /// truncate, no access mode. Any kind opens (a symlink itself with
    /// `O_NOFOLLOW`, a device node, a directory); only search permission
    /// on the path is needed. The [`File`] names the file: `metadata` and
    /// [`link_file`](Self::link_file) work, reads, writes, `set_len`,
    /// `set_permissions`, syncs, `fallocate` and seeks are `EBADF`.
    fn open_path(&self, path: &[u8], flags: i32) -> Result<File> {
        let h = self
            .walker()
            .resolve_seen(path, flags & libc::O_NOFOLLOW == 0)?;
        if flags & libc::O_DIRECTORY != 0 && h.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        let handle = self.core().open_path(&self.cred, h.at())?;
        Ok(File::new(self, handle, h.kind, libc::O_PATH))
    }

    /// `open(dir, O_TMPFILE | …)`: an unnamed regular file in directory
    /// `dir`, freed at its last close unless [`link_file`](Self::link_file)
    /// gives it a name first (not with `O_EXCL`). Write access is required
    /// (`EINVAL`), as are write and search permission on `dir`.
    fn open_tmpfile(&self, path: &[u8], flags: i32, mode: u32) -> Result<File> {
        let h = self
            .walker()
            .resolve_seen(path, flags & libc::O_NOFOLLOW == 0)?;
        if h.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        let keep = CORE_OPEN_FLAGS | libc::O_TMPFILE | libc::O_EXCL;
        let (attr, handle) = self.core().tmpfile(
            &self.cred,
            h.at(),
            flags & keep,
            mode & 0o7777,
            self.umask,
            false,
        )?;
        Ok(File::new(self, handle, attr.kind, flags & !libc::O_TMPFILE))
    }

    fn open_create(&self, path: &[u8], flags: i32, mode: u32) -> Result<File> {
        let excl = flags & libc::O_EXCL != 0;
        let mut w = self.walker();
        let mut p = w.parent(path)?;
        loop {
            let Some(name) = p.name().map(<[u8]>::to_vec) else {
                return Err(if excl { Errno::EEXIST } else { Errno::EISDIR });
            };
            let name = name.as_slice();
            if p.trailing_slash {
                return Err(Errno::EISDIR);
            }
            if !excl {
                if let Ok(attr) = self.core().lookup(&self.cred, p.dir.at(), name) {
                    match attr.kind {
                        FileKind::Symlink if flags & libc::O_NOFOLLOW == 0 => {
                            p = w.follow_last(p, attr.ino)?;
                            continue;
                        }
                        FileKind::Directory => return Err(Errno::EISDIR),
                        // protected_regular / protected_fifos: not
                        // implemented (docs/SEMANTICS.md).
                        FileKind::Regular | FileKind::Fifo => {}
                        _ => {
                            self.may_create_in_sticky(p.dir.at(), &attr)?;
                            if attr.kind == FileKind::Symlink {
                                return Err(Errno::ELOOP);
                            }
                        }
                    }
                }
            }
            let core_flags = flags & (CORE_OPEN_FLAGS | libc::O_CREAT | libc::O_EXCL);
            let (attr, handle, _created) = self.core().open_at(
                &self.cred,
                p.dir.at(),
                name,
                core_flags,
                mode & 0o7777,
                self.umask,
                false,
            )?;
            return Ok(File::new(self, handle, attr.kind, flags));
        }
    }

    /// Linux's `may_create_in_sticky` for an `O_CREAT` open that found an
    /// existing symlink (with `O_NOFOLLOW`), socket or device node: in a
    /// sticky world-writable directory, only the node's owner or the
    /// directory's owner may open it (root included: no capability
    /// overrides this rule).
    fn may_create_in_sticky(&self, dir: DirAt, node: &Attr) -> Result<()> {
        let d = self.core().getattr(dir.ino)?;
        if !dir.matches(d.generation) {
            return Err(Errno::ENOENT);
        }
        let dir_mode = d.perm as u32;
        if dir_mode & libc::S_ISVTX == 0 || node.uid == d.uid || node.uid == self.cred.uid {
            return Ok(());
        }
        if dir_mode & 0o002 != 0 {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    /// The whole content of file `path`.
    pub fn read<P: AsRef<Path>>(&self, path: P) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut f = self.open(path)?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// The whole content of file `path` as UTF-8 (as
    /// [`std::fs::read_to_string`]: an [`io::ErrorKind::InvalidData`] error
    /// if it is not).
    pub fn read_to_string<P: AsRef<Path>>(&self, path: P) -> io::Result<String> {
        String::from_utf8(self.read(path)?).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        })
    }

    /// Create or truncate file `path` and write `data` to it.
    pub fn write<P: AsRef<Path>, D: AsRef<[u8]>>(&self, path: P, data: D) -> io::Result<()> {
        use std::io::Write;
        let mut f = self.create(path)?;
        f.write_all(data.as_ref())
    }
}
