//! Plain value types of the core API: credentials, attributes, attribute
//! changes, directory entries, statfs, configuration and limits.

use lanefs_store::{FileKind, Ino, InodeRecord, Timespec, PAGE_SIZE};

/// Longest file name, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest symlink target, in bytes (PATH_MAX less the NUL).
pub const SYMLINK_MAX: usize = 4095;
/// Largest file size (Linux's `MAX_LFS_FILESIZE` on 64-bit, as tmpfs).
pub const FILE_SIZE_MAX: u64 = i64::MAX as u64;
/// Most hard links an inode can have (`EMLINK` beyond), as ext4.
pub const LINK_MAX: u32 = 65000;
/// Longest extended attribute name.
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value (`E2BIG` beyond), as Linux's `XATTR_SIZE_MAX`.
pub const XATTR_SIZE_MAX: usize = 65536;
/// Most bytes of names and values of all extended attributes of one inode
/// (`ENOSPC` beyond).
pub const XATTR_TOTAL_MAX: usize = 256 * 1024;
/// `st_size` a directory gains per entry (tmpfs's `BOGO_DIRENT_SIZE`); the
/// store crate's constant, which its recovery derives sizes with.
pub const DIRENT_SIZE: u64 = lanefs_store::DIRENT_SIZE;

/// `access` mask bits, as `R_OK`, `W_OK`, `X_OK`.
pub const MAY_READ: u32 = 4;
pub const MAY_WRITE: u32 = 2;
pub const MAY_EXEC: u32 = 1;

/// Open flag of an `execve` (Linux's `__FMODE_EXEC`, which the kernel
/// leaves in the flags of a FUSE OPEN for a program it runs): the open
/// asks for execute permission instead of read permission (`may_open`
/// with `MAY_EXEC`, so a `--x` file runs), and only a regular file may be
/// opened so (`EACCES`). The handle reads as an `O_RDONLY` one.
pub const O_EXEC_OPEN: i32 = 0x20;

/// `rename` flags, as Linux's `renameat2`.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
pub const RENAME_WHITEOUT: u32 = 4;

/// The file capability attribute (Linux `XATTR_NAME_CAPS`): removed by
/// writes, truncates and chown as Linux removes it.
pub const XATTR_NAME_CAPS: &[u8] = b"security.capability";
/// The POSIX ACL attribute names (`XATTR_NAME_POSIX_ACL_ACCESS`,
/// `_DEFAULT`): answered as tmpfs answers them for a file without an ACL.
pub const XATTR_NAME_POSIX_ACL_ACCESS: &[u8] = b"system.posix_acl_access";
pub const XATTR_NAME_POSIX_ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// `setxattr` flags.
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;

/// `fallocate` modes.
pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// Who is asking: the file-system uid, gid and supplementary groups.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Cred {
    /// The superuser (uid 0, gid 0): passes every permission check Linux
    /// lets `CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_CHOWN` and friends pass.
    pub fn root() -> Cred {
        Cred::default()
    }

    /// An ordinary user with no supplementary groups.
    pub fn user(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Vec::new(),
        }
    }

    /// True for uid 0.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// True if `gid` is the primary or a supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// A directory an operation works in: its number and, when the caller
/// holds no reference that keeps the number from being reused (a path
/// walk that counted nothing), the generation it saw. An operation on a
/// `DirAt` whose generation no longer matches the inode at that number
/// fails with `ENOENT`, as one on a directory removed meanwhile does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirAt {
    pub ino: Ino,
    pub generation: Option<u64>,
}

impl DirAt {
    /// `ino` as long as it holds generation `generation`.
    pub fn checked(ino: Ino, generation: u64) -> DirAt {
        DirAt {
            ino,
            generation: Some(generation),
        }
    }

    /// Whether an inode of generation `generation` is the one meant.
    pub fn matches(&self, generation: u64) -> bool {
        self.generation.is_none_or(|g| g == generation)
    }
}

impl From<Ino> for DirAt {
    /// A number the caller keeps from being reused (a lookup count held,
    /// as the kernel holds one for every inode it names in a request).
    fn from(ino: Ino) -> DirAt {
        DirAt {
            ino,
            generation: None,
        }
    }
}

/// What `stat` shows of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    /// Changes each time an inode number is reused (FUSE's `generation`).
    pub generation: u64,
    pub kind: FileKind,
    /// Permission bits with setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Allocated space in 512-byte units, as `st_blocks`.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    pub rdev: u64,
    pub blksize: u32,
}

impl Attr {
    /// `st_mode`: file type bits and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm as u32
    }

    pub(crate) fn from_record(r: &InodeRecord) -> Attr {
        Attr {
            ino: r.ino,
            generation: r.generation,
            kind: r.kind,
            perm: r.perm,
            nlink: r.nlink,
            uid: r.uid,
            gid: r.gid,
            size: r.size,
            // Saturating: a corrupt record from the store must not overflow.
            blocks: r.blocks.saturating_mul(PAGE_SIZE as u64 / 512),
            atime: r.atime,
            mtime: r.mtime,
            ctime: r.ctime,
            btime: r.btime,
            rdev: r.rdev,
            blksize: PAGE_SIZE as u32,
        }
    }
}

/// A new value for a timestamp (`utimensat`'s `UTIME_NOW` or a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    At(Timespec),
}

impl TimeSet {
    /// The time this sets, with `now` standing for `UTIME_NOW`.
    pub fn at(self, now: Timespec) -> Timespec {
        match self {
            TimeSet::Now => now,
            TimeSet::At(t) => t,
        }
    }
}

/// The changes of one `setattr` call; `None` leaves a field alone
/// (`UTIME_OMIT` for times).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (`mode & 0o7777`; file type bits are ignored).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    /// Explicit ctime (FUSE may send one); otherwise ctime becomes now.
    pub ctime: Option<Timespec>,
}

impl SetAttr {
    /// Every explicit time has `nsec` below 10⁹ (`utimensat(2)` refuses
    /// any other with `EINVAL` before it looks at the file).
    pub fn times_valid(&self) -> bool {
        let ok = |t: Timespec| t.nsec < 1_000_000_000;
        let set_ok = |t: Option<TimeSet>| match t {
            Some(TimeSet::At(t)) => ok(t),
            _ => true,
        };
        set_ok(self.atime) && set_ok(self.mtime) && self.ctime.is_none_or(ok)
    }
}

/// One entry produced by `readdir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub ino: Ino,
    pub kind: FileKind,
    pub name: &'a [u8],
    /// Pass this as the offset to continue after this entry.
    pub next_offset: u64,
}

/// What `statfs` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

/// Configuration of one file-system instance.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// Owner of the root directory when the store is new.
    pub root_uid: u32,
    pub root_gid: u32,
    /// Permission bits of the root directory when the store is new.
    pub root_perm: u16,
    /// Most inodes the inode cache keeps (unreferenced ones beyond are
    /// evicted, written back first if dirty).
    pub cache_inodes_max: usize,
    /// Most data pages the page cache keeps (clean pages beyond are dropped,
    /// dirty ones written back first).
    pub cache_pages_max: usize,
    /// Linux's `fs.protected_hardlinks`: only owners (or root) may hard-link
    /// files they could not read and write.
    pub protected_hardlinks: bool,
    /// Which design each seed mechanism uses (the production set by
    /// default; the seeds' "before" designs for benchmarks and tests).
    pub variants: crate::Variants,
    /// When a read or a directory listing moves atime (the mount options
    /// `relatime`, `strictatime`, `noatime`; a FUSE server owns atime).
    pub atime: AtimePolicy,
    /// `nodiratime`: listings never move a directory's atime.
    pub nodiratime: bool,
    /// Write back every dirty inode (pages, record, a directory's
    /// attributes) this often, on a thread of the mount's own, when the
    /// store persists (`Store::volatile` is false): with the store's own
    /// commit interval, what bounds the writes a crash can lose that no
    /// `fsync` or `sync` covered (Linux's flusher threads with
    /// `dirty_expire_centisecs`). `None` (the default for the engine
    /// alone): only eviction, `fsync`, `sync` and unmount write back.
    /// `lanefs::Filesystem::open_image*` set it to the store's commit
    /// interval (`lanefs mount IMAGE` instead syncs the whole mount on a
    /// timer of its own, `daemon::serve_mounted`).
    pub writeback_interval: Option<std::time::Duration>,
}

/// When an access (read, directory listing) updates atime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtimePolicy {
    /// Linux's default `relatime`: only when atime is not newer than
    /// mtime or ctime (without the kernel's daily refresh).
    #[default]
    Relatime,
    /// `strictatime`: every access sets atime to now.
    Strict,
    /// `noatime`: accesses never change atime (explicit `utimensat` does).
    Never,
}

/// `relatime`'s rule (Linux's `relatime_need_update`, without the daily
/// refresh): an access moves an atime that is not newer than both the
/// mtime and the ctime. The one place it is written.
pub(crate) fn relatime_due(atime: Timespec, mtime: Timespec, ctime: Timespec) -> bool {
    atime <= mtime || atime <= ctime
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            root_uid: 0,
            root_gid: 0,
            root_perm: 0o755,
            cache_inodes_max: 1 << 20,
            cache_pages_max: 1 << 18,
            protected_hardlinks: true,
            variants: crate::Variants::default(),
            atime: AtimePolicy::Relatime,
            nodiratime: false,
            writeback_interval: None,
        }
    }
}
