//! Decoding FUSE requests from a buffer (without copying names or write
//! data) and encoding replies and notifications.
//!
//! A request reaches us in one of two shapes: on `/dev/fuse` as one
//! contiguous message (header, fixed argument, variable part), and on a
//! FUSE-over-io_uring entry split into a header area (in-header and the
//! opcode's fixed argument) and a payload buffer (names, write data). Both
//! go through [`decode`], which takes the fixed argument from `op_arg` when
//! given and from the front of `body` otherwise.
//!
//! No shared state and no locks: a [`ReplyBuf`] belongs to one worker.

use crate::proto::*;

/// Errors of decoding: the request is malformed (answered `EINVAL`, or
/// `EIO` for an opcode-specific short message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// One decoded request, borrowing names and data from the buffer it was
/// read into.
#[derive(Debug)]
pub enum Op<'a> {
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    /// The whole `fuse_forget_one` items present, at most `count` of
    /// them (see [`decode`]).
    BatchForget {
        items: &'a [u8],
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        arg: MknodIn,
        name: &'a [u8],
    },
    Mkdir {
        arg: MkdirIn,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        newname: &'a [u8],
    },
    Open(OpenIn),
    Read(ReadIn),
    Write {
        arg: WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release(ReleaseIn),
    Fsync(FsyncIn),
    Setxattr {
        flags: u32,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        size: u32,
        name: &'a [u8],
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush(FlushIn),
    Init(InitIn),
    Opendir(OpenIn),
    Readdir(ReadIn),
    Releasedir(ReleaseIn),
    Fsyncdir(FsyncIn),
    Access(AccessIn),
    Create {
        arg: CreateIn,
        name: &'a [u8],
    },
    Interrupt(InterruptIn),
    Destroy,
    Fallocate(FallocateIn),
    Readdirplus(ReadIn),
    Syncfs,
    /// TMPFILE: CREATE's argument; `name` is the kernel's placeholder
    /// (`/`), not a name in the directory.
    Tmpfile {
        arg: CreateIn,
        name: &'a [u8],
    },
    /// STATX (`fh` as in GETATTR).
    Statx {
        fh: Option<u64>,
    },
    /// IOCTL: the command and its input (`arg.in_size` bytes).
    Ioctl {
        arg: IoctlIn,
        input: &'a [u8],
    },
    /// An opcode we do not implement (answered `ENOSYS`).
    Unknown(u32),
}

/// Reads the fixed argument and the variable part of one request.
struct Args<'a> {
    /// The opcode's fixed argument, when the transport delivers it apart.
    op_arg: Option<&'a [u8]>,
    body: &'a [u8],
}

impl<'a> Args<'a> {
    fn fixed<T: Pod>(&mut self) -> Result<T, Malformed> {
        match self.op_arg.take() {
            Some(b) => T::read_from(b).ok_or(Malformed),
            None => {
                let v = T::read_from(self.body).ok_or(Malformed)?;
                self.body = &self.body[size_of::<T>()..];
                Ok(v)
            }
        }
    }

    /// A NUL-terminated string (the NUL is not included).
    fn cstr(&mut self) -> Result<&'a [u8], Malformed> {
        let end = self.body.iter().position(|&b| b == 0).ok_or(Malformed)?;
        let s = &self.body[..end];
        self.body = &self.body[end + 1..];
        Ok(s)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.body.len() < n {
            return Err(Malformed);
        }
        let (b, rest) = self.body.split_at(n);
        self.body = rest;
        Ok(b)
    }
}

/// Decode a request whose header is `h`. `op_arg`: the fixed argument
/// area (FUSE-over-io_uring), or `None` when the fixed argument is at the
/// front of `body` (`/dev/fuse`). `body`: everything after the header (or
/// the ring entry's payload), exactly as long as the kernel sent.
pub fn decode<'a>(
    h: &InHeader,
    op_arg: Option<&'a [u8]>,
    body: &'a [u8],
) -> Result<Op<'a>, Malformed> {
    let mut a = Args { op_arg, body };
    Ok(match h.opcode {
        FUSE_LOOKUP => Op::Lookup { name: a.cstr()? },
        FUSE_FORGET => Op::Forget {
            nlookup: a.fixed::<ForgetIn>()?.nlookup,
        },
        FUSE_BATCH_FORGET => {
            // The kernel sends exactly `count` items (`fuse_read_batch_forget`
            // sizes `count` to what fits the read). A message shorter than
            // its count announces is malformed, but its items are
            // references the kernel gave back: forget the whole items
            // present (at most `count`) rather than drop them all, which
            // would leak them for the mount's life. libfuse's
            // `do_batch_forget` trusts `count` and reads past the message;
            // this reads only what is there.
            let b: BatchForgetIn = a.fixed()?;
            let one = size_of::<ForgetOne>();
            let n = (b.count as usize).min(a.body.len() / one) * one;
            Op::BatchForget { items: a.bytes(n)? }
        }
        FUSE_GETATTR => {
            let g: GetattrIn = a.fixed()?;
            Op::Getattr {
                fh: (g.getattr_flags & FUSE_GETATTR_FH != 0).then_some(g.fh),
            }
        }
        FUSE_SETATTR => Op::Setattr(a.fixed()?),
        FUSE_READLINK => Op::Readlink,
        FUSE_SYMLINK => {
            let name = a.cstr()?;
            Op::Symlink {
                name,
                target: a.cstr()?,
            }
        }
        FUSE_MKNOD => {
            let arg = a.fixed()?;
            Op::Mknod {
                arg,
                name: a.cstr()?,
            }
        }
        FUSE_MKDIR => {
            let arg = a.fixed()?;
            Op::Mkdir {
                arg,
                name: a.cstr()?,
            }
        }
        FUSE_UNLINK => Op::Unlink { name: a.cstr()? },
        FUSE_RMDIR => Op::Rmdir { name: a.cstr()? },
        FUSE_RENAME => {
            let r: RenameIn = a.fixed()?;
            let name = a.cstr()?;
            Op::Rename {
                newdir: r.newdir,
                flags: 0,
                name,
                newname: a.cstr()?,
            }
        }
        FUSE_RENAME2 => {
            let r: Rename2In = a.fixed()?;
            let name = a.cstr()?;
            Op::Rename {
                newdir: r.newdir,
                flags: r.flags,
                name,
                newname: a.cstr()?,
            }
        }
        FUSE_LINK => {
            let l: LinkIn = a.fixed()?;
            Op::Link {
                oldnodeid: l.oldnodeid,
                newname: a.cstr()?,
            }
        }
        FUSE_OPEN => Op::Open(a.fixed()?),
        FUSE_READ => Op::Read(a.fixed()?),
        FUSE_WRITE => {
            let arg: WriteIn = a.fixed()?;
            Op::Write {
                arg,
                data: a.bytes(arg.size as usize)?,
            }
        }
        FUSE_STATFS => Op::Statfs,
        FUSE_RELEASE => Op::Release(a.fixed()?),
        FUSE_FSYNC => Op::Fsync(a.fixed()?),
        FUSE_SETXATTR => {
            let s: SetxattrInCompat = a.fixed()?;
            let name = a.cstr()?;
            Op::Setxattr {
                flags: s.flags,
                name,
                value: a.bytes(s.size as usize)?,
            }
        }
        FUSE_GETXATTR => {
            let g: GetxattrIn = a.fixed()?;
            Op::Getxattr {
                size: g.size,
                name: a.cstr()?,
            }
        }
        FUSE_LISTXATTR => Op::Listxattr {
            size: a.fixed::<GetxattrIn>()?.size,
        },
        FUSE_REMOVEXATTR => Op::Removexattr { name: a.cstr()? },
        FUSE_FLUSH => Op::Flush(a.fixed()?),
        FUSE_INIT => {
            // Kernels before 7.36 send only the first 16 bytes.
            let mut full = [0u8; size_of::<InitIn>()];
            let src = a.op_arg.unwrap_or(a.body);
            if src.len() < INIT_IN_COMPAT_BYTES {
                return Err(Malformed);
            }
            let n = src.len().min(full.len());
            full[..n].copy_from_slice(&src[..n]);
            Op::Init(InitIn::read_from(&full).ok_or(Malformed)?)
        }
        FUSE_OPENDIR => Op::Opendir(a.fixed()?),
        FUSE_READDIR => Op::Readdir(a.fixed()?),
        FUSE_RELEASEDIR => Op::Releasedir(a.fixed()?),
        FUSE_FSYNCDIR => Op::Fsyncdir(a.fixed()?),
        FUSE_ACCESS => Op::Access(a.fixed()?),
        FUSE_CREATE => {
            let arg = a.fixed()?;
            Op::Create {
                arg,
                name: a.cstr()?,
            }
        }
        FUSE_INTERRUPT => Op::Interrupt(a.fixed()?),
        FUSE_DESTROY => Op::Destroy,
        FUSE_FALLOCATE => Op::Fallocate(a.fixed()?),
        FUSE_READDIRPLUS => Op::Readdirplus(a.fixed()?),
        FUSE_SYNCFS => Op::Syncfs,
        FUSE_TMPFILE => {
            let arg = a.fixed()?;
            // The placeholder name is not used: a kernel that sent none
            // is served too.
            Op::Tmpfile {
                arg,
                name: a.cstr().unwrap_or(b""),
            }
        }
        FUSE_STATX => {
            let g: StatxIn = a.fixed()?;
            Op::Statx {
                fh: (g.getattr_flags & FUSE_GETATTR_FH != 0).then_some(g.fh),
            }
        }
        FUSE_IOCTL => {
            let arg: IoctlIn = a.fixed()?;
            Op::Ioctl {
                arg,
                input: a.bytes(arg.in_size as usize)?,
            }
        }
        other => Op::Unknown(other),
    })
}

/// Iterate the `(nodeid, nlookup)` pairs of a BATCH_FORGET.
pub fn forget_items(items: &[u8]) -> impl Iterator<Item = ForgetOne> + '_ {
    items
        .chunks_exact(size_of::<ForgetOne>())
        .filter_map(ForgetOne::read_from)
}

/// Split a `/dev/fuse` message into its header and body.
pub fn split_message(msg: &[u8]) -> Result<(InHeader, &[u8]), Malformed> {
    let h = InHeader::read_from(msg).ok_or(Malformed)?;
    let len = h.len as usize;
    if len < size_of::<InHeader>() || len > msg.len() {
        return Err(Malformed);
    }
    Ok((h, &msg[size_of::<InHeader>()..len]))
}

/// A reply being built: an [`OutHeader`] slot followed by the payload.
/// Reused across requests by one worker (its allocation is kept).
pub struct ReplyBuf {
    buf: Vec<u8>,
}

const OUT_HEADER_BYTES: usize = size_of::<OutHeader>();

impl Default for ReplyBuf {
    fn default() -> Self {
        Self::with_capacity(MIN_READ_BUFFER)
    }
}

impl ReplyBuf {
    pub fn with_capacity(n: usize) -> ReplyBuf {
        let mut buf = Vec::with_capacity(n.max(OUT_HEADER_BYTES));
        buf.resize(OUT_HEADER_BYTES, 0);
        ReplyBuf { buf }
    }

    /// Start a new reply (drops whatever payload was there).
    pub fn clear(&mut self) {
        self.buf.truncate(OUT_HEADER_BYTES);
    }

    pub fn push<T: Pod>(&mut self, v: &T) {
        self.buf.extend_from_slice(v.as_bytes());
    }

    pub fn push_bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Bytes of payload so far.
    pub fn payload_len(&self) -> usize {
        self.buf.len() - OUT_HEADER_BYTES
    }

    /// Grow the payload by `n` zero bytes and give them to `fill`, which
    /// returns how many it used; the rest is cut off again.
    pub fn fill_with<E>(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let start = self.buf.len();
        self.buf.resize(start + n, 0);
        match fill(&mut self.buf[start..]) {
            Ok(used) => {
                debug_assert!(used <= n);
                self.buf.truncate(start + used.min(n));
                Ok(used)
            }
            Err(e) => {
                self.buf.truncate(start);
                Err(e)
            }
        }
    }

    /// Cut the payload back to `len` bytes.
    pub fn truncate_payload(&mut self, len: usize) {
        self.buf.truncate(OUT_HEADER_BYTES + len);
    }

    /// Finish the reply to `unique` with `error` (0 or a negative errno;
    /// an error reply carries no payload). Returns the whole message.
    pub fn finish(&mut self, unique: u64, error: i32) -> &[u8] {
        if error != 0 {
            self.clear();
        }
        let h = OutHeader {
            len: self.buf.len() as u32,
            error,
            unique,
        };
        self.buf[..OUT_HEADER_BYTES].copy_from_slice(h.as_bytes());
        &self.buf
    }

    /// Complete a notification: header with `unique` 0 and the
    /// notification code where a reply has its error, payload kept
    /// ([`finish`](Self::finish) drops the payload of an error reply).
    pub fn finish_notify(&mut self, code: i32) -> &[u8] {
        let h = OutHeader {
            len: self.buf.len() as u32,
            error: code,
            unique: 0,
        };
        self.buf[..OUT_HEADER_BYTES].copy_from_slice(h.as_bytes());
        &self.buf
    }

    /// The payload after [`finish`](Self::finish) (for transports that
    /// carry the header apart).
    pub fn payload(&self) -> &[u8] {
        &self.buf[OUT_HEADER_BYTES..]
    }

    /// The header bytes after [`finish`](Self::finish).
    pub fn header(&self) -> &[u8] {
        &self.buf[..OUT_HEADER_BYTES]
    }

    /// Append one READDIR entry if it fits in `limit` payload bytes.
    pub fn push_dirent(&mut self, limit: usize, ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        let rec = dirent_bytes(size_of::<Dirent>(), name.len());
        if self.payload_len() + rec > limit {
            return false;
        }
        self.push(&Dirent {
            ino,
            off,
            namelen: name.len() as u32,
            typ,
        });
        self.push_name_padded(name, rec - size_of::<Dirent>());
        true
    }

    /// Append one READDIRPLUS entry if it fits in `limit` payload bytes.
    pub fn push_direntplus(
        &mut self,
        limit: usize,
        entry: &EntryOut,
        off: u64,
        typ: u32,
        name: &[u8],
    ) -> bool {
        let head = size_of::<EntryOut>() + size_of::<Dirent>();
        let rec = dirent_bytes(head, name.len());
        if self.payload_len() + rec > limit {
            return false;
        }
        self.push(entry);
        self.push(&Dirent {
            ino: entry.attr.ino,
            off,
            namelen: name.len() as u32,
            typ,
        });
        self.push_name_padded(name, rec - head);
        true
    }

    fn push_name_padded(&mut self, name: &[u8], room: usize) {
        self.buf.extend_from_slice(name);
        self.buf.resize(self.buf.len() + room - name.len(), 0);
    }
}

/// Size of a directory record with a `head`-byte header and a name of
/// `name_len` bytes, padded to 8 bytes (`FUSE_DIRENT_ALIGN`).
pub fn dirent_bytes(head: usize, name_len: usize) -> usize {
    (head + name_len).next_multiple_of(8)
}

/// Encode a notification (`unique` 0, `error` = the notify code).
pub fn notify_inval_inode(out: &mut ReplyBuf, ino: u64, off: i64, len: i64) -> &[u8] {
    out.clear();
    out.push(&NotifyInvalInodeOut { ino, off, len });
    out.finish_notify(FUSE_NOTIFY_INVAL_INODE)
}

/// Encode an entry invalidation of `name` in `parent`.
pub fn notify_inval_entry<'b>(out: &'b mut ReplyBuf, parent: u64, name: &[u8]) -> &'b [u8] {
    out.clear();
    out.push(&NotifyInvalEntryOut {
        parent,
        namelen: name.len() as u32,
        flags: 0,
    });
    out.push_bytes(name);
    out.push_bytes(&[0]);
    out.finish_notify(FUSE_NOTIFY_INVAL_ENTRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notifications carry their payload, `unique` 0 and the code in the
    /// error field (until this test, `finish` dropped the payload and the
    /// kernel answered every notification EINVAL).
    #[test]
    fn notifications_keep_their_payload() {
        let mut b = ReplyBuf::with_capacity(64);
        let m = notify_inval_inode(&mut b, 7, 0, i64::MAX).to_vec();
        assert_eq!(m.len(), OUT_HEADER_BYTES + size_of::<NotifyInvalInodeOut>());
        let h = OutHeader::read_from(&m[..OUT_HEADER_BYTES]).unwrap();
        assert_eq!(
            (h.len as usize, h.error, h.unique),
            (m.len(), FUSE_NOTIFY_INVAL_INODE, 0)
        );
        let p = NotifyInvalInodeOut::read_from(&m[OUT_HEADER_BYTES..]).unwrap();
        assert_eq!((p.ino, p.off, p.len), (7, 0, i64::MAX));
        let m = notify_inval_entry(&mut b, 1, b"name").to_vec();
        let want = OUT_HEADER_BYTES + size_of::<NotifyInvalEntryOut>() + 5;
        assert_eq!(m.len(), want);
        let h = OutHeader::read_from(&m[..OUT_HEADER_BYTES]).unwrap();
        assert_eq!(
            (h.len as usize, h.error, h.unique),
            (want, FUSE_NOTIFY_INVAL_ENTRY, 0)
        );
        assert_eq!(&m[want - 5..], b"name\0");
    }

    fn msg(opcode: u32, body: &[u8]) -> Vec<u8> {
        let h = InHeader {
            len: (size_of::<InHeader>() + body.len()) as u32,
            opcode,
            unique: 9,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            ..Default::default()
        };
        let mut v = h.as_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn decodes_write_without_copying_data() {
        let w = WriteIn {
            fh: 7,
            offset: 4096,
            size: 3,
            write_flags: FUSE_WRITE_KILL_SUIDGID,
            ..Default::default()
        };
        let mut body = w.as_bytes().to_vec();
        body.extend_from_slice(b"abc");
        let m = msg(FUSE_WRITE, &body);
        let (h, b) = split_message(&m).unwrap();
        assert_eq!((h.uid, h.gid, h.pid, h.unique), (1000, 100, 42, 9));
        match decode(&h, None, b).unwrap() {
            Op::Write { arg, data } => {
                assert_eq!(
                    (arg.fh, arg.offset, arg.write_flags),
                    (7, 4096, FUSE_WRITE_KILL_SUIDGID)
                );
                assert_eq!(data, b"abc");
                assert_eq!(
                    data.as_ptr(),
                    m[m.len() - 3..].as_ptr(),
                    "data must borrow the buffer"
                );
            }
            o => panic!("decoded {o:?}"),
        }
    }

    #[test]
    fn decodes_split_args_like_a_ring_entry() {
        let r = Rename2In {
            newdir: 5,
            flags: 1,
            padding: 0,
        };
        let h = InHeader {
            opcode: FUSE_RENAME2,
            ..Default::default()
        };
        match decode(&h, Some(r.as_bytes()), b"a\0bb\0").unwrap() {
            Op::Rename {
                newdir,
                flags,
                name,
                newname,
            } => {
                assert_eq!(
                    (newdir, flags, name, newname),
                    (5, 1, &b"a"[..], &b"bb"[..])
                )
            }
            o => panic!("decoded {o:?}"),
        }
    }

    #[test]
    fn rejects_truncated_requests() {
        let h = InHeader {
            opcode: FUSE_LOOKUP,
            ..Default::default()
        };
        assert_eq!(decode(&h, None, b"no-nul").unwrap_err(), Malformed);
        let h = InHeader {
            opcode: FUSE_WRITE,
            ..Default::default()
        };
        let w = WriteIn {
            size: 100,
            ..Default::default()
        };
        assert_eq!(decode(&h, None, w.as_bytes()).unwrap_err(), Malformed);
        let mut m = msg(FUSE_STATFS, &[]);
        m[0] = 200; // len beyond the buffer
        assert!(split_message(&m).is_err());
    }

    #[test]
    fn dirents_are_padded_and_bounded() {
        let mut r = ReplyBuf::default();
        assert!(r.push_dirent(64, 3, 1, 8, b"abc"));
        assert_eq!(r.payload_len(), 32);
        assert!(
            !r.push_dirent(64, 4, 2, 8, b"0123456789abcdef"),
            "48 bytes do not fit in 32 left"
        );
        let out = r.finish(5, 0);
        let h = OutHeader::read_from(out).unwrap();
        assert_eq!((h.len, h.error, h.unique), (48, 0, 5));
        let d = Dirent::read_from(&out[16..]).unwrap();
        assert_eq!((d.ino, d.off, d.namelen, d.typ), (3, 1, 3, 8));
        assert_eq!(&out[40..43], b"abc");
        assert_eq!(&out[43..48], &[0; 5]);
    }

    #[test]
    fn error_reply_has_no_payload() {
        let mut r = ReplyBuf::default();
        r.push(&WriteOut {
            size: 1,
            padding: 0,
        });
        let out = r.finish(3, -libc::ENOENT);
        assert_eq!(out.len(), 16);
        assert_eq!(OutHeader::read_from(out).unwrap().error, -libc::ENOENT);
    }
}
