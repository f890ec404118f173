//! The transport-neutral half of serving a request: INIT negotiation, and
//! [`dispatch`], which hands a decoded [`Op`] to the [`Handler`] and
//! encodes the result into a [`ReplyBuf`]. Both transports (`/dev/fuse`
//! and FUSE-over-io_uring) call exactly this; they only read requests,
//! decode them, and send what `dispatch` produced.
//!
//! # Locking rules
//!
//! None here: [`Session`] is immutable after INIT (shared by `Arc` between
//! worker threads); all mutable state is in the [`Handler`].

use std::time::Duration;

use lanefs_core::{Attr, Errno, FileKind, SetAttr, TimeSet, Timespec};

use crate::cred::Caller;
use crate::handler::{guarded, Handler, Opened};
use crate::proto::{self, *};
use crate::wire::{forget_items, Op, ReplyBuf};

/// Largest WRITE the kernel may send (and READ it may ask for): 1 MiB,
/// the kernel's default `fuse_max_pages_limit` (256 pages).
pub const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Kernel readahead window we ask for.
pub const MAX_READAHEAD_BYTES: u32 = 1 << 20;
/// Background requests (readahead, async reads) the kernel may queue.
pub const MAX_BACKGROUND: u16 = 64;
/// Where the kernel starts throttling background requests (3/4 of max).
pub const CONGESTION_THRESHOLD: u16 = 48;
/// Page size the kernel counts `max_pages` in.
const KERNEL_PAGE_BYTES: u32 = 4096;
/// Bytes a worker's request buffer needs: the largest WRITE plus its
/// headers (one page covers `fuse_in_header` + `fuse_write_in`).
pub const REQUEST_BUFFER_BYTES: usize = MAX_WRITE_BYTES as usize + KERNEL_PAGE_BYTES as usize;

/// INIT flags lanefs asks for; see docs/FUSE.md for why each.
pub const WANTED_INIT_FLAGS: u64 = FUSE_ASYNC_READ
    | FUSE_BIG_WRITES
    | FUSE_MAX_PAGES
    | FUSE_ATOMIC_O_TRUNC
    | FUSE_EXPORT_SUPPORT
    | FUSE_DO_READDIRPLUS
    | FUSE_READDIRPLUS_AUTO
    | FUSE_PARALLEL_DIROPS
    | FUSE_CACHE_SYMLINKS
    | FUSE_HANDLE_KILLPRIV_V2
    | FUSE_EXPLICIT_INVAL_DATA
    | FUSE_DONT_MASK
    | FUSE_INIT_EXT;

/// What INIT settled, fixed for the life of the session.
#[derive(Clone, Debug)]
pub struct Session {
    /// Protocol minor version in use.
    pub minor: u32,
    /// Flags both sides agreed on (flags | flags2 << 32).
    pub flags: u64,
    /// The kernel offered FUSE-over-io_uring (and we asked for it).
    pub uring: bool,
    /// The kernel's writeback cache is on (asked for and granted).
    pub writeback: bool,
    pub max_write: u32,
    /// `allow_root`: deny requests from anyone but this uid and root.
    pub deny_others_except: Option<u32>,
    /// The transport serving requests (`"dev"` or `"uring"`), for stats.
    pub transport: &'static str,
    /// Worker threads (or rings) serving requests, for stats.
    pub threads: usize,
}

/// The extended attribute of the root directory through which
/// `lanefs stats MNT` asks the daemon how it serves (`key=value` lines;
/// defined in the core beside its reader, `lanefs_core::read_mount_stats`,
/// which `lanefs stats` and `lanefs bench` share). Only GETXATTR of this
/// name on the root is answered by the adapter; a real xattr of that name
/// on the root cannot be read back.
pub use lanefs_core::STATS_XATTR;

/// `lanefs sync MNT` asks the daemon to write everything back and commit
/// it (`Handler::syncfs`), since the kernel never sends FUSE_SYNCFS but to
/// virtiofs. Answered, with an empty value, only on the root.
pub use lanefs_core::SYNC_XATTR;

fn stats_text(h: &Handler, s: &Session) -> Vec<u8> {
    format!(
        "transport={}\nthreads={}\nprotocol=7.{}\ninit_flags={:#x}\nuring_offered={}\nwriteback_cache={}\nopen_handles={}\n",
        s.transport,
        s.threads,
        s.minor,
        s.flags,
        s.flags & FUSE_OVER_IO_URING != 0,
        s.writeback,
        h.open_handles()
    )
    .into_bytes()
}

/// Outcome of one INIT exchange.
pub enum InitReply {
    /// Reply with this and serve.
    Ready(InitOut, Session),
    /// The kernel speaks a newer major version: reply with ours only and
    /// expect another INIT.
    Retry(InitOut),
}

/// Negotiate INIT: `want_uring` asks for `FUSE_OVER_IO_URING` when offered,
/// `want_writeback` for `FUSE_WRITEBACK_CACHE` (`-o writeback_cache`; never
/// asked for otherwise, see docs/FUSE.md for what it changes),
/// `want_posix_acl` for `FUSE_POSIX_ACL` (mounts with `default_permissions`
/// only: the kernel turns `default_permissions` on with it).
pub fn negotiate(
    init: &InitIn,
    want_uring: bool,
    want_writeback: bool,
    want_posix_acl: bool,
) -> Result<InitReply, String> {
    let ours = InitOut {
        major: KERNEL_VERSION,
        minor: KERNEL_MINOR_VERSION,
        ..Default::default()
    };
    if init.major > KERNEL_VERSION {
        return Ok(InitReply::Retry(ours));
    }
    if init.major < KERNEL_VERSION || init.minor < MIN_KERNEL_MINOR_VERSION {
        return Err(format!(
            "kernel FUSE protocol {}.{} is too old (need {}.{})",
            init.major, init.minor, KERNEL_VERSION, MIN_KERNEL_MINOR_VERSION
        ));
    }
    let mut offered = init.flags as u64;
    if offered & FUSE_INIT_EXT != 0 {
        offered |= (init.flags2 as u64) << 32;
    }
    let mut want = WANTED_INIT_FLAGS;
    if want_uring {
        want |= FUSE_OVER_IO_URING;
    }
    if want_writeback {
        want |= FUSE_WRITEBACK_CACHE;
    }
    if want_posix_acl {
        want |= FUSE_POSIX_ACL;
    }
    let flags = offered & want;
    let missing = want & !offered & !FUSE_OVER_IO_URING;
    if missing != 0 {
        tracing::warn!(
            missing = format!("{missing:#x}"),
            "kernel lacks FUSE capabilities; running without them"
        );
    }
    let out = InitOut {
        minor: init.minor.min(KERNEL_MINOR_VERSION),
        max_readahead: init.max_readahead.min(MAX_READAHEAD_BYTES),
        flags: flags as u32,
        flags2: (flags >> 32) as u32,
        max_background: MAX_BACKGROUND,
        congestion_threshold: CONGESTION_THRESHOLD,
        max_write: MAX_WRITE_BYTES,
        time_gran: 1,
        max_pages: (MAX_WRITE_BYTES / KERNEL_PAGE_BYTES) as u16,
        ..ours
    };
    let session = Session {
        minor: out.minor,
        flags,
        uring: flags & FUSE_OVER_IO_URING != 0,
        writeback: flags & FUSE_WRITEBACK_CACHE != 0,
        max_write: MAX_WRITE_BYTES,
        deny_others_except: None,
        transport: "dev",
        threads: 1,
    };
    Ok(InitReply::Ready(out, session))
}

/// What the transport does after [`dispatch`].
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Send the reply now in the buffer (finished with this error, 0 = ok).
    Send(i32),
    /// The request takes no reply (FORGET, BATCH_FORGET).
    None,
}

fn ttl(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// `st_mode`'s type bits of a kind, and the matching `d_type`.
fn type_bits(k: FileKind) -> u32 {
    match k {
        FileKind::Regular => libc::S_IFREG,
        FileKind::Directory => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::CharDevice => libc::S_IFCHR,
        FileKind::BlockDevice => libc::S_IFBLK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
    }
}

fn dtype(k: FileKind) -> u32 {
    type_bits(k) >> 12
}

/// The wire form of engine attributes. Times go as the kernel's
/// `timespec64`: seconds as a two's-complement `s64` and nanoseconds in
/// `0..1e9`, so times before 1970 are exact.
pub fn wire_attr(a: &Attr) -> proto::Attr {
    proto::Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.sec as u64,
        mtime: a.mtime.sec as u64,
        ctime: a.ctime.sec as u64,
        atimensec: a.atime.nsec,
        mtimensec: a.mtime.nsec,
        ctimensec: a.ctime.nsec,
        mode: type_bits(a.kind) | a.perm as u32,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        // The kernel's 32-bit encoding equals glibc's for majors < 4096.
        rdev: a.rdev as u32,
        blksize: a.blksize,
        flags: 0,
    }
}

fn time_of(sec: u64, nsec: u32) -> Timespec {
    Timespec {
        sec: sec as i64,
        nsec,
    }
}

/// The engine's change set for a SETATTR.
pub fn setattr_changes(s: &SetattrIn) -> SetAttr {
    let v = s.valid;
    let time = |set: u32, now: u32, sec: u64, nsec: u32| {
        if v & now != 0 {
            Some(TimeSet::Now)
        } else if v & set != 0 {
            Some(TimeSet::At(time_of(sec, nsec)))
        } else {
            None
        }
    };
    SetAttr {
        mode: (v & FATTR_MODE != 0).then_some(s.mode & 0o7777),
        uid: (v & FATTR_UID != 0).then_some(s.uid),
        gid: (v & FATTR_GID != 0).then_some(s.gid),
        size: (v & FATTR_SIZE != 0).then_some(s.size),
        atime: time(FATTR_ATIME, FATTR_ATIME_NOW, s.atime, s.atimensec),
        mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, s.mtime, s.mtimensec),
        ctime: (v & FATTR_CTIME != 0).then(|| time_of(s.ctime, s.ctimensec)),
    }
}

fn entry_out(h: &Handler, a: &Attr) -> EntryOut {
    let c = &h.config().cache;
    let (ev, evn) = ttl(c.entry_ttl);
    let (av, avn) = ttl(c.attr_ttl);
    EntryOut {
        nodeid: a.ino,
        generation: a.generation,
        entry_valid: ev,
        attr_valid: av,
        entry_valid_nsec: evn,
        attr_valid_nsec: avn,
        attr: wire_attr(a),
    }
}

fn attr_out(h: &Handler, a: &Attr) -> AttrOut {
    let (av, avn) = ttl(h.config().cache.attr_ttl);
    AttrOut {
        attr_valid: av,
        attr_valid_nsec: avn,
        dummy: 0,
        attr: wire_attr(a),
    }
}

/// A STATX reply: the basic stats and the birth time.
fn statx_out(h: &Handler, a: &Attr) -> StatxOut {
    let (av, avn) = ttl(h.config().cache.attr_ttl);
    let t = |t: Timespec| SxTime {
        tv_sec: t.sec as u64,
        tv_nsec: t.nsec,
        reserved: 0,
    };
    let w = wire_attr(a);
    StatxOut {
        attr_valid: av,
        attr_valid_nsec: avn,
        stat: Statx {
            mask: STATX_BASIC_STATS | STATX_BTIME,
            blksize: w.blksize,
            nlink: w.nlink,
            uid: w.uid,
            gid: w.gid,
            // The type and permission bits fit 16 bits, as in `st_mode`.
            mode: w.mode as u16,
            ino: w.ino,
            size: w.size,
            blocks: w.blocks,
            atime: t(a.atime),
            btime: t(a.btime),
            ctime: t(a.ctime),
            mtime: t(a.mtime),
            // The engine keeps rdev in the kernel's (and glibc's) encoding.
            rdev_major: libc::major(a.rdev as libc::dev_t),
            rdev_minor: libc::minor(a.rdev as libc::dev_t),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn open_out(o: &Opened, extra: u32) -> OpenOut {
    OpenOut {
        fh: o.fh,
        open_flags: if o.keep_cache { FOPEN_KEEP_CACHE } else { 0 } | extra,
        backing_id: 0,
    }
}

/// Requests a user other than the owner and root may still make under
/// `allow_root` (as libfuse: those on handles already granted).
fn allowed_for_others(op: &Op<'_>) -> bool {
    matches!(
        op,
        Op::Read(_)
            | Op::Write { .. }
            | Op::Fsync(_)
            | Op::Release(_)
            | Op::Readdir(_)
            | Op::Readdirplus(_)
            | Op::Fsyncdir(_)
            | Op::Releasedir(_)
            | Op::Forget { .. }
            | Op::BatchForget { .. }
            | Op::Interrupt(_)
            | Op::Flush(_)
    )
}

/// Serve one decoded request: call the handler (panics become `EIO`) and
/// leave the reply payload in `out`.
pub fn dispatch(h: &Handler, s: &Session, hdr: &InHeader, op: Op<'_>, out: &mut ReplyBuf) -> Reply {
    out.clear();
    if let Some(owner) = s.deny_others_except {
        if hdr.uid != owner && hdr.uid != 0 && !allowed_for_others(&op) {
            return Reply::Send(-libc::EACCES);
        }
    }
    let opname = op_name(&op);
    match guarded(opname, || serve(h, s, hdr, op, out)) {
        Ok(r) => r,
        Err(e) => Reply::Send(-e.raw()),
    }
}

fn op_name(op: &Op<'_>) -> &'static str {
    match op {
        Op::Lookup { .. } => "lookup",
        Op::Forget { .. } | Op::BatchForget { .. } => "forget",
        Op::Getattr { .. } => "getattr",
        Op::Setattr(_) => "setattr",
        Op::Write { .. } => "write",
        Op::Read(_) => "read",
        Op::Readdir(_) => "readdir",
        Op::Readdirplus(_) => "readdirplus",
        Op::Create { .. } => "create",
        Op::Open(_) => "open",
        _ => "request",
    }
}

fn ok() -> lanefs_core::Result<Reply> {
    Ok(Reply::Send(0))
}

fn serve(
    h: &Handler,
    s: &Session,
    hdr: &InHeader,
    op: Op<'_>,
    out: &mut ReplyBuf,
) -> lanefs_core::Result<Reply> {
    let c = Caller {
        uid: hdr.uid,
        gid: hdr.gid,
        pid: hdr.pid,
    };
    let ino = hdr.nodeid;
    match op {
        Op::Lookup { name } => match h.lookup(&c, ino, name) {
            Ok(a) => out.push(&entry_out(h, &a)),
            Err(e)
                if e == Errno::ENOENT
                    && !h.config().cache.negative_ttl.is_zero()
                    && h.node_exists(ino) =>
            {
                // A negative entry: nodeid 0 with an entry timeout, for a
                // name missing from a directory that exists. A parent
                // node id that names no inode (one the kernel forgot, or
                // a malformed request) is plain `ENOENT`: the kernel's
                // `fuse_lookup` then makes a negative dentry it does not
                // keep, as for any `ENOENT`, instead of one it trusts for
                // `negative_ttl`.
                let (ev, evn) = ttl(h.config().cache.negative_ttl);
                out.push(&EntryOut {
                    entry_valid: ev,
                    entry_valid_nsec: evn,
                    ..Default::default()
                });
            }
            Err(e) => return Err(e),
        },
        Op::Forget { nlookup } => {
            h.forget(ino, nlookup);
            return Ok(Reply::None);
        }
        Op::BatchForget { items } => {
            for f in forget_items(items) {
                h.forget(f.nodeid, f.nlookup);
            }
            return Ok(Reply::None);
        }
        Op::Getattr { fh } => out.push(&attr_out(h, &h.getattr(ino, fh)?)),
        Op::Statx { fh } => out.push(&statx_out(h, &h.getattr(ino, fh)?)),
        Op::Setattr(arg) => {
            let fh = (arg.valid & FATTR_FH != 0).then_some(arg.fh);
            let a = h.setattr(&c, ino, &setattr_changes(&arg), fh)?;
            out.push(&attr_out(h, &a));
        }
        Op::Readlink => out.push_bytes(&h.readlink(ino)?),
        Op::Symlink { name, target } => out.push(&entry_out(h, &h.symlink(&c, ino, name, target)?)),
        Op::Mknod { arg, name } => {
            let a = h.mknod(&c, ino, name, arg.mode, arg.umask, arg.rdev as u64)?;
            out.push(&entry_out(h, &a));
        }
        Op::Mkdir { arg, name } => {
            out.push(&entry_out(h, &h.mkdir(&c, ino, name, arg.mode, arg.umask)?))
        }
        Op::Unlink { name } => h.unlink(&c, ino, name)?,
        Op::Rmdir { name } => h.rmdir(&c, ino, name)?,
        Op::Rename {
            newdir,
            flags,
            name,
            newname,
        } => h.rename(&c, ino, name, newdir, newname, flags)?,
        Op::Link { oldnodeid, newname } => {
            out.push(&entry_out(h, &h.link(&c, oldnodeid, ino, newname)?))
        }
        Op::Open(arg) => {
            // FUSE_OPEN_KILL_SUIDGID (O_TRUNC without CAP_FSETID): the
            // engine applies the same rule by the caller's credentials.
            let o = h.open(&c, ino, arg.flags as i32)?;
            out.push(&open_out(&o, 0));
        }
        Op::Read(arg) => {
            let n = arg.size.min(s.max_write) as usize;
            out.fill_with(n, |buf| {
                h.read_into(arg.fh, arg.offset, buf, arg.flags as i32)
            })?;
        }
        Op::Write { arg, data } => {
            let kill = arg.write_flags & FUSE_WRITE_KILL_SUIDGID != 0;
            let mapped = arg.write_flags & FUSE_WRITE_CACHE != 0;
            let n = h.write(&c, arg.fh, arg.offset, data, kill, mapped)?;
            out.push(&WriteOut {
                size: n,
                padding: 0,
            });
        }
        Op::Statfs => {
            let st = h.statfs()?;
            out.push(&Kstatfs {
                blocks: st.blocks,
                bfree: st.blocks_free,
                bavail: st.blocks_avail,
                files: st.files,
                ffree: st.files_free,
                bsize: st.block_size,
                namelen: st.name_max,
                frsize: st.block_size,
                ..Default::default()
            });
        }
        Op::Release(arg) | Op::Releasedir(arg) => h.release(arg.fh)?,
        Op::Fsync(arg) => h.fsync(arg.fh, arg.fsync_flags & FUSE_FSYNC_FDATASYNC != 0)?,
        Op::Fsyncdir(arg) => h.fsyncdir(arg.fh, arg.fsync_flags & FUSE_FSYNC_FDATASYNC != 0)?,
        Op::Setxattr { flags, name, value } => h.setxattr(&c, ino, name, value, flags)?,
        Op::Getxattr { size, name } if ino == ROOT_ID && name == STATS_XATTR.as_bytes() => {
            xattr_reply(out, size, stats_text(h, s))?
        }
        Op::Getxattr { size, name } if ino == ROOT_ID && name == SYNC_XATTR.as_bytes() => {
            h.syncfs()?;
            xattr_reply(out, size, Vec::new())?
        }
        Op::Getxattr { size, name } => xattr_reply(out, size, h.getxattr(&c, ino, name)?)?,
        Op::Listxattr { size } => xattr_reply(out, size, h.listxattr(&c, ino)?)?,
        Op::Removexattr { name } => h.removexattr(&c, ino, name)?,
        // Nothing is buffered per descriptor: ENOSYS makes the kernel stop
        // sending FLUSH on every close (it counts as success).
        Op::Flush(_) => return Err(Errno::ENOSYS),
        Op::Opendir(arg) => {
            let o = h.opendir(&c, ino, arg.flags as i32)?;
            // keep_cache on a directory = its listing may be cached.
            let extra = if o.keep_cache { FOPEN_CACHE_DIR } else { 0 };
            out.push(&open_out(&o, extra));
        }
        Op::Readdir(arg) => {
            let limit = arg.size.min(s.max_write) as usize;
            // The descriptor's flags now: its O_NOATIME decides atime.
            let flags = arg.flags as i32;
            h.readdir(arg.fh, arg.offset, arg.size, flags, &mut |e| {
                !out.push_dirent(limit, e.ino, e.next_offset, dtype(e.kind), e.name)
            })?;
        }
        Op::Readdirplus(arg) => {
            // Sized to the kernel's buffer: the handler prepares exactly
            // what fits in `arg.size`.
            let (limit, flags) = (arg.size.min(s.max_write) as usize, arg.flags as i32);
            h.readdirplus(arg.fh, arg.offset, arg.size, flags, &mut |e| {
                let mut entry = entry_out(h, &e.attr);
                if !e.counted {
                    // `.` and `..` carry no reference: nodeid 0 tells the
                    // kernel not to instantiate them.
                    entry = EntryOut {
                        attr: entry.attr,
                        ..Default::default()
                    };
                }
                !out.push_direntplus(limit, &entry, e.next_offset, dtype(e.attr.kind), e.name)
            })?;
        }
        Op::Access(arg) => h.access(&c, ino, arg.mask)?,
        Op::Create { arg, name } => {
            let (a, o) = h.create(&c, ino, name, arg.mode, arg.umask, arg.flags as i32)?;
            out.push(&entry_out(h, &a));
            out.push(&open_out(&o, 0));
        }
        Op::Tmpfile { arg, name: _ } => {
            let (a, o) = h.tmpfile(&c, ino, arg.mode, arg.umask, arg.flags as i32)?;
            out.push(&entry_out(h, &a));
            out.push(&open_out(&o, 0));
        }
        // No interrupt support: ENOSYS makes the kernel stop sending them.
        Op::Interrupt(_) => return Err(Errno::ENOSYS),
        Op::Destroy => h.destroy(),
        Op::Fallocate(arg) => h.fallocate(&c, arg.fh, arg.offset, arg.length, arg.mode as i32)?,
        Op::Init(_) => return Err(Errno(libc::EPROTO)),
        // Sent only where the kernel's connection asks for it (virtiofs):
        // served all the same.
        Op::Syncfs => h.syncfs()?,
        Op::Ioctl { arg, input } => {
            let data = h.ioctl(&c, ino, arg.cmd, input, arg.out_size)?;
            out.push(&IoctlOut::default());
            out.push_bytes(&data);
        }
        Op::Unknown(_) => return Err(Errno::ENOSYS),
    }
    ok()
}

fn xattr_reply(out: &mut ReplyBuf, size: u32, v: Vec<u8>) -> lanefs_core::Result<()> {
    if size == 0 {
        let n = u32::try_from(v.len()).map_err(|_| Errno::E2BIG)?;
        out.push(&GetxattrOut {
            size: n,
            padding: 0,
        });
    } else if v.len() > size as usize {
        return Err(Errno::ERANGE);
    } else {
        out.push_bytes(&v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_1970_times_are_exact_both_ways() {
        let s = SetattrIn {
            valid: FATTR_MTIME | FATTR_ATIME_NOW,
            mtime: (-2i64) as u64,
            mtimensec: 250_000_000,
            ..Default::default()
        };
        let ch = setattr_changes(&s);
        assert_eq!(
            ch.mtime,
            Some(TimeSet::At(Timespec {
                sec: -2,
                nsec: 250_000_000
            }))
        );
        assert_eq!(ch.atime, Some(TimeSet::Now));
        assert_eq!(ch.mode, None);
        let fs = lanefs_core::Fs::new_in_memory();
        let mut a = fs.getattr(1).unwrap();
        a.mtime = Timespec {
            sec: -2,
            nsec: 250_000_000,
        };
        let w = wire_attr(&a);
        assert_eq!((w.mtime as i64, w.mtimensec), (-2, 250_000_000));
        assert_eq!(w.mode, libc::S_IFDIR | a.perm as u32);
    }

    /// A STATX reply carries the birth time (before 1970 too) and a
    /// device number split into major and minor as the kernel wants them
    /// (`fuse_statx_to_attr`: `MKDEV(rdev_major, rdev_minor)`).
    #[test]
    fn statx_reply_has_btime_and_split_rdev() {
        let fs = lanefs_core::Fs::new_in_memory();
        let h = Handler::new(fs, crate::handler::HandlerConfig::default());
        let mut a = h.fs().getattr(1).unwrap();
        a.btime = Timespec { sec: -3, nsec: 7 };
        a.rdev = libc::makedev(4095, 1_048_575);
        let o = statx_out(&h, &a);
        assert_eq!(o.stat.mask, STATX_BASIC_STATS | STATX_BTIME);
        assert_eq!((o.stat.btime.tv_sec as i64, o.stat.btime.tv_nsec), (-3, 7));
        assert_eq!((o.stat.rdev_major, o.stat.rdev_minor), (4095, 1_048_575));
        assert_eq!(o.stat.mode as u32, libc::S_IFDIR | a.perm as u32);
        assert_eq!(o.stat.ino, a.ino);
        // Decoding: the handle is passed only with FUSE_GETATTR_FH.
        let hdr = InHeader {
            opcode: FUSE_STATX,
            ..Default::default()
        };
        let arg = StatxIn {
            getattr_flags: FUSE_GETATTR_FH,
            fh: 9,
            sx_mask: STATX_BASIC_STATS | STATX_BTIME,
            ..Default::default()
        };
        match crate::wire::decode(&hdr, None, arg.as_bytes()).unwrap() {
            Op::Statx { fh } => assert_eq!(fh, Some(9)),
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn init_negotiates_flags_and_version() {
        let init = InitIn {
            major: 7,
            minor: 44,
            max_readahead: 128 << 10,
            flags: (WANTED_INIT_FLAGS | FUSE_WRITEBACK_CACHE) as u32,
            flags2: (FUSE_OVER_IO_URING >> 32) as u32,
            ..Default::default()
        };
        let InitReply::Ready(out, s) = negotiate(&init, true, false, false).unwrap() else {
            panic!("no reply")
        };
        assert_eq!((out.major, out.minor), (7, KERNEL_MINOR_VERSION));
        assert_eq!(out.max_readahead, 128 << 10);
        assert!(s.uring && out.flags2 & (FUSE_OVER_IO_URING >> 32) as u32 != 0);
        assert_eq!(
            out.flags as u64 & FUSE_WRITEBACK_CACHE,
            0,
            "writeback asked for though not configured"
        );
        assert!(!s.writeback);
        let InitReply::Ready(out, s) = negotiate(&init, false, true, false).unwrap() else {
            panic!("no reply")
        };
        assert!(!s.uring);
        assert_ne!(
            out.flags as u64 & FUSE_WRITEBACK_CACHE,
            0,
            "writeback configured but not asked for"
        );
        assert!(s.writeback && s.flags & FUSE_WRITEBACK_CACHE != 0);
        // Configured but not offered: not granted, and the session says so.
        let plain = InitIn {
            flags: WANTED_INIT_FLAGS as u32,
            ..init
        };
        let InitReply::Ready(out, s) = negotiate(&plain, false, true, false).unwrap() else {
            panic!("no reply")
        };
        assert_eq!(out.flags as u64 & FUSE_WRITEBACK_CACHE, 0);
        assert!(!s.writeback);
        assert!(matches!(
            negotiate(&InitIn { major: 8, ..init }, true, false, false),
            Ok(InitReply::Retry(_))
        ));
        assert!(negotiate(&InitIn { minor: 20, ..init }, true, false, false).is_err());
        // POSIX ACLs only when asked for (mounts with default_permissions);
        // FUSE_DONT_MASK always (the engine applies the umask, or the
        // directory's default ACL instead).
        let offered = InitIn {
            flags: (WANTED_INIT_FLAGS | FUSE_POSIX_ACL) as u32,
            ..init
        };
        for want in [false, true] {
            let InitReply::Ready(out, s) = negotiate(&offered, false, false, want).unwrap() else {
                panic!("no reply")
            };
            assert_eq!(out.flags as u64 & FUSE_POSIX_ACL != 0, want);
            assert_eq!(s.flags & FUSE_POSIX_ACL != 0, want);
            assert_ne!(out.flags as u64 & FUSE_DONT_MASK, 0);
        }
    }
}
