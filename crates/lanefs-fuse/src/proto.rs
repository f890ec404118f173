//! The FUSE kernel protocol: the structures and constants of the kernel's
//! `include/uapi/linux/fuse.h` that lanefs uses (protocol 7.x, minor 7.42+
//! for FUSE-over-io_uring), written out in Rust. Layouts are `#[repr(C)]`
//! with explicit padding fields, so no structure has hidden padding; the
//! size of each is checked at compile time against the header.
//!
//! No state, no locks: plain data only. [`Pod`] marks the structures that
//! may be read from and written to raw bytes (see its safety contract).

/// Protocol major version we speak.
pub const KERNEL_VERSION: u32 = 7;
/// Highest minor version whose layouts this file describes (7.42 added
/// FUSE-over-io_uring; later minors only added flags and opcodes).
pub const KERNEL_MINOR_VERSION: u32 = 42;
/// Oldest minor version we accept from the kernel (7.31: `fuse_init_out`
/// with `max_pages`, `FUSE_WRITE_KILL_PRIV`; every kernel since 5.8).
pub const MIN_KERNEL_MINOR_VERSION: u32 = 31;
/// The root directory's node id.
pub const ROOT_ID: u64 = 1;
/// Smallest read buffer the kernel accepts on `/dev/fuse`.
pub const MIN_READ_BUFFER: usize = 8192;

/// Types that are plain old data: every bit pattern is a valid value and
/// there are no padding bytes.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs made of integer fields (and
/// arrays of them) whose fields are laid out without implicit padding; the
/// compile-time size checks below establish that for every implementor.
pub unsafe trait Pod: Copy + Default + 'static {
    /// The value's bytes.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Self: Pod` has no padding (trait contract), so every
        // byte of the value is initialised; the slice borrows `self`.
        unsafe { std::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>()) }
    }

    /// Read a value from the start of `buf` (any alignment), or `None` if
    /// `buf` is too short.
    fn read_from(buf: &[u8]) -> Option<Self> {
        if buf.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: `buf` holds at least size_of::<Self>() bytes (checked
        // above), read_unaligned copes with any alignment, and every bit
        // pattern is a valid `Self` (trait contract).
        Some(unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<Self>()) })
    }
}

macro_rules! pod {
    ($($name:ident = $size:expr),* $(,)?) => {
        $(
            // SAFETY: repr(C), integer fields only, size checked below to
            // equal the sum of the field sizes given by the kernel header.
            unsafe impl Pod for $name {}
            const _: () = assert!(size_of::<$name>() == $size);
        )*
    };
}

// Opcodes (enum fuse_opcode).
pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_SETATTR: u32 = 4;
pub const FUSE_READLINK: u32 = 5;
pub const FUSE_SYMLINK: u32 = 6;
pub const FUSE_MKNOD: u32 = 8;
pub const FUSE_MKDIR: u32 = 9;
pub const FUSE_UNLINK: u32 = 10;
pub const FUSE_RMDIR: u32 = 11;
pub const FUSE_RENAME: u32 = 12;
pub const FUSE_LINK: u32 = 13;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_WRITE: u32 = 16;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FSYNC: u32 = 20;
pub const FUSE_SETXATTR: u32 = 21;
pub const FUSE_GETXATTR: u32 = 22;
pub const FUSE_LISTXATTR: u32 = 23;
pub const FUSE_REMOVEXATTR: u32 = 24;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_FSYNCDIR: u32 = 30;
pub const FUSE_ACCESS: u32 = 34;
pub const FUSE_CREATE: u32 = 35;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_DESTROY: u32 = 38;
pub const FUSE_IOCTL: u32 = 39;
pub const FUSE_BATCH_FORGET: u32 = 42;
pub const FUSE_FALLOCATE: u32 = 43;
pub const FUSE_READDIRPLUS: u32 = 44;
pub const FUSE_RENAME2: u32 = 45;
pub const FUSE_SYNCFS: u32 = 50;
pub const FUSE_TMPFILE: u32 = 51;
pub const FUSE_STATX: u32 = 52;

// Notification codes (enum fuse_notify_code).
pub const FUSE_NOTIFY_INVAL_INODE: i32 = 2;
pub const FUSE_NOTIFY_INVAL_ENTRY: i32 = 3;

// INIT flags (fuse_init_in/out.flags, and flags2 << 32).
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_POSIX_LOCKS: u64 = 1 << 1;
pub const FUSE_ATOMIC_O_TRUNC: u64 = 1 << 3;
pub const FUSE_EXPORT_SUPPORT: u64 = 1 << 4;
pub const FUSE_BIG_WRITES: u64 = 1 << 5;
pub const FUSE_DONT_MASK: u64 = 1 << 6;
pub const FUSE_FLOCK_LOCKS: u64 = 1 << 10;
pub const FUSE_DO_READDIRPLUS: u64 = 1 << 13;
pub const FUSE_READDIRPLUS_AUTO: u64 = 1 << 14;
pub const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;
pub const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
pub const FUSE_POSIX_ACL: u64 = 1 << 20;
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
pub const FUSE_CACHE_SYMLINKS: u64 = 1 << 23;
pub const FUSE_EXPLICIT_INVAL_DATA: u64 = 1 << 25;
pub const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
pub const FUSE_INIT_EXT: u64 = 1 << 30;
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;

// fuse_setattr_in.valid
pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;
pub const FATTR_SIZE: u32 = 1 << 3;
pub const FATTR_ATIME: u32 = 1 << 4;
pub const FATTR_MTIME: u32 = 1 << 5;
pub const FATTR_FH: u32 = 1 << 6;
pub const FATTR_ATIME_NOW: u32 = 1 << 7;
pub const FATTR_MTIME_NOW: u32 = 1 << 8;
pub const FATTR_CTIME: u32 = 1 << 10;
pub const FATTR_KILL_SUIDGID: u32 = 1 << 11;

// fuse_open_out.open_flags
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
pub const FOPEN_CACHE_DIR: u32 = 1 << 3;

pub const FUSE_WRITE_CACHE: u32 = 1 << 0;
pub const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
pub const FUSE_OPEN_KILL_SUIDGID: u32 = 1 << 0;
pub const FUSE_GETATTR_FH: u32 = 1 << 0;
pub const FUSE_FSYNC_FDATASYNC: u32 = 1 << 0;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub total_extlen: u16,
    pub padding: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OutHeader {
    pub len: u32,
    pub error: i32,
    pub unique: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: u64,
    pub attr_valid: u64,
    pub entry_valid_nsec: u32,
    pub attr_valid_nsec: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttrOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub dummy: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ForgetIn {
    pub nlookup: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ForgetOne {
    pub nodeid: u64,
    pub nlookup: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchForgetIn {
    pub count: u32,
    pub dummy: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GetattrIn {
    pub getattr_flags: u32,
    pub dummy: u32,
    pub fh: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MknodIn {
    pub mode: u32,
    pub rdev: u32,
    pub umask: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MkdirIn {
    pub mode: u32,
    pub umask: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RenameIn {
    pub newdir: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Rename2In {
    pub newdir: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkIn {
    pub oldnodeid: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SetattrIn {
    pub valid: u32,
    pub padding: u32,
    pub fh: u64,
    pub size: u64,
    pub lock_owner: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub unused4: u32,
    pub uid: u32,
    pub gid: u32,
    pub unused5: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenIn {
    pub flags: u32,
    pub open_flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateIn {
    pub flags: u32,
    pub mode: u32,
    pub umask: u32,
    pub open_flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOut {
    pub fh: u64,
    pub open_flags: u32,
    pub backing_id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReleaseIn {
    pub fh: u64,
    pub flags: u32,
    pub release_flags: u32,
    pub lock_owner: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlushIn {
    pub fh: u64,
    pub unused: u32,
    pub padding: u32,
    pub lock_owner: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub write_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOut {
    pub size: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Kstatfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
    pub padding: u32,
    pub spare: [u32; 6],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FsyncIn {
    pub fh: u64,
    pub fsync_flags: u32,
    pub padding: u32,
}

/// `fuse_setxattr_in` as extended by `FUSE_SETXATTR_EXT` (we do not ask
/// for it, so the kernel sends the first 8 bytes only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SetxattrInCompat {
    pub size: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GetxattrIn {
    pub size: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GetxattrOut {
    pub size: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AccessIn {
    pub mask: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}

/// The part of `fuse_init_in` every kernel since 7.6 sends.
pub const INIT_IN_COMPAT_BYTES: usize = 16;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
    pub map_alignment: u16,
    pub flags2: u32,
    pub max_stack_depth: u32,
    pub request_timeout: u16,
    pub unused: [u16; 11],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InterruptIn {
    pub unique: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FallocateIn {
    pub fh: u64,
    pub offset: u64,
    pub length: u64,
    pub mode: u32,
    pub padding: u32,
}

/// `fuse_ioctl_in`: the command, the file handle the kernel opened for
/// it, and how many bytes of argument follow (`in_size`) and may come
/// back (`out_size`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoctlIn {
    pub fh: u64,
    pub flags: u32,
    pub cmd: u32,
    pub arg: u64,
    pub in_size: u32,
    pub out_size: u32,
}

/// `fuse_ioctl_out`, followed by up to `out_size` bytes of result.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoctlOut {
    pub result: i32,
    pub flags: u32,
    pub in_iovs: u32,
    pub out_iovs: u32,
}

// fuse_ioctl_in.flags
pub const FUSE_IOCTL_DIR: u32 = 1 << 4;

/// `fuse_statx_in` (7.39): a `statx(2)` the kernel cannot answer from its
/// cache (it asks only when the caller wants more than the basic stats,
/// i.e. `STATX_BTIME`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StatxIn {
    pub getattr_flags: u32,
    pub reserved: u32,
    pub fh: u64,
    pub sx_flags: u32,
    pub sx_mask: u32,
}

/// `fuse_sx_time`: seconds as a two's-complement `s64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SxTime {
    pub tv_sec: u64,
    pub tv_nsec: u32,
    pub reserved: u32,
}

/// `fuse_statx`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Statx {
    pub mask: u32,
    pub blksize: u32,
    pub attributes: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mode: u16,
    pub spare0: u16,
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub attributes_mask: u64,
    pub atime: SxTime,
    pub btime: SxTime,
    pub ctime: SxTime,
    pub mtime: SxTime,
    pub rdev_major: u32,
    pub rdev_minor: u32,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub spare2: [u64; 14],
}

/// `fuse_statx_out`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StatxOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub flags: u32,
    pub spare: [u64; 2],
    pub stat: Statx,
}

/// `statx` mask bits (`include/uapi/linux/stat.h`).
pub const STATX_BASIC_STATS: u32 = 0x7ff;
pub const STATX_BTIME: u32 = 0x800;

/// Header of one READDIR entry (the name follows, padded to 8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Dirent {
    pub ino: u64,
    pub off: u64,
    pub namelen: u32,
    pub typ: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NotifyInvalInodeOut {
    pub ino: u64,
    pub off: i64,
    pub len: i64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NotifyInvalEntryOut {
    pub parent: u64,
    pub namelen: u32,
    pub flags: u32,
}

// FUSE-over-io_uring (7.42).

/// Bytes of the in/out header area of a ring entry's header.
pub const URING_IN_OUT_HEADER_BYTES: usize = 128;
/// Bytes of the per-opcode argument area of a ring entry's header.
pub const URING_OP_IN_OUT_BYTES: usize = 128;
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UringEntInOut {
    pub flags: u64,
    pub commit_id: u64,
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// `fuse_uring_req_header`: shared between the kernel and one ring entry.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UringReqHeader {
    pub in_out: [u8; URING_IN_OUT_HEADER_BYTES],
    pub op_in: [u8; URING_OP_IN_OUT_BYTES],
    pub ring_ent_in_out: UringEntInOut,
}

impl Default for UringReqHeader {
    fn default() -> Self {
        UringReqHeader {
            in_out: [0; URING_IN_OUT_HEADER_BYTES],
            op_in: [0; URING_OP_IN_OUT_BYTES],
            ring_ent_in_out: UringEntInOut::default(),
        }
    }
}

/// `fuse_uring_cmd_req`: the command area of the submission entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UringCmdReq {
    pub flags: u64,
    pub commit_id: u64,
    pub qid: u16,
    pub padding: [u8; 6],
}

pod! {
    InHeader = 40, OutHeader = 16, Attr = 88, EntryOut = 128, AttrOut = 104,
    ForgetIn = 8, ForgetOne = 16, BatchForgetIn = 8, GetattrIn = 16,
    MknodIn = 16, MkdirIn = 8, RenameIn = 8, Rename2In = 16, LinkIn = 8,
    SetattrIn = 88, OpenIn = 8, CreateIn = 16, OpenOut = 16, ReleaseIn = 24,
    FlushIn = 24, ReadIn = 40, WriteIn = 40, WriteOut = 8, Kstatfs = 80,
    FsyncIn = 16, SetxattrInCompat = 8, GetxattrIn = 8, GetxattrOut = 8,
    AccessIn = 8, InitIn = 64, InitOut = 64, InterruptIn = 8, FallocateIn = 32,
    Dirent = 24, NotifyInvalInodeOut = 24, NotifyInvalEntryOut = 16,
    UringEntInOut = 32, UringReqHeader = 288, UringCmdReq = 24,
    StatxIn = 24, SxTime = 16, Statx = 256, StatxOut = 288, IoctlIn = 32, IoctlOut = 16,
}

/// `ioctl(fd, FUSE_DEV_IOC_CLONE, &session_fd)`: `_IOR(229, 0, uint32_t)`.
pub const FUSE_DEV_IOC_MAGIC: u8 = 229;
