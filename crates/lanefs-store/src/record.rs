//! Serialized records: what a [`Store`](crate::Store) keeps.
//!
//! Stores hold bytes, never the core's live cache objects. The encoding is a
//! fixed little-endian layout so the image store (milestone 2) can put the
//! same bytes on disk; `decode` rejects anything malformed with `EUCLEAN`
//! instead of panicking.
//!
//! Inode record, version 1 or 2 (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 8 | ino |
//! | 8 | generation |
//! | 1 | kind ([`FileKind`] as u8) |
//! | 2 | perm (mode & 0o7777) |
//! | 4, 4 | uid, gid |
//! | 4 | nlink |
//! | 8 | size in bytes |
//! | 8 | blocks (allocated 4 KiB pages) |
//! | 12 × 4 | atime, mtime, ctime, btime (i64 seconds, u32 nanoseconds) |
//! | 8 | rdev |
//! | 8 | parent (directories; 0 otherwise) |
//! | 8 | next readdir cookie (directories) |
//! | 4 | inode flags (`FS_*_FL`, see `flags`): version 2 only |
//! | 4 + n | symlink target (length-prefixed) |
//! | 4 | xattr count, then per xattr: 4 + n name, 4 + n value |
//!
//! Version 2 adds the inode flags (`chattr`). A record without flags is
//! still written as version 1, byte for byte as before the field existed,
//! so stores and images that never set a flag are unchanged and older
//! lanefs builds still read them; a version-1 record decodes with flags 0.
//! A version-2 record with a flag outside [`INODE_FLAGS_KNOWN`] is
//! refused (`EUCLEAN`), as any other malformed record.

use crate::codec::Reader;
use crate::errno::{Errno, Result};

/// An inode number. `0` is never a valid inode.
pub type Ino = u64;

/// The root directory's inode number (as in FUSE).
pub const ROOT_INO: Ino = 1;

/// Size of a data page and of a store block.
pub const PAGE_SIZE: usize = 4096;

/// One data page.
pub type Page = [u8; PAGE_SIZE];

/// The type of a file, as in the `S_IFMT` bits of `st_mode`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, Default)]
#[repr(u8)]
pub enum FileKind {
    #[default]
    Regular = 1,
    Directory = 2,
    Symlink = 3,
    CharDevice = 4,
    BlockDevice = 5,
    Fifo = 6,
    Socket = 7,
}

impl FileKind {
    /// Decode the byte written by `kind as u8`.
    pub fn from_u8(v: u8) -> Option<FileKind> {
        Some(match v {
            1 => FileKind::Regular,
            2 => FileKind::Directory,
            3 => FileKind::Symlink,
            4 => FileKind::CharDevice,
            5 => FileKind::BlockDevice,
            6 => FileKind::Fifo,
            7 => FileKind::Socket,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits for this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
        }
    }

    /// The kind named by the `S_IFMT` bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::Regular,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            _ => return None,
        })
    }
}

/// A point in time with nanosecond resolution (seconds since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time (`CLOCK_REALTIME`, read directly: every
    /// change of a file reads it, and `SystemTime`'s conversions through
    /// `Duration` cost a third as much again as the vDSO call itself).
    #[cfg(target_os = "linux")]
    pub fn now() -> Timespec {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call, and
        // CLOCK_REALTIME always exists; on a failure `ts` stays zero (the
        // epoch), which is a valid time.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        Timespec {
            sec: ts.tv_sec,
            // A kernel answer is in 0..1e9; clamp anything else.
            nsec: (ts.tv_nsec as u64).min(999_999_999) as u32,
        }
    }

    /// The current wall-clock time.
    #[cfg(not(target_os = "linux"))]
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

impl From<Timespec> for std::time::SystemTime {
    fn from(t: Timespec) -> Self {
        if t.sec >= 0 {
            std::time::UNIX_EPOCH + std::time::Duration::new(t.sec as u64, t.nsec)
        } else {
            std::time::UNIX_EPOCH - std::time::Duration::new(t.sec.unsigned_abs(), 0)
                + std::time::Duration::new(0, t.nsec)
        }
    }
}

/// Everything persistent about one inode except its directory entries and data.
/// (`Default`: inode 0, a regular file, every field zero or empty — a base
/// for `InodeRecord { ino, kind, .., ..Default::default() }`.)
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct InodeRecord {
    pub ino: Ino,
    pub generation: u64,
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// Allocated data pages.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    pub rdev: u64,
    /// For directories: the parent directory (the root is its own parent).
    pub parent: Ino,
    /// For directories: the next readdir cookie to hand out.
    pub next_cookie: u64,
    /// For symlinks: the target.
    pub symlink: Vec<u8>,
    /// Extended attributes, sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Inode flags as `FS_IOC_GETFLAGS` reports them (`FS_IMMUTABLE_FL`,
    /// `FS_APPEND_FL`, `FS_NODUMP_FL`, `FS_NOATIME_FL`; nothing else is
    /// kept: [`INODE_FLAGS_KNOWN`]).
    pub flags: u32,
}

/// `FS_IMMUTABLE_FL`: no change of the file, its name or its attributes.
pub const FS_IMMUTABLE_FL: u32 = 0x10;
/// `FS_APPEND_FL`: writes only at the end; no truncate, rename or unlink.
pub const FS_APPEND_FL: u32 = 0x20;
/// `FS_NODUMP_FL`: kept and reported only.
pub const FS_NODUMP_FL: u32 = 0x40;
/// `FS_NOATIME_FL`: reads do not move atime.
pub const FS_NOATIME_FL: u32 = 0x80;
/// The inode flags a record may hold (tmpfs's `SHMEM_FL_USER_MODIFIABLE`
/// without casefolding).
pub const INODE_FLAGS_KNOWN: u32 = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;

/// The layout of a record without inode flags.
const RECORD_VERSION: u8 = 1;
/// The layout with a flags word after the next cookie.
const RECORD_VERSION_FLAGS: u8 = 2;
/// Bytes of an encoded version-1 record before its symlink target and xattrs.
const RECORD_FIXED_BYTES: usize = 1 + 8 + 8 + 1 + 2 + 4 + 4 + 4 + 8 + 8 + 12 * 4 + 8 + 8 + 8;

/// `st_size` a directory has per entry, `.` and `..` included (tmpfs's
/// `BOGO_DIRENT_SIZE`): a directory with `n` entries has size
/// `DIRENT_SIZE * (2 + n)`. Shared by the engine, which keeps the size, and
/// the stores' recovery, which derives it from the entries.
pub const DIRENT_SIZE: u64 = 20;

/// What a directory's entries say about its own record: everything in it
/// that each create or remove changes. Derived after a crash instead of
/// being written by every operation on the directory (docs/FORMAT.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirDerived {
    pub entries: u64,
    /// Entries of kind [`FileKind::Directory`] (each links `..` back).
    pub subdirs: u64,
    /// The largest cookie of an entry, if any.
    pub max_cookie: Option<u64>,
}

impl DirDerived {
    /// Count one entry.
    pub fn add(&mut self, e: &DirEntryRecord) {
        self.entries += 1;
        self.subdirs += u64::from(e.kind == FileKind::Directory);
        self.max_cookie = Some(self.max_cookie.map_or(e.cookie, |c| c.max(e.cookie)));
    }
}

impl InodeRecord {
    /// Bring a live directory's size, link count and next cookie in line
    /// with its entries `d`: size `DIRENT_SIZE * (2 + entries)`, nlink
    /// `2 + subdirs`, next cookie past every entry's (never lowered, so no
    /// cookie is handed out twice). A dead directory (nlink 0) and other
    /// kinds are left alone. Returns whether anything changed.
    pub fn derive_dir(&mut self, d: &DirDerived) -> bool {
        if self.kind != FileKind::Directory || self.nlink == 0 {
            return false;
        }
        let size = DIRENT_SIZE.saturating_mul(d.entries.saturating_add(2));
        let nlink = u32::try_from(d.subdirs.saturating_add(2)).unwrap_or(u32::MAX);
        let cookie = d.max_cookie.map_or(self.next_cookie, |c| {
            self.next_cookie.max(c.saturating_add(1))
        });
        let changed = (self.size, self.nlink, self.next_cookie) != (size, nlink, cookie);
        (self.size, self.nlink, self.next_cookie) = (size, nlink, cookie);
        changed
    }

    /// Length of [`encode`](Self::encode)'s output, without encoding.
    pub fn encoded_len(&self) -> usize {
        RECORD_FIXED_BYTES
            + if self.flags != 0 { 4 } else { 0 }
            + 4
            + self.symlink.len()
            + 4
            + self
                .xattrs
                .iter()
                .map(|(k, v)| 8 + k.len() + v.len())
                .sum::<usize>()
    }

    /// Serialize into the layout described in the module docs: version 1
    /// without flags, version 2 with them.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(if self.flags != 0 {
            RECORD_VERSION_FLAGS
        } else {
            RECORD_VERSION
        });
        put_u64(&mut out, self.ino);
        put_u64(&mut out, self.generation);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.perm.to_le_bytes());
        put_u32(&mut out, self.uid);
        put_u32(&mut out, self.gid);
        put_u32(&mut out, self.nlink);
        put_u64(&mut out, self.size);
        put_u64(&mut out, self.blocks);
        for t in [self.atime, self.mtime, self.ctime, self.btime] {
            put_u64(&mut out, t.sec as u64);
            put_u32(&mut out, t.nsec);
        }
        put_u64(&mut out, self.rdev);
        put_u64(&mut out, self.parent);
        put_u64(&mut out, self.next_cookie);
        if self.flags != 0 {
            put_u32(&mut out, self.flags);
        }
        put_bytes(&mut out, &self.symlink);
        put_u32(&mut out, self.xattrs.len() as u32);
        for (k, v) in &self.xattrs {
            put_bytes(&mut out, k);
            put_bytes(&mut out, v);
        }
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// Parse a record written by [`encode`](Self::encode).
    pub fn decode(buf: &[u8]) -> Result<InodeRecord> {
        let mut r = Reader::new(buf);
        let version = r.u8()?;
        if version != RECORD_VERSION && version != RECORD_VERSION_FLAGS {
            return Err(Errno::EUCLEAN);
        }
        let ino = r.u64()?;
        let generation = r.u64()?;
        let kind = FileKind::from_u8(r.u8()?).ok_or(Errno::EUCLEAN)?;
        let perm = r.u16()?;
        let uid = r.u32()?;
        let gid = r.u32()?;
        let nlink = r.u32()?;
        let size = r.u64()?;
        let blocks = r.u64()?;
        let mut times = [Timespec::default(); 4];
        for t in &mut times {
            t.sec = r.u64()? as i64;
            t.nsec = r.u32()?;
        }
        let rdev = r.u64()?;
        let parent = r.u64()?;
        let next_cookie = r.u64()?;
        let flags = if version == RECORD_VERSION_FLAGS {
            r.u32()?
        } else {
            0
        };
        if flags & !INODE_FLAGS_KNOWN != 0 {
            return Err(Errno::EUCLEAN);
        }
        let symlink = r.bytes()?.to_vec();
        let n = r.u32()? as usize;
        let mut xattrs = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let k = r.bytes()?.to_vec();
            let v = r.bytes()?.to_vec();
            xattrs.push((k, v));
        }
        if r.pos() != buf.len() {
            return Err(Errno::EUCLEAN);
        }
        Ok(InodeRecord {
            ino,
            generation,
            kind,
            perm,
            uid,
            gid,
            nlink,
            size,
            blocks,
            atime: times[0],
            mtime: times[1],
            ctime: times[2],
            btime: times[3],
            rdev,
            parent,
            next_cookie,
            symlink,
            xattrs,
            flags,
        })
    }
}

/// One directory entry as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryRecord {
    pub name: Vec<u8>,
    pub ino: Ino,
    pub kind: FileKind,
    /// Stable readdir position of this entry (unique within its directory).
    pub cookie: u64,
}

impl DirEntryRecord {
    /// Encode everything but the name (the store's key): 17 bytes.
    pub fn encode_value(&self) -> [u8; 17] {
        let mut out = [0u8; 17];
        out[..8].copy_from_slice(&self.ino.to_le_bytes());
        out[8] = self.kind as u8;
        out[9..].copy_from_slice(&self.cookie.to_le_bytes());
        out
    }

    /// Inverse of [`encode_value`](Self::encode_value).
    pub fn decode_value(name: &[u8], v: &[u8; 17]) -> Result<DirEntryRecord> {
        Ok(DirEntryRecord {
            name: name.to_vec(),
            ino: u64::from_le_bytes(v[..8].try_into().map_err(|_| Errno::EUCLEAN)?),
            kind: FileKind::from_u8(v[8]).ok_or(Errno::EUCLEAN)?,
            cookie: u64::from_le_bytes(v[9..].try_into().map_err(|_| Errno::EUCLEAN)?),
        })
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> InodeRecord {
        InodeRecord {
            ino: 42,
            generation: 7,
            kind: FileKind::Symlink,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 1,
            size: 5,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: -3, nsec: 4 },
            ctime: Timespec { sec: 5, nsec: 6 },
            btime: Timespec { sec: 7, nsec: 8 },
            rdev: 0x0801,
            symlink: b"a/b/c".to_vec(),
            xattrs: vec![(b"user.a".to_vec(), vec![0, 1, 2])],
            ..InodeRecord::default()
        }
    }

    #[test]
    fn inode_record_roundtrip() {
        let r = sample();
        assert_eq!(InodeRecord::decode(&r.encode()).unwrap(), r);
    }

    #[test]
    fn decode_rejects_every_truncation_and_trailing_bytes() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert_eq!(
                InodeRecord::decode(&bytes[..n]),
                Err(Errno::EUCLEAN),
                "len {n}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(InodeRecord::decode(&long), Err(Errno::EUCLEAN));
    }

    #[test]
    fn flags_roundtrip_and_a_record_without_them_is_version_1() {
        let plain = sample().encode();
        assert_eq!(plain[0], 1, "no flags: the layout from before flags");
        let mut r = sample();
        r.flags = FS_IMMUTABLE_FL | FS_NOATIME_FL;
        let bytes = r.encode();
        assert_eq!((bytes[0], bytes.len()), (2, plain.len() + 4));
        assert_eq!(bytes.len(), r.encoded_len());
        assert_eq!(InodeRecord::decode(&bytes).unwrap(), r);
        for n in 0..bytes.len() {
            assert_eq!(InodeRecord::decode(&bytes[..n]), Err(Errno::EUCLEAN));
        }
        // A version-1 record (written before flags existed) has none.
        assert_eq!(InodeRecord::decode(&plain).unwrap().flags, 0);
        // An unknown flag is a malformed record.
        let mut bad = bytes.clone();
        let at = RECORD_FIXED_BYTES;
        bad[at..at + 4].copy_from_slice(&0x8u32.to_le_bytes());
        assert_eq!(InodeRecord::decode(&bad), Err(Errno::EUCLEAN));
        // A version-2 record with no flag set reads as none.
        let mut zero = bytes;
        zero[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(InodeRecord::decode(&zero).unwrap().flags, 0);
    }

    #[test]
    fn dir_entry_roundtrip() {
        let e = DirEntryRecord {
            name: b"x".to_vec(),
            ino: 9,
            kind: FileKind::Directory,
            cookie: 77,
        };
        assert_eq!(
            DirEntryRecord::decode_value(b"x", &e.encode_value()).unwrap(),
            e
        );
    }
}
