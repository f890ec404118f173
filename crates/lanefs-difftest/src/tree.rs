//! Whole-tree snapshots and their comparison.

use std::collections::BTreeMap;
use std::fmt;

use crate::op::ShowBytes;

/// Content longer than this is compared by size, the hash of its first
/// [`HASH_HEAD_BYTES`] and of its last page (sparse files can be huge).
pub const HASH_WHOLE_BYTES_MAX: u64 = 4 << 20;
/// See [`HASH_WHOLE_BYTES_MAX`].
pub const HASH_HEAD_BYTES: u64 = 1 << 20;
/// Deepest directory a snapshot descends into.
pub const TREE_DEPTH_MAX: usize = 64;

/// FNV-1a, 64 bit: a stable content hash.
pub fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// What a snapshot records of one file.
#[derive(Clone, PartialEq, Eq)]
pub struct Node {
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u32,
    pub rdev: u64,
    /// Content hash of a regular file.
    pub content: Option<u64>,
    /// Target of a symlink.
    pub target: Option<Vec<u8>>,
    /// Extended attributes (regular files and directories), sorted.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Inode flags (`FS_IOC_GETFLAGS`; regular files and directories).
    pub flags: u32,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mode {:#o} uid {} gid {} size {} nlink {}",
            self.mode, self.uid, self.gid, self.size, self.nlink
        )?;
        if self.rdev != 0 {
            write!(f, " rdev {:#x}", self.rdev)?;
        }
        if let Some(c) = self.content {
            write!(f, " content {:#018x}", c)?;
        }
        if let Some(t) = &self.target {
            write!(f, " -> {:?}", ShowBytes(t))?;
        }
        for (n, v) in &self.xattrs {
            write!(f, " [{:?}={:?}]", ShowBytes(n), ShowBytes(v))?;
        }
        if self.flags != 0 {
            write!(f, " flags {:#x}", self.flags)?;
        }
        Ok(())
    }
}

/// Every file below (and including) a root, by path (`/` for the root).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tree(pub BTreeMap<Vec<u8>, Node>);

impl Tree {
    /// A list of differences between `self` (named `a`) and `other`
    /// (named `b`); empty when the trees are the same.
    pub fn diff(&self, a: &str, other: &Tree, b: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (path, node) in &self.0 {
            match other.0.get(path) {
                None => out.push(format!("{:?} only on {}: {:?}", ShowBytes(path), a, node)),
                Some(o) if o != node => out.push(format!(
                    "{:?} differs:\n      {}: {:?}\n      {}: {:?}",
                    ShowBytes(path),
                    a,
                    node,
                    b,
                    o
                )),
                Some(_) => {}
            }
        }
        for (path, node) in &other.0 {
            if !self.0.contains_key(path) {
                out.push(format!("{:?} only on {}: {:?}", ShowBytes(path), b, node));
            }
        }
        out
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (p, n) in &self.0 {
            writeln!(f, "  {:?}: {:?}", ShowBytes(p), n)?;
        }
        Ok(())
    }
}

/// Join a directory path of a snapshot and a name.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Hash a file's content with [`HASH_WHOLE_BYTES_MAX`]'s rule, reading
/// with `read_at(buf, offset) -> bytes read`.
pub fn hash_content<E>(
    size: u64,
    mut read_at: impl FnMut(&mut [u8], u64) -> Result<usize, E>,
) -> Result<u64, E> {
    let mut h = Vec::new();
    let mut read_range = |start: u64, end: u64, h: &mut Vec<u8>| -> Result<(), E> {
        let mut off = start;
        let mut buf = vec![0u8; 64 * 1024];
        while off < end {
            let want = ((end - off) as usize).min(buf.len());
            let n = read_at(&mut buf[..want], off)?;
            if n == 0 {
                break;
            }
            h.extend_from_slice(&buf[..n]);
            off += n as u64;
        }
        Ok(())
    };
    if size <= HASH_WHOLE_BYTES_MAX {
        read_range(0, size, &mut h)?;
    } else {
        read_range(0, HASH_HEAD_BYTES, &mut h)?;
        read_range(size - 4096, size, &mut h)?;
    }
    Ok(fnv(&h))
}
