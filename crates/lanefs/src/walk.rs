//! Linux path resolution over the core's inode-number calls.
//!
//! This module plays the part of the kernel's `fs/namei.c` for the Rust API:
//! it splits a path into components, looks each one up with the caller's
//! credential, follows symbolic links (at most [`MAXSYMLINKS`] per
//! resolution, `ELOOP` beyond) and applies the trailing-slash rules.
//!
//! Two walks, as Linux's `LOOKUP_RCU` then ref-walk:
//! * first the core's RCU-walk ([`Fs::resolve_rcu`]): no lock and no
//!   reference on the way; a stat takes none at all, a walk to the parent
//!   of a name to create, remove or rename none either (it keeps the
//!   parent's generation, which the call checks: [`DirAt`]), every other
//!   call one counted lookup on the final inode. It answers only plain names (and
//!   `.`); a symlink it must follow, `..`, a cache miss or repeated
//!   concurrent changes hand the path to
//! * the reference walk: every directory the walk stands in is pinned by a
//!   counted lookup ([`Held`]), given back with `forget` when the guard
//!   drops, so a concurrent `rmdir` can unlink the directory under us but
//!   never free it or let its inode number be reused while we still use it
//!   (we then get the errors Linux gives for a dead directory, `ENOENT` on
//!   lookup and create).
//!
//! Both give the same answers on a quiet tree; under concurrent changes
//! each step of either is one linearizable lookup (see the core's
//! `walk_rcu` module for the exact guarantee).

use std::collections::VecDeque;

use lanefs_core::{
    Attr, Cred, DirAt, Errno, FileKind, Found, Fs, Ino, Result, MAX_RCU_COMPONENTS, MAY_EXEC,
    ROOT_INO,
};

/// Most symbolic links followed while resolving one path (Linux's
/// `MAXSYMLINKS`): the 41st gives `ELOOP`.
pub const MAXSYMLINKS: u32 = 40;
/// Longest path accepted, in bytes, without the NUL (Linux's `PATH_MAX` less
/// one): longer paths give `ENAMETOOLONG`.
pub const PATH_BYTES_MAX: usize = 4095;

/// An inode a walk stands in or ended on, and what keeps its number
/// meaning that inode.
pub(crate) struct Held<'a> {
    fs: &'a Fs,
    pub(crate) ino: Ino,
    pub(crate) kind: FileKind,
    pin: Pin,
}

/// How a [`Held`] number stays meaningful.
#[derive(Clone, Copy)]
enum Pin {
    /// The root: never freed.
    Root,
    /// One counted lookup, given back with `forget` on drop.
    Counted,
    /// Nothing held (the walk to a parent counts nothing, so that
    /// changes of names in one directory write no line of it): the
    /// generation seen, which every call on it checks ([`DirAt`]) — a
    /// directory freed meanwhile answers `ENOENT`, as Linux's dead
    /// directory does.
    Seen(u64),
}

impl<'a> Held<'a> {
    pub(crate) fn root(fs: &'a Fs) -> Held<'a> {
        Held {
            fs,
            ino: ROOT_INO,
            kind: FileKind::Directory,
            pin: Pin::Root,
        }
    }

    fn counted(fs: &'a Fs, ino: Ino, kind: FileKind) -> Held<'a> {
        Held {
            fs,
            ino,
            kind,
            pin: Pin::Counted,
        }
    }

    fn seen(fs: &'a Fs, found: Found) -> Held<'a> {
        Held {
            fs,
            ino: found.ino,
            kind: found.kind,
            pin: Pin::Seen(found.generation),
        }
    }

    /// The inode as the directory of a call: checked by generation when
    /// nothing holds it.
    pub(crate) fn at(&self) -> DirAt {
        match self.pin {
            Pin::Seen(generation) => DirAt::checked(self.ino, generation),
            Pin::Root | Pin::Counted => self.ino.into(),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Pin::Counted = self.pin {
            self.fs.forget(self.ino, 1);
        }
    }
}

/// What the last component of a path is, as Linux's `LAST_*` types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Last {
    /// The path names the root itself (`/`, `//`).
    Root,
    /// `.`
    Dot,
    /// `..`
    DotDot,
    /// An ordinary name.
    Name(Vec<u8>),
}

/// A resolved parent directory and the last component of a path.
pub(crate) struct Parent<'a> {
    pub(crate) dir: Held<'a>,
    pub(crate) last: Last,
    /// The path ended in one or more slashes.
    pub(crate) trailing_slash: bool,
}

impl Parent<'_> {
    /// The ordinary last name, or `None` for `/`, `.` and `..`.
    pub(crate) fn name(&self) -> Option<&[u8]> {
        match &self.last {
            Last::Name(n) => Some(n),
            _ => None,
        }
    }
}

/// Reject what the kernel (or std, making the C string) rejects before
/// walking: a path with a NUL byte (`EINVAL`, std's `InvalidInput`), an
/// empty path and a path too long for `PATH_MAX`.
pub(crate) fn check_path(path: &[u8]) -> Result<()> {
    // A NUL byte first: std finds it making the C string, before any
    // system call could say the path is too long.
    if path.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() > PATH_BYTES_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

fn components(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(|c| c.to_vec())
        .collect()
}

/// One resolution in progress: the credential and the number of links
/// followed so far (shared by every step of one system call, as Linux's
/// `nd->total_link_count`).
pub(crate) struct Walker<'a> {
    pub(crate) fs: &'a Fs,
    pub(crate) cred: &'a Cred,
    links: u32,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(fs: &'a Fs, cred: &'a Cred) -> Walker<'a> {
        Walker { fs, cred, links: 0 }
    }

    /// Count one more link followed and read its target.
    fn follow(&mut self, ino: Ino) -> Result<Vec<u8>> {
        self.links += 1;
        if self.links > MAXSYMLINKS {
            return Err(Errno::ELOOP);
        }
        let target = self.fs.readlink(ino)?;
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        Ok(target)
    }

    /// The RCU-walk of `comps` from `start`, with one counted lookup on the
    /// result if `count` (else the result is [`Pin::Seen`]); `None` when it
    /// cannot answer (the reference walk then does).
    fn walk_rcu(
        &self,
        start: &Held<'a>,
        comps: &VecDeque<Vec<u8>>,
        follow_last: bool,
        must_dir: bool,
        count: bool,
    ) -> Option<Result<Held<'a>>> {
        if comps.is_empty() || comps.len() > MAX_RCU_COMPONENTS {
            return None;
        }
        let mut names: [&[u8]; MAX_RCU_COMPONENTS] = [&[]; MAX_RCU_COMPONENTS];
        for (n, c) in names.iter_mut().zip(comps) {
            *n = c;
        }
        let names = &names[..comps.len()];
        let resolved = if count {
            self.fs.resolve_rcu_counted(self.cred, start.at(), names)?
        } else {
            self.fs.resolve_rcu_ino(self.cred, start.at(), names)?
        };
        let found = match resolved {
            Ok(found) => found,
            Err(e) => return Some(Err(e)),
        };
        let kind = found.kind;
        let held = if count {
            Held::counted(self.fs, found.ino, kind)
        } else {
            Held::seen(self.fs, found)
        };
        if kind == FileKind::Symlink && (follow_last || must_dir) {
            return None;
        }
        if must_dir && kind != FileKind::Directory {
            return Some(Err(Errno::ENOTDIR));
        }
        Some(Ok(held))
    }

    /// `stat`/`lstat` of a whole path by the RCU-walk alone: no lock and no
    /// reference. `None` when it cannot answer (use [`resolve`](Self::resolve)).
    pub(crate) fn stat_rcu(&self, path: &[u8], follow: bool) -> Option<Result<Attr>> {
        if let Err(e) = check_path(path) {
            return Some(Err(e));
        }
        let must_dir = path.ends_with(b"/");
        let mut names: [&[u8]; MAX_RCU_COMPONENTS] = [&[]; MAX_RCU_COMPONENTS];
        let mut n = 0;
        for c in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            *names.get_mut(n)? = c;
            n += 1;
        }
        let attr = match self.fs.resolve_rcu(self.cred, ROOT_INO, &names[..n])? {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        if attr.kind == FileKind::Symlink && (follow || must_dir) {
            return None;
        }
        if must_dir && attr.kind != FileKind::Directory {
            return Some(Err(Errno::ENOTDIR));
        }
        Some(Ok(attr))
    }

    /// Walk `comps` starting in `start`. Every component but the last must
    /// lead to a directory (symlinks followed); the last is followed when
    /// `follow_last` or `must_dir`. With `must_dir` the result must be a
    /// directory (`ENOTDIR`). `count`: the lock-free walk holds the result
    /// by a counted lookup (else by its generation, [`Pin::Seen`]); the
    /// reference walk always counts.
    fn walk(
        &mut self,
        start: Held<'a>,
        mut comps: VecDeque<Vec<u8>>,
        follow_last: bool,
        mut must_dir: bool,
        count: bool,
    ) -> Result<Held<'a>> {
        if let Some(r) = self.walk_rcu(&start, &comps, follow_last, must_dir, count) {
            return r;
        }
        let mut cur = start;
        while let Some(name) = comps.pop_front() {
            let is_last = comps.is_empty();
            let attr = self.fs.lookup_counted(self.cred, cur.at(), &name)?;
            let next = Held::counted(self.fs, attr.ino, attr.kind);
            if attr.kind == FileKind::Symlink && (!is_last || follow_last || must_dir) {
                let target = self.follow(next.ino)?;
                drop(next);
                if target[0] == b'/' {
                    cur = Held::root(self.fs);
                }
                if is_last && target.ends_with(b"/") {
                    must_dir = true;
                }
                for c in components(&target).into_iter().rev() {
                    comps.push_front(c);
                }
                continue;
            }
            if !is_last && attr.kind != FileKind::Directory {
                return Err(Errno::ENOTDIR);
            }
            cur = next;
        }
        if must_dir && cur.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(cur)
    }

    /// Resolve a whole path to a pinned inode (`stat`, `open` without
    /// `O_CREAT`). A trailing slash follows a final symlink and requires a
    /// directory.
    pub(crate) fn resolve(&mut self, path: &[u8], follow: bool) -> Result<Held<'a>> {
        self.resolve_counting(path, follow, true)
    }

    /// As [`resolve`](Self::resolve), holding the result by the generation
    /// seen when the lock-free walk answers (`Pin::Seen`): for a call that
    /// checks it (an open by `Held::at`), so that an open by path writes
    /// no lookup count of the file.
    pub(crate) fn resolve_seen(&mut self, path: &[u8], follow: bool) -> Result<Held<'a>> {
        self.resolve_counting(path, follow, false)
    }

    fn resolve_counting(&mut self, path: &[u8], follow: bool, count: bool) -> Result<Held<'a>> {
        check_path(path)?;
        let must_dir = path.ends_with(b"/");
        self.walk(
            Held::root(self.fs),
            components(path),
            follow,
            must_dir,
            count,
        )
    }

    /// Resolve all but the last component (`filename_parentat`), starting at
    /// `start` (the root for a path given by the caller, the directory of a
    /// symlink for its target). For non-root callers the parent's search
    /// permission is checked, as Linux's `may_lookup` does before looking at
    /// the last component.
    pub(crate) fn parent_from(&mut self, start: Held<'a>, path: &[u8]) -> Result<Parent<'a>> {
        let trailing_slash = path.ends_with(b"/");
        let mut comps = components(path);
        let start = if path.first() == Some(&b'/') {
            Held::root(self.fs)
        } else {
            start
        };
        let Some(last) = comps.pop_back() else {
            return Ok(Parent {
                dir: start,
                last: Last::Root,
                trailing_slash,
            });
        };
        let dir = self.walk(start, comps, true, true, false)?;
        if !self.cred.is_root() {
            // By number alone: if it was reused meanwhile, the call on
            // `dir.at()` that follows fails with ENOENT anyway.
            self.fs.access(self.cred, dir.ino, MAY_EXEC)?;
        }
        let last = match last.as_slice() {
            b"." => Last::Dot,
            b".." => Last::DotDot,
            _ => Last::Name(last),
        };
        Ok(Parent {
            dir,
            last,
            trailing_slash,
        })
    }

    /// [`parent_from`](Self::parent_from) the root, for a caller's path.
    pub(crate) fn parent(&mut self, path: &[u8]) -> Result<Parent<'a>> {
        check_path(path)?;
        self.parent_from(Held::root(self.fs), path)
    }

    /// The last component of `parent` is a symlink that must be followed
    /// (open with `O_CREAT`): resolve its target's parent instead.
    pub(crate) fn follow_last(&mut self, parent: Parent<'a>, link: Ino) -> Result<Parent<'a>> {
        let target = self.follow(link)?;
        self.parent_from(parent.dir, &target)
    }
}
