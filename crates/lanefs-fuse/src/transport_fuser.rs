//! The classic `/dev/fuse` transport, on fuser 0.18: decode (done by
//! fuser), call the [`Handler`] under [`guarded`], encode the reply.
//! Nothing here knows file-system rules.
//!
//! # Locking rules
//!
//! None of its own. fuser runs `threads` event loops, each reading its own
//! cloned `/dev/fuse` fd (`clone_fd`), and calls these methods concurrently
//! through `&self`; all shared state is in the [`Handler`].

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use lanefs_core::{Attr, Errno, FileKind, SetAttr, TimeSet, Timespec};

use crate::cred::Caller;
use crate::handler::{guarded, Handler, Opened, PlusEntry};

/// Largest WRITE the kernel may send (and READ it may ask for): 1 MiB, the
/// kernel's default `fuse_max_pages_limit` (256 pages).
pub const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Kernel readahead window we ask for.
pub const MAX_READAHEAD_BYTES: u32 = 1 << 20;
/// How many bytes of READDIRPLUS entries the handler prepares per call.
/// fuser does not tell the file system the kernel's buffer size; a larger
/// guess only costs lookups that are given back when the buffer fills, a
/// smaller one only costs extra round trips.
pub const READDIRPLUS_BUDGET_BYTES: u32 = 16 << 10;
/// Background requests (readahead, async reads) the kernel may queue.
pub const MAX_BACKGROUND: u16 = 64;

/// The fuser `Filesystem` over a shared [`Handler`].
pub struct FuserFs {
    handler: Arc<Handler>,
}

impl FuserFs {
    pub fn new(handler: Arc<Handler>) -> FuserFs {
        FuserFs { handler }
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn err(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

fn kind(k: FileKind) -> FileType {
    match k {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

fn attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.into(),
        mtime: a.mtime.into(),
        ctime: a.ctime.into(),
        crtime: a.btime.into(),
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // FUSE carries a 32-bit rdev in the kernel's encoding, which equals
        // glibc's for majors below 4096 (what libfuse sends too).
        rdev: a.rdev as u32,
        blksize: a.blksize,
        flags: 0,
    }
}

fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs().min(i64::MAX as u64) as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            // Before the epoch: floor to whole seconds plus nanoseconds.
            let d = e.duration();
            let mut sec = -(d.as_secs().min(i64::MAX as u64) as i64);
            let mut nsec = d.subsec_nanos();
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timespec { sec, nsec }
        }
    }
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(timespec(t)),
    }
}

fn fopen(o: &Opened) -> FopenFlags {
    if o.keep_cache {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
    }
}

impl FuserFs {
    fn ttl(&self) -> (Duration, Duration) {
        let c = &self.handler.config().cache;
        (c.attr_ttl, c.entry_ttl)
    }

    fn reply_entry(&self, reply: ReplyEntry, r: lanefs_core::Result<Attr>) {
        let (attr_ttl, entry_ttl) = self.ttl();
        match r {
            Ok(a) => {
                reply.entry_with_ttls(&attr_ttl, &entry_ttl, &attr(&a), Generation(a.generation))
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn reply_empty(reply: ReplyEmpty, r: lanefs_core::Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn reply_xattr(reply: ReplyXattr, size: u32, r: lanefs_core::Result<Vec<u8>>) {
        match r {
            Ok(v) if size == 0 => match u32::try_from(v.len()) {
                Ok(n) => reply.size(n),
                Err(_) => reply.error(fuser::Errno::E2BIG),
            },
            Ok(v) if v.len() > size as usize => reply.error(fuser::Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(err(e)),
        }
    }
}

impl Filesystem for FuserFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // See docs/FUSE.md for why each of these is on or off.
        let wanted = InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        let have = config.capabilities();
        let missing = wanted & !have;
        if !missing.is_empty() {
            tracing::warn!(
                ?missing,
                "kernel lacks FUSE capabilities; running without them"
            );
        }
        let _ = config.add_capabilities(wanted & have);
        if let Err(max) = config.set_max_write(MAX_WRITE_BYTES) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_READAHEAD_BYTES) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        tracing::info!(kernel_abi = ?config.kernel_abi(), "FUSE session initialised");
        Ok(())
    }

    fn destroy(&mut self) {
        self.handler.destroy();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let c = caller(req);
        let r = guarded("lookup", || {
            self.handler.lookup(&c, parent.0, name.as_bytes())
        });
        let neg = self.handler.config().cache.negative_ttl;
        match r {
            Err(e) if e == Errno::ENOENT && !neg.is_zero() => {
                // A negative entry: nodeid 0 with a timeout.
                let mut a = attr(&dummy_attr());
                a.ino = INodeNo(0);
                reply.entry_with_ttls(&Duration::ZERO, &neg, &a, Generation(0));
            }
            r => self.reply_entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = guarded("forget", || {
            self.handler.forget(ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = guarded("getattr", || self.handler.getattr(ino.0, fh.map(|f| f.0)));
        match r {
            Ok(a) => reply.attr(&self.ttl().0, &attr(&a)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let c = caller(req);
        let changes = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            ctime: ctime.map(timespec),
        };
        tracing::debug!(ino = ino.0, ?changes, fh = ?fh, "setattr");
        let r = guarded("setattr", || {
            self.handler.setattr(&c, ino.0, &changes, fh.map(|f| f.0))
        });
        match r {
            Ok(a) => reply.attr(&self.ttl().0, &attr(&a)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match guarded("readlink", || self.handler.readlink(ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(err(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let c = caller(req);
        let r = guarded("mknod", || {
            self.handler
                .mknod(&c, parent.0, name.as_bytes(), mode, umask, rdev as u64)
        });
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let c = caller(req);
        let r = guarded("mkdir", || {
            self.handler
                .mkdir(&c, parent.0, name.as_bytes(), mode, umask)
        });
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let c = caller(req);
        let r = guarded("unlink", || {
            self.handler.unlink(&c, parent.0, name.as_bytes())
        });
        Self::reply_empty(reply, r);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let c = caller(req);
        let r = guarded("rmdir", || {
            self.handler.rmdir(&c, parent.0, name.as_bytes())
        });
        Self::reply_empty(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let c = caller(req);
        let r = guarded("symlink", || {
            self.handler.symlink(
                &c,
                parent.0,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
            )
        });
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let c = caller(req);
        let r = guarded("rename", || {
            self.handler.rename(
                &c,
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
            )
        });
        Self::reply_empty(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let c = caller(req);
        let r = guarded("link", || {
            self.handler
                .link(&c, ino.0, newparent.0, newname.as_bytes())
        });
        self.reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let c = caller(req);
        match guarded("open", || self.handler.open(&c, ino.0, flags.0)) {
            Ok(o) => reply.opened(FileHandle(o.fh), fopen(&o)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match guarded("read", || self.handler.read(fh.0, offset, size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(err(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match guarded("write", || self.handler.write(fh.0, offset, data, kill)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(err(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        Self::reply_empty(reply, guarded("flush", || self.handler.flush(fh.0)));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        Self::reply_empty(reply, guarded("release", || self.handler.release(fh.0)));
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::reply_empty(
            reply,
            guarded("fsync", || self.handler.fsync(fh.0, datasync)),
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let c = caller(req);
        match guarded("opendir", || self.handler.opendir(&c, ino.0, flags.0)) {
            Ok(o) => reply.opened(FileHandle(o.fh), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // fuser sized the reply buffer from the request and `add` says when
        // it is full, which stops the engine's listing; no budget needed.
        let r = guarded("readdir", || {
            self.handler.readdir(fh.0, offset, u32::MAX, &mut |e| {
                reply.add(
                    INodeNo(e.ino),
                    e.next_offset,
                    kind(e.kind),
                    OsStr::from_bytes(e.name),
                )
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let (attr_ttl, _entry_ttl) = self.ttl();
        let r = guarded("readdirplus", || {
            self.handler.readdirplus(
                fh.0,
                offset,
                READDIRPLUS_BUDGET_BYTES,
                &mut |e: &PlusEntry<'_>| {
                    reply.add(
                        INodeNo(e.attr.ino),
                        e.next_offset,
                        OsStr::from_bytes(e.name),
                        &attr_ttl,
                        &attr(&e.attr),
                        Generation(e.attr.generation),
                    )
                },
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        Self::reply_empty(reply, guarded("releasedir", || self.handler.release(fh.0)));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        Self::reply_empty(
            reply,
            guarded("fsyncdir", || self.handler.fsyncdir(fh.0, datasync)),
        );
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match guarded("statfs", || self.handler.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(err(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let c = caller(req);
        let r = guarded("setxattr", || {
            if position != 0 {
                return Err(Errno::EINVAL);
            }
            self.handler
                .setxattr(&c, ino.0, name.as_bytes(), value, flags as u32)
        });
        Self::reply_empty(reply, r);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let c = caller(req);
        let r = guarded("getxattr", || {
            self.handler.getxattr(&c, ino.0, name.as_bytes())
        });
        Self::reply_xattr(reply, size, r);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let c = caller(req);
        let r = guarded("listxattr", || self.handler.listxattr(&c, ino.0));
        Self::reply_xattr(reply, size, r);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let c = caller(req);
        let r = guarded("removexattr", || {
            self.handler.removexattr(&c, ino.0, name.as_bytes())
        });
        Self::reply_empty(reply, r);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let c = caller(req);
        let r = guarded("access", || {
            self.handler.access(&c, ino.0, mask.bits() as u32)
        });
        Self::reply_empty(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let c = caller(req);
        let r = guarded("create", || {
            self.handler
                .create(&c, parent.0, name.as_bytes(), mode, umask, flags)
        });
        let (attr_ttl, _) = self.ttl();
        match r {
            Ok((a, o)) => reply.created(
                &attr_ttl,
                &attr(&a),
                Generation(a.generation),
                FileHandle(o.fh),
                fopen(&o),
            ),
            Err(e) => reply.error(err(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        Self::reply_empty(
            reply,
            guarded("fallocate", || {
                self.handler.fallocate(fh.0, offset, length, mode)
            }),
        );
    }

    // lseek (SEEK_DATA/SEEK_HOLE), copy_file_range, ioctl, poll, bmap,
    // getlk/setlk: fuser answers ENOSYS, after which the kernel uses its
    // generic implementation (whole file is data; splice copy; locks kept
    // in the kernel) and stops asking.
}

/// Attributes for a negative entry (only its TTL matters to the kernel).
fn dummy_attr() -> Attr {
    Attr {
        ino: 0,
        generation: 0,
        kind: FileKind::Regular,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        atime: Timespec::default(),
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        btime: Timespec::default(),
        rdev: 0,
        blksize: 4096,
    }
}
