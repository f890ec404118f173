//! The calls on whole trees and whole paths, each made of the
//! single-name calls as std's own are: `create_dir_all` and
//! `create_dir_all_mode`, `remove_dir_all` (iterative, never following a
//! symlink), `canonicalize` (as glibc's `realpath`) and `copy`, with their
//! private helpers.
//!
//! Locks and atomics: none of its own. `remove_dir_all` pins each
//! directory it empties by a counted lookup, given back (`forget`) when
//! the walk's guard (the top) or its level (each below) drops; everything
//! else is the core's.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use lanefs_core::{Errno, FileKind, Fs, Ino, Result};

use crate::walk::{self, MAXSYMLINKS, PATH_BYTES_MAX};
use crate::{bytes, os_path, Filesystem, OpenOptions};

/// Whether what follows a non-directory in a path to canonicalize makes it
/// an error (glibc's `suffix_requires_dir_check`): a trailing slash, or
/// `.` or `..` after it. A name after it fails its own lookup (`ENOTDIR`).
fn suffix_needs_dir(rest: &[u8]) -> bool {
    if rest.first() != Some(&b'/') {
        return false;
    }
    let rest = &rest[rest.iter().position(|&b| b != b'/').unwrap_or(rest.len())..];
    let comp_end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    matches!(&rest[..comp_end], b"" | b"." | b"..")
}

impl Filesystem {
    /// Create a directory and every missing parent; an existing directory
    /// is fine (as [`std::fs::create_dir_all`]: the error of the deepest
    /// `mkdir` that failed for another reason is returned, and an empty
    /// path is nothing to create).
    pub fn create_dir_all<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.create_dir_all_mode(path, 0o777)
    }

    /// [`create_dir_all`](Self::create_dir_all) giving each directory it
    /// creates mode `mode` less the umask, as std's
    /// `DirBuilder::new().recursive(true).mode(mode)`.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all_mode("/a/b", 0o750)?;
    /// assert_eq!(fs.metadata("/a")?.permissions(), 0o750);
    /// assert_eq!(fs.metadata("/a/b")?.permissions(), 0o750);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn create_dir_all_mode<P: AsRef<Path>>(&self, path: P, mode: u32) -> io::Result<()> {
        let path = bytes(&path);
        if path.is_empty() {
            return Ok(());
        }
        walk::check_path(path)?;
        self.create_dir_all_bytes(path, mode, 0)
    }

    fn create_dir_all_bytes(&self, path: &[u8], mode: u32, depth: usize) -> io::Result<()> {
        let trimmed = match path.iter().rposition(|&b| b != b'/') {
            Some(end) => &path[..=end],
            None => return Ok(()), // the root
        };
        let p = Path::new(std::ffi::OsStr::from_bytes(trimmed));
        match self.create_dir_mode(p, mode) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && depth < PATH_BYTES_MAX => {}
            Err(e) => {
                return match self.metadata(p) {
                    Ok(m) if m.is_dir() => Ok(()),
                    _ => Err(e),
                }
            }
        }
        let parent = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => &trimmed[..i],
            None => &[][..],
        };
        if !parent.is_empty() {
            self.create_dir_all_bytes(parent, mode, depth + 1)?;
        }
        match self.create_dir_mode(p, mode) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && self.metadata(p)?.is_dir() => {
                Ok(())
            }
            r => r,
        }
    }

    /// Remove `path` and everything below it, as [`std::fs::remove_dir_all`]:
    /// a symlink is removed itself and never followed, below `path` as
    /// well; a file gives `ENOTDIR`. As std, `path` names what `lstat`
    /// names — with a trailing slash, `link/` is the directory the link
    /// points to: its content is removed, then the final `rmdir` of the
    /// path fails (`ENOTDIR`), as `rmdir` of `dir/.` does (`EINVAL`) and
    /// of `/` (`EBUSY`: `remove_dir_all("/")` empties the file system).
    /// Entries that vanish meanwhile (another remover) are no error, nor
    /// is the directory itself gone at the end.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all("/keep/data")?;
    /// fs.create_dir_all("/scratch/tmp")?;
    /// fs.symlink("/keep", "/scratch/tmp/keep")?;
    /// fs.remove_dir_all("/scratch")?;
    /// assert!(fs.metadata("/keep/data")?.is_dir());
    /// assert!(!fs.try_exists("/scratch")?);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn remove_dir_all<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        let path = bytes(&path);
        if self.symlink_metadata(os_path(path))?.is_symlink() {
            return self.remove_file(os_path(path));
        }
        // std opens it O_NOFOLLOW | O_DIRECTORY: a symlink put there
        // meanwhile is ELOOP, anything else not a directory ENOTDIR.
        let h = self.resolve(path, false)?;
        match h.kind {
            FileKind::Directory => {}
            FileKind::Symlink => return Err(Errno::ELOOP.into()),
            _ => return Err(Errno::ENOTDIR.into()),
        }
        self.remove_tree(h.ino)?;
        drop(h);
        match self.remove_dir(os_path(path)) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// The names and kinds in directory `dir` (pinned by the caller).
    fn list_all(&self, dir: Ino) -> Result<Vec<(Vec<u8>, FileKind)>> {
        let handle = self.core().open(&self.cred, dir, libc::O_RDONLY)?;
        let mut entries = Vec::new();
        self.core().readdir(&handle, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                entries.push((e.name.to_vec(), e.kind));
            }
            false
        })?;
        Ok(entries)
    }

    /// Empty directory `top` (pinned by the caller), depth first without
    /// recursion: a tree may be deeper than any path can name (built by
    /// renames), and its depth must not be bounded by the caller's stack.
    /// An entry gone meanwhile (`ENOENT`) is skipped, as std's removal does.
    fn remove_tree(&self, top: Ino) -> Result<()> {
        /// A directory being emptied: pinned by a counted lookup (given
        /// back on drop) unless it is `top`, with its name in the one
        /// below it on the stack and the entries left to remove.
        struct Level<'a> {
            fs: &'a Fs,
            ino: Ino,
            counted: bool,
            name: Vec<u8>,
            entries: Vec<(Vec<u8>, FileKind)>,
        }
        impl Drop for Level<'_> {
            fn drop(&mut self) {
                if self.counted {
                    self.fs.forget(self.ino, 1);
                }
            }
        }
        fn gone_ok(r: Result<()>) -> Result<()> {
            match r {
                Err(Errno::ENOENT) => Ok(()),
                r => r,
            }
        }
        let core = self.core();
        let mut stack = vec![Level {
            fs: core,
            ino: top,
            counted: false,
            name: Vec::new(),
            entries: self.list_all(top)?,
        }];
        while let Some(level) = stack.last_mut() {
            match level.entries.pop() {
                Some((name, FileKind::Directory)) => {
                    let attr = match core.lookup_counted(&self.cred, level.ino, &name) {
                        Err(Errno::ENOENT) => continue,
                        r => r?,
                    };
                    let mut next = Level {
                        fs: core,
                        ino: attr.ino,
                        counted: true,
                        name,
                        entries: Vec::new(),
                    };
                    if attr.kind != FileKind::Directory {
                        // Replaced by a non-directory meanwhile.
                        gone_ok(core.unlink(&self.cred, level.ino, &next.name))?;
                        continue;
                    }
                    next.entries = match self.list_all(attr.ino) {
                        Err(Errno::ENOENT) => continue,
                        r => r?,
                    };
                    stack.push(next);
                }
                Some((name, _)) => gone_ok(core.unlink(&self.cred, level.ino, &name))?,
                None => {
                    let done = stack.pop().expect("a level");
                    if let Some(parent) = stack.last() {
                        gone_ok(core.rmdir(&self.cred, parent.ino, &done.name))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The absolute path `path` names, with every symlink resolved and no
    /// `.` or `..` left, as [`std::fs::canonicalize`] (glibc's `realpath`):
    /// every component must exist (`ENOENT`), `..` applies to the
    /// component before it once that is resolved (so `link/..` is the
    /// parent of the link's target), a component followed by `/`, `/.` or
    /// `/..` must be a directory (`ENOTDIR`), and more than
    /// [`MAXSYMLINKS`] links is `ELOOP`. Paths are relative to the root.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all("/srv/data/v2")?;
    /// fs.symlink("data/v2", "/srv/current")?;
    /// assert_eq!(fs.canonicalize("/srv/current/../v2/.")?, std::path::Path::new("/srv/data/v2"));
    /// let err = fs.canonicalize("/srv/missing/..").unwrap_err();
    /// assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn canonicalize<P: AsRef<Path>>(&self, path: P) -> io::Result<PathBuf> {
        let path = bytes(&path);
        walk::check_path(path)?;
        // `resolved`: the answer so far, "" for the root, else "/a/b";
        // `rest[at..]`: what is left to resolve.
        let mut resolved: Vec<u8> = Vec::new();
        let mut rest = path.to_vec();
        let mut at = 0;
        let mut links = 0;
        loop {
            while rest.get(at) == Some(&b'/') {
                at += 1;
            }
            if at == rest.len() {
                break;
            }
            let end = rest[at..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(rest.len(), |i| at + i);
            match &rest[at..end] {
                b"." => {}
                b".." => {
                    let cut = resolved.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    resolved.truncate(cut);
                }
                name => {
                    let mut candidate = Vec::with_capacity(resolved.len() + 1 + name.len());
                    candidate.extend_from_slice(&resolved);
                    candidate.push(b'/');
                    candidate.extend_from_slice(name);
                    let candidate_path = Path::new(std::ffi::OsStr::from_bytes(&candidate));
                    let m = self.symlink_metadata(candidate_path)?;
                    if m.is_symlink() {
                        links += 1;
                        if links > MAXSYMLINKS {
                            return Err(Errno::ELOOP.into());
                        }
                        let target = self.read_link(candidate_path)?.into_os_string();
                        let mut next = target.into_vec();
                        if next.is_empty() {
                            return Err(Errno::ENOENT.into());
                        }
                        if next[0] == b'/' {
                            resolved.clear();
                        }
                        next.extend_from_slice(&rest[end..]);
                        rest = next;
                        at = 0;
                        continue;
                    }
                    if !m.is_dir() && suffix_needs_dir(&rest[end..]) {
                        return Err(Errno::ENOTDIR.into());
                    }
                    resolved = candidate;
                }
            }
            at = end;
        }
        if resolved.is_empty() {
            resolved.push(b'/');
        }
        Ok(PathBuf::from(OsString::from_vec(resolved)))
    }

    /// Copy the content of regular file `from` (symlinks followed) to `to`,
    /// created or truncated, and give `to` the permission bits of `from`
    /// (setuid and setgid included, when `to` is a regular file), as
    /// [`std::fs::copy`]; the number of bytes copied. A source that is not
    /// a regular file is an [`io::ErrorKind::InvalidInput`] error. Runs of
    /// zeros are left as holes.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.write("/tool", b"#!/bin/sh\n")?;
    /// fs.set_permissions("/tool", 0o4750)?;
    /// assert_eq!(fs.copy("/tool", "/tool.bak")?, 10);
    /// assert_eq!(fs.read("/tool.bak")?, b"#!/bin/sh\n");
    /// assert_eq!(fs.metadata("/tool.bak")?.permissions(), 0o4750);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn copy<P: AsRef<Path>, Q: AsRef<Path>>(&self, from: P, to: Q) -> io::Result<u64> {
        const CHUNK: usize = 128 << 10;
        let reader = self.open(from)?;
        let meta = reader.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the source path is neither a regular file nor a symlink to a regular file",
            ));
        }
        let perm = meta.permissions();
        let mut writer = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(perm)
            .open(self, to)?;
        let regular = writer.metadata()?.is_file();
        if regular {
            // The file may have existed: its bits are set all the same.
            writer.set_permissions(perm)?;
        }
        let mut buf = vec![0u8; CHUNK.min(meta.len().max(1) as usize)];
        let mut copied = 0u64;
        loop {
            let n = reader.read_at(&mut buf, copied)?;
            if n == 0 {
                break;
            }
            let data = &buf[..n];
            if !regular {
                std::io::Write::write_all(&mut writer, data)?;
            } else if data.iter().any(|&b| b != 0) {
                writer.write_all_at(data, copied)?;
            }
            copied += n as u64;
        }
        if regular && writer.metadata()?.len() < copied {
            // Zeros at the end: a hole up to the size.
            writer.set_len(copied)?;
        }
        Ok(copied)
    }
}
