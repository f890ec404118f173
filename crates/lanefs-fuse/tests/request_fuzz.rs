//! Property test of the FUSE request layer: no panic on any input, a clear
//! errno for every bad input, and a consistent engine afterwards.
//!
//! Random sequences of requests of every opcode the daemon knows (and
//! unknown ones), with node ids and handles drawn both from what the
//! sequence made and from arbitrary numbers, extreme offsets and sizes,
//! every SETATTR valid-bit combination, odd names (empty, `.`, `..`, with
//! `/`, 255 and 256 bytes) and root and non-root callers, are encoded as
//! `/dev/fuse` messages and served exactly as a worker serves them
//! (`wire::split_message` + `workers::serve_raw`, over an in-memory
//! engine). Random, truncated and mangled bodies of every opcode go the
//! same way, and through the ring shape (`decode` with a separate
//! argument area). Checked for every reply:
//!
//! * no panic (a panic hook counts them: `serve_raw`'s guard would
//!   answer `EIO` and hide it);
//! * the error is 0 or a negative errno the kernel accepts
//!   (`-512 < error <= 0`, `fuse_dev_do_write`), and never `EIO` (nothing
//!   in an in-memory engine fails with it but a caught panic);
//! * an error reply carries no payload; a reply whose size the protocol
//!   fixes has that size; READ, READDIR(PLUS), GETXATTR, LISTXATTR fit the
//!   size asked for; WRITE reports what it was given;
//! * after each sequence every directory it knows lists the same in small
//!   buffers as in one (READDIR and READDIRPLUS, continuing at each
//!   reply's last offset), each name once; `Fs::check()` passes, and again
//!   after every handle is released and every reference given back (as
//!   the kernel does at unmount); on an image, `fsck` passes once the
//!   engine is dropped;
//! * two threads serving two sequences on one handler at once neither
//!   panic nor hang, and leave a consistent engine.
//!
//! 64 cases of up to 64 requests by default (16 on an image, 16 in two
//! threads);
//! `LANEFS_FUZZ_CASES=N` for a longer run
//! (`cargo test --release -p lanefs-fuse --test request_fuzz`).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Once;

use lanefs_core::Fs;
use lanefs_fuse::dispatch::{Reply, Session, MAX_WRITE_BYTES, WANTED_INIT_FLAGS};
use lanefs_fuse::proto::*;
use lanefs_fuse::wire::{self, ReplyBuf};
use lanefs_fuse::workers::serve_raw;
use lanefs_fuse::{Handler, HandlerConfig};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

thread_local! {
    static PANICS: Cell<u64> = const { Cell::new(0) };
    static OUTCOMES: std::cell::RefCell<std::collections::BTreeMap<(u32, i32), u64>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Count panics on this thread (the request guard catches them).
fn install_panic_counter() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.set(p.get() + 1));
            LAST_PANIC.with(|l| *l.borrow_mut() = info.to_string());
            prev(info);
        }));
    });
}

fn panics() -> u64 {
    PANICS.with(|p| p.get())
}

fn cases() -> u32 {
    std::env::var("LANEFS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(64)
}

/// Opcodes the daemon decodes (IOCTL too: the inode-flag commands, ENOTTY
/// for others), those it answers ENOSYS (LSEEK, COPY_FILE_RANGE, POLL,
/// locks, BMAP, ...) and nonsense.
const OPCODES: &[u32] = &[
    FUSE_LOOKUP,
    FUSE_FORGET,
    FUSE_GETATTR,
    FUSE_SETATTR,
    FUSE_READLINK,
    FUSE_SYMLINK,
    FUSE_MKNOD,
    FUSE_MKDIR,
    FUSE_UNLINK,
    FUSE_RMDIR,
    FUSE_RENAME,
    FUSE_LINK,
    FUSE_OPEN,
    FUSE_READ,
    FUSE_WRITE,
    FUSE_STATFS,
    FUSE_RELEASE,
    FUSE_FSYNC,
    FUSE_SETXATTR,
    FUSE_GETXATTR,
    FUSE_LISTXATTR,
    FUSE_REMOVEXATTR,
    FUSE_FLUSH,
    FUSE_INIT,
    FUSE_OPENDIR,
    FUSE_READDIR,
    FUSE_RELEASEDIR,
    FUSE_FSYNCDIR,
    31, // GETLK
    32, // SETLK
    33, // SETLKW
    FUSE_ACCESS,
    FUSE_CREATE,
    FUSE_INTERRUPT,
    37, // BMAP
    FUSE_DESTROY,
    FUSE_IOCTL,
    40, // POLL
    41, // NOTIFY_REPLY
    FUSE_BATCH_FORGET,
    FUSE_FALLOCATE,
    FUSE_READDIRPLUS,
    FUSE_RENAME2,
    46, // LSEEK
    47, // COPY_FILE_RANGE
    48, // SETUPMAPPING
    49, // REMOVEMAPPING
    FUSE_SYNCFS,
    FUSE_TMPFILE,
    FUSE_STATX,
    53,
    0,
    4096, // CUSE_INIT
    u32::MAX,
];

/// Operations that make things: drawn more often so that sequences reach
/// deeper states.
const MAKERS: &[u32] = &[
    FUSE_CREATE,
    FUSE_MKDIR,
    FUSE_MKNOD,
    FUSE_SYMLINK,
    FUSE_LOOKUP,
    FUSE_OPEN,
    FUSE_OPENDIR,
    FUSE_WRITE,
    FUSE_LINK,
    FUSE_SETXATTR,
];

/// A node id: one the sequence was given (index into the known list), the
/// root, or an arbitrary number.
#[derive(Clone, Copy, Debug)]
enum Node {
    Root,
    Known(usize),
    Raw(u64),
}

/// A handle: one the sequence was given, or an arbitrary number.
#[derive(Clone, Copy, Debug)]
enum Fh {
    Known(usize),
    Raw(u64),
}

#[derive(Clone, Debug)]
enum Name {
    Pool(&'static [u8]),
    Repeat(u8, usize),
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Pool(b) => b.to_vec(),
            Name::Repeat(c, n) => vec![*c; *n],
        }
    }
}

/// Bytes for WRITE data, xattr values and symlink targets: small random
/// ones, or a long run of one byte (cheap to generate) around the limits.
#[derive(Clone, Debug)]
enum Data {
    Bytes(Vec<u8>),
    Run(u8, usize),
}

impl Data {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Data::Bytes(b) => b.clone(),
            Data::Run(c, n) => vec![*c; *n],
        }
    }
}

/// One request: an opcode and every parameter any opcode could use; each
/// opcode takes what it needs.
#[derive(Clone, Debug)]
struct Req {
    opcode: u32,
    node: Node,
    node2: Node,
    fh: Fh,
    name: Name,
    name2: Name,
    xname: Name,
    off: u64,
    len: u64,
    size: u32,
    flags: u32,
    flags2: u32,
    mode: u32,
    data: Data,
    /// Index into [`CALLERS`].
    who: usize,
    nlookup: u64,
}

/// (uid, gid) of root, two users, and the overflow id.
const CALLERS: &[(u32, u32)] = &[(0, 0), (1000, 1000), (1001, 2000), (65534, 65534)];

fn node() -> impl Strategy<Value = Node> {
    prop_oneof![
        4 => Just(Node::Root),
        6 => (0usize..64).prop_map(Node::Known),
        1 => prop_oneof![
            Just(0u64),
            Just(2u64),
            Just(u64::MAX),
            Just(1u64 << 32),
            any::<u64>()
        ]
        .prop_map(Node::Raw),
    ]
}

fn fh() -> impl Strategy<Value = Fh> {
    prop_oneof![
        6 => (0usize..64).prop_map(Fh::Known),
        1 => prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()].prop_map(Fh::Raw),
    ]
}

fn name() -> impl Strategy<Value = Name> {
    prop_oneof![
        8 => select(vec![&b"a"[..], b"b", b"c", b"d", b"sub"]).prop_map(Name::Pool),
        1 => select(
            vec![
                &b""[..],
                b".",
                b"..",
                b"a/b",
                b"/",
                b"\xff\xfe",
                b" ",
                b"user.lanefs.stats",
            ]
        )
        .prop_map(Name::Pool),
        1 => (Just(b'n'), select(&[254usize, 255, 256, 4096][..]))
            .prop_map(|(c, n)| Name::Repeat(c, n)),
    ]
}

fn xattr_name() -> impl Strategy<Value = Name> {
    prop_oneof![
        6 => select(vec![&b"user.a"[..], b"user.b", b"trusted.t"]).prop_map(Name::Pool),
        2 => select(
            vec![
                &b""[..],
                b"user.",
                b"user",
                b"foo.bar",
                b"security.capability",
                b"security.selinux",
                b"system.posix_acl_access",
                b"system.posix_acl_default",
                b"system.nfs4_acl",
                b"user.lanefs.stats",
                b"user.lanefs.sync",
                b"trusted.",
            ]
        )
        .prop_map(Name::Pool),
        1 => (Just(b'u'), select(&[255usize, 256, 4096][..]))
            .prop_map(|(c, n)| Name::Repeat(c, n)),
    ]
}

fn data() -> impl Strategy<Value = Data> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..48).prop_map(Data::Bytes),
        1 => (
            any::<u8>(),
            select(
                &[
                    4095usize,
                    4096,
                    4097,
                    65535,
                    65536,
                    65537,
                    MAX_WRITE_BYTES as usize,
                    MAX_WRITE_BYTES as usize + 1,
                ][..]
            )
        )
            .prop_map(|(c, n)| Data::Run(c, n)),
    ]
}

fn big_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..70_000,
        2 => select(
            &[
                0u64,
                1,
                4095,
                4096,
                1 << 20,
                1 << 32,
                1 << 40,
                (1 << 43) - 1,
                1 << 43,
                i64::MAX as u64 - 4096,
                i64::MAX as u64 - 1,
                i64::MAX as u64,
                1 << 63,
                u64::MAX - 4096,
                u64::MAX - 1,
                u64::MAX,
            ][..]
        ),
        1 => any::<u64>(),
    ]
}

fn big_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 0u32..5000,
        2 => select(
            &[
                0u32,
                1,
                4096,
                65536,
                65537,
                MAX_WRITE_BYTES - 1,
                MAX_WRITE_BYTES,
                MAX_WRITE_BYTES + 1,
                999_999_999,
                1_000_000_000,
                i32::MAX as u32,
                u32::MAX,
            ][..]
        ),
        1 => any::<u32>(),
    ]
}

fn flags() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 0u32..16,
        3 => 0u32..(1 << 12),
        2 => select(
            &[
                libc::O_RDONLY as u32,
                libc::O_WRONLY as u32,
                libc::O_RDWR as u32,
                (libc::O_RDWR | libc::O_TRUNC) as u32,
                (libc::O_WRONLY | libc::O_APPEND) as u32,
                (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u32,
                libc::O_ACCMODE as u32,
                (libc::O_RDONLY | libc::O_DIRECTORY) as u32,
                (libc::O_RDWR | libc::O_NOATIME) as u32,
                (libc::O_RDWR | libc::O_DIRECT) as u32,
                0x20 | 0x40 | 0x01, // exec-open style bits
            ][..]
        ),
        1 => any::<u32>(),
    ]
}

fn mode() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => (select(&[libc::S_IFREG, libc::S_IFDIR, libc::S_IFLNK, libc::S_IFIFO,
                        libc::S_IFCHR, libc::S_IFBLK, libc::S_IFSOCK, 0, 0o170000][..]),
              0u32..0o10000)
            .prop_map(|(t, p)| t | p),
        1 => any::<u32>(),
    ]
}

fn req() -> impl Strategy<Value = Req> {
    let opcode = prop_oneof![3 => select(OPCODES), 3 => select(MAKERS)];
    (
        (opcode, node(), node(), fh(), name(), name(), xattr_name()),
        (big_u64(), big_u64(), big_u32(), flags(), flags(), mode()),
        (
            data(),
            prop_oneof![3 => Just(0usize), 2 => 0..CALLERS.len()],
            big_u64(),
        ),
    )
        .prop_map(
            |(
                (opcode, node, node2, fh, name, name2, xname),
                (off, len, size, flags, flags2, mode),
                (data, who, nlookup),
            )| Req {
                opcode,
                node,
                node2,
                fh,
                name,
                name2,
                xname,
                off,
                len,
                size,
                flags,
                flags2,
                mode,
                data,
                who,
                nlookup,
            },
        )
}

/// A directory's entries in listing order: name and inode.
type Listing = Vec<(Vec<u8>, u64)>;

/// What a handle serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    Dir,
    Read,
    Write,
    ReadWrite,
}

impl Use {
    fn of_flags(flags: u32) -> Use {
        match flags as i32 & libc::O_ACCMODE {
            libc::O_RDONLY => Use::Read,
            libc::O_WRONLY => Use::Write,
            _ => Use::ReadWrite,
        }
    }

    fn serves(self, want: Use) -> bool {
        self == want || (self == Use::ReadWrite && want != Use::Dir)
    }
}

/// What the "kernel" side of the test holds: node ids it was given (with
/// their lookup counts) and handles it was given.
struct Kernel {
    handler: std::sync::Arc<Handler>,
    session: Session,
    /// Every node id an entry reply named, in order of first sight.
    known: Vec<u64>,
    /// Lookup references held, per node id.
    held: HashMap<u64, u64>,
    /// Every handle an OPEN/OPENDIR/CREATE/TMPFILE gave, and whether it
    /// is still open (not yet released) and a directory handle.
    handles: Vec<(u64, bool, Use)>,
    out: ReplyBuf,
    unique: u64,
    pid: u32,
}

/// Open flags: mostly read-write (so that WRITE and FALLOCATE find a
/// handle), else as drawn.
fn open_flags(r: &Req) -> u32 {
    if !r.size.is_multiple_of(4) {
        (r.flags & !(libc::O_ACCMODE as u32)) | libc::O_RDWR as u32
    } else {
        r.flags
    }
}

fn body_of<T: Pod>(v: &T) -> Vec<u8> {
    v.as_bytes().to_vec()
}

fn cstr(b: &[u8]) -> Vec<u8> {
    // A name ends at the first NUL in the kernel's buffer.
    let mut v: Vec<u8> = b.iter().copied().filter(|&c| c != 0).collect();
    v.push(0);
    v
}

impl Kernel {
    /// A fresh engine and handler; `variant`'s bits pick the writeback
    /// cache, `default_permissions`, no listing cache, no negative
    /// entries, `sync`, and `allow_root` for uid 1000.
    fn new(variant: u8) -> Kernel {
        Kernel::with_fs(Fs::new_in_memory(), variant)
    }

    /// As [`Kernel::new`], over `fs`.
    fn with_fs(fs: Fs, variant: u8) -> Kernel {
        let bit = |n: u8| variant & (1 << n) != 0;
        let writeback = bit(0);
        let mut config = HandlerConfig {
            default_permissions: bit(1),
            sync_writes: bit(4),
            sync_dir_changes: bit(4),
            ..Default::default()
        };
        config.cache.cache_dir = !bit(2);
        if bit(3) {
            config.cache.negative_ttl = std::time::Duration::ZERO;
        }
        let handler = std::sync::Arc::new(Handler::new(fs, config));
        handler.set_writeback(writeback);
        let session = Session {
            minor: KERNEL_MINOR_VERSION,
            flags: WANTED_INIT_FLAGS | if writeback { FUSE_WRITEBACK_CACHE } else { 0 },
            uring: false,
            writeback,
            max_write: MAX_WRITE_BYTES,
            deny_others_except: bit(5).then_some(1000),
            transport: "dev",
            threads: 1,
        };
        Kernel {
            handler,
            session,
            known: vec![ROOT_ID],
            held: HashMap::new(),
            handles: Vec::new(),
            out: ReplyBuf::default(),
            unique: 0,
            pid: std::process::id(),
        }
    }

    /// Another "kernel" thread on the same handler: its own view of what
    /// it was given (node ids, references, handles), as each FUSE request
    /// carries only what its own caller holds.
    fn sibling(&self) -> Kernel {
        Kernel {
            handler: self.handler.clone(),
            session: self.session.clone(),
            known: vec![ROOT_ID],
            held: HashMap::new(),
            handles: Vec::new(),
            out: ReplyBuf::default(),
            unique: 1 << 40,
            pid: self.pid,
        }
    }

    fn node(&self, n: Node) -> u64 {
        match n {
            Node::Root => ROOT_ID,
            Node::Known(i) => self.known[i % self.known.len()],
            Node::Raw(v) => v,
        }
    }

    fn fh(&self, f: Fh, want: Use) -> u64 {
        match f {
            Fh::Known(i) => {
                // Mostly an open handle of the right use; else any handle
                // the sequence was given (released ones too).
                let good: Vec<u64> = self
                    .handles
                    .iter()
                    .filter(|h| h.1 && h.2.serves(want))
                    .map(|h| h.0)
                    .collect();
                if i < 48 && !good.is_empty() {
                    good[i % good.len()]
                } else if !self.handles.is_empty() {
                    self.handles[i % self.handles.len()].0
                } else {
                    i as u64
                }
            }
            Fh::Raw(v) => v,
        }
    }

    /// Build one request's message.
    fn encode(&self, r: &Req) -> (InHeader, Vec<u8>) {
        let rename = matches!(r.opcode, FUSE_RENAME | FUSE_RENAME2);
        // Renames mostly within and between the root and a known node,
        // where the names the sequence made are.
        let nodeid = if rename && !r.flags2.is_multiple_of(3) {
            ROOT_ID
        } else {
            self.node(r.node)
        };
        let newdir = if rename && !r.len.is_multiple_of(3) {
            ROOT_ID
        } else {
            self.node(r.node2)
        };
        let name = cstr(&r.name.bytes());
        let name2 = cstr(&r.name2.bytes());
        let xname = cstr(&r.xname.bytes());
        let data = r.data.bytes();
        let want = match r.opcode {
            FUSE_READDIR | FUSE_READDIRPLUS | FUSE_RELEASEDIR | FUSE_FSYNCDIR => Use::Dir,
            FUSE_READ => Use::Read,
            FUSE_WRITE | FUSE_FALLOCATE | FUSE_SETATTR => Use::Write,
            _ => Use::ReadWrite,
        };
        let fh = self.fh(r.fh, want);
        let mut b = Vec::new();
        match r.opcode {
            FUSE_LOOKUP | FUSE_UNLINK | FUSE_RMDIR => b = name,
            FUSE_FORGET => b = body_of(&ForgetIn { nlookup: r.nlookup }),
            FUSE_BATCH_FORGET => {
                let n = (r.size % 5) as usize;
                b = body_of(&BatchForgetIn {
                    count: n as u32,
                    dummy: 0,
                });
                for i in 0..n {
                    let id = if i == 0 {
                        nodeid
                    } else {
                        self.node(Node::Known(i.wrapping_add(r.off as usize)))
                    };
                    b.extend(body_of(&ForgetOne {
                        nodeid: id,
                        nlookup: r.nlookup >> (i * 8),
                    }));
                }
            }
            FUSE_GETATTR => {
                b = body_of(&GetattrIn {
                    getattr_flags: r.flags2,
                    dummy: 0,
                    fh,
                })
            }
            FUSE_STATX => {
                b = body_of(&StatxIn {
                    getattr_flags: r.flags2,
                    reserved: 0,
                    fh,
                    sx_flags: r.flags,
                    sx_mask: r.size,
                })
            }
            FUSE_SETATTR => {
                // Every valid-bit combination, extreme values.
                b = body_of(&SetattrIn {
                    valid: r.flags ^ (r.flags2 << 5),
                    padding: 0,
                    fh,
                    size: r.len,
                    lock_owner: 0,
                    atime: r.off,
                    mtime: r.len.rotate_left(7),
                    ctime: r.nlookup,
                    atimensec: r.size,
                    mtimensec: r.size.rotate_left(3),
                    ctimensec: r.flags2,
                    mode: r.mode,
                    unused4: 0,
                    uid: if r.flags & 0x100 != 0 {
                        u32::MAX
                    } else {
                        CALLERS[(r.flags2 as usize) % CALLERS.len()].0
                    },
                    gid: if r.flags & 0x200 != 0 {
                        u32::MAX
                    } else {
                        CALLERS[(r.size as usize) % CALLERS.len()].1
                    },
                    unused5: 0,
                })
            }
            FUSE_READLINK | FUSE_STATFS | FUSE_DESTROY | FUSE_SYNCFS => {}
            FUSE_SYMLINK => {
                b = name;
                b.extend(cstr(&data));
            }
            FUSE_MKNOD => {
                b = body_of(&MknodIn {
                    mode: r.mode,
                    rdev: r.size,
                    umask: r.flags2 & 0o777,
                    padding: 0,
                });
                b.extend(name);
            }
            FUSE_MKDIR => {
                b = body_of(&MkdirIn {
                    mode: r.mode,
                    umask: r.flags2 & 0o7777,
                });
                b.extend(name);
            }
            FUSE_RENAME => {
                b = body_of(&RenameIn { newdir });
                b.extend(name);
                b.extend(name2);
            }
            FUSE_RENAME2 => {
                b = body_of(&Rename2In {
                    newdir,
                    flags: if r.size & 1 == 0 {
                        r.flags % 8
                    } else {
                        r.flags
                    },
                    padding: 0,
                });
                b.extend(name);
                b.extend(name2);
            }
            FUSE_LINK => {
                b = body_of(&LinkIn {
                    oldnodeid: self.node(r.node2),
                });
                b.extend(name);
            }
            FUSE_OPEN | FUSE_OPENDIR => {
                b = body_of(&OpenIn {
                    flags: open_flags(r),
                    open_flags: r.flags2,
                })
            }
            FUSE_CREATE | FUSE_TMPFILE => {
                b = body_of(&CreateIn {
                    flags: open_flags(r),
                    mode: r.mode,
                    umask: r.flags2 & 0o7777,
                    open_flags: r.flags2,
                });
                if r.opcode == FUSE_CREATE {
                    b.extend(name);
                } else if r.size & 1 == 0 {
                    b.extend(b"/\0");
                }
            }
            FUSE_READ | FUSE_READDIR | FUSE_READDIRPLUS => {
                b = body_of(&ReadIn {
                    fh,
                    offset: r.off,
                    size: r.size,
                    read_flags: r.flags2,
                    lock_owner: 0,
                    flags: r.flags,
                    padding: 0,
                })
            }
            FUSE_WRITE => {
                b = body_of(&WriteIn {
                    fh,
                    offset: r.off,
                    size: data.len() as u32,
                    write_flags: r.flags2 & 7,
                    lock_owner: 0,
                    flags: r.flags,
                    padding: 0,
                });
                b.extend(&data);
            }
            FUSE_RELEASE | FUSE_RELEASEDIR => {
                b = body_of(&ReleaseIn {
                    fh,
                    flags: r.flags,
                    release_flags: r.flags2,
                    lock_owner: r.off,
                })
            }
            FUSE_FSYNC | FUSE_FSYNCDIR => {
                b = body_of(&FsyncIn {
                    fh,
                    fsync_flags: r.flags,
                    padding: 0,
                })
            }
            FUSE_SETXATTR => {
                b = body_of(&SetxattrInCompat {
                    size: data.len() as u32,
                    flags: if r.size & 1 == 0 {
                        r.flags % 4
                    } else {
                        r.flags
                    },
                });
                b.extend(xname);
                b.extend(&data);
            }
            FUSE_GETXATTR => {
                b = body_of(&GetxattrIn {
                    size: if r.flags2 & 1 == 0 {
                        r.size % 70
                    } else {
                        r.size
                    },
                    padding: 0,
                });
                b.extend(xname);
            }
            FUSE_LISTXATTR => {
                b = body_of(&GetxattrIn {
                    size: if r.flags2 & 1 == 0 {
                        r.size % 70
                    } else {
                        r.size
                    },
                    padding: 0,
                })
            }
            FUSE_REMOVEXATTR => b = xname,
            FUSE_FLUSH => {
                b = body_of(&FlushIn {
                    fh,
                    unused: 0,
                    padding: 0,
                    lock_owner: r.off,
                })
            }
            FUSE_INIT => {
                b = body_of(&InitIn {
                    major: 7,
                    minor: r.size,
                    max_readahead: r.flags,
                    flags: r.flags2,
                    flags2: r.mode,
                    unused: [0; 11],
                })
            }
            FUSE_ACCESS => {
                b = body_of(&AccessIn {
                    mask: r.flags,
                    padding: 0,
                })
            }
            FUSE_INTERRUPT => b = body_of(&InterruptIn { unique: r.off }),
            FUSE_FALLOCATE => {
                b = body_of(&FallocateIn {
                    fh,
                    offset: r.off,
                    length: r.len,
                    mode: match r.size % 4 {
                        0 => r.flags % 128,
                        1 => r.flags,
                        // The modes Linux knows, alone and combined.
                        _ => [0, 1, 3, 0x10, 0x11, 0x08, 0x20, 0x21, 0x40, 0x02]
                            [r.flags as usize % 10],
                    },
                    padding: 0,
                })
            }
            FUSE_IOCTL => {
                // The inode-flag commands with the kernel's sizes, or any
                // command and sizes; the flag word or struct from `data`.
                let cmds = [0x8008_6601u32, 0x4008_6602, 0x801c_581f, 0x401c_5820];
                let (cmd, in_size, out_size) = match r.size % 3 {
                    0 => {
                        let c = cmds[r.flags2 as usize % 4];
                        let n = if c & 0xffff == 0x6601 || c & 0xffff == 0x6602 {
                            4
                        } else {
                            28
                        };
                        let (i, o) = if c >> 30 == 1 { (n, 0) } else { (0, n) };
                        (c, i, o)
                    }
                    1 => (
                        cmds[r.flags2 as usize % 4],
                        r.len as u32 % 64,
                        r.off as u32 % 64,
                    ),
                    _ => (r.flags2, r.len as u32 % 64, r.off as u32 % 64),
                };
                b = body_of(&IoctlIn {
                    fh,
                    flags: r.flags & FUSE_IOCTL_DIR,
                    cmd,
                    arg: r.off,
                    in_size,
                    out_size,
                });
                let mut input = data;
                input.resize(in_size as usize, 0);
                b.extend(input);
            }
            _ => {
                // Unknown or unimplemented: some bytes.
                b = data;
            }
        }
        let (uid, gid) = CALLERS[r.who];
        let h = InHeader {
            len: (size_of::<InHeader>() + b.len()) as u32,
            opcode: r.opcode,
            unique: self.unique + 1,
            nodeid,
            uid,
            gid,
            pid: if r.who == 0 && r.flags & 1 == 0 {
                0
            } else {
                self.pid
            },
            total_extlen: 0,
            padding: 0,
        };
        (h, b)
    }

    /// Serve one message as a worker does (`op_arg`: the ring shape's
    /// separate argument, `None` for `/dev/fuse`) and check the reply.
    /// `well_formed`: `encode` built the body, so a WRITE's reply must
    /// report exactly what it carried (a mangled body may not).
    fn serve(
        &mut self,
        msg: &[u8],
        op_arg: Option<&[u8]>,
        well_formed: bool,
    ) -> Result<Reply, String> {
        self.unique += 1;
        let (h, body) = match op_arg {
            None => match wire::split_message(msg) {
                Ok(x) => x,
                Err(_) => return Ok(Reply::Send(-libc::EINVAL)),
            },
            Some(_) => {
                let h = InHeader::read_from(msg).ok_or("short header")?;
                (h, &msg[size_of::<InHeader>().min(msg.len())..])
            }
        };
        let before = panics();
        let r = serve_raw(
            &self.handler,
            &self.session,
            &h,
            op_arg,
            body,
            &mut self.out,
        );
        if panics() != before {
            return Err(format!(
                "opcode {} panicked: {}",
                h.opcode,
                LAST_PANIC.with(|l| l.borrow().clone())
            ));
        }
        if let Reply::Send(e) = r {
            OUTCOMES.with(|o| *o.borrow_mut().entry((h.opcode, e)).or_default() += 1);
        }
        let Reply::Send(err) = r else {
            if !matches!(h.opcode, FUSE_FORGET | FUSE_BATCH_FORGET) {
                return Err(format!("opcode {} got no reply", h.opcode));
            }
            return Ok(r);
        };
        if matches!(h.opcode, FUSE_FORGET | FUSE_BATCH_FORGET) {
            // The kernel takes no reply to a FORGET, malformed or not.
            return Err(format!("FORGET (opcode {}) answered {err}", h.opcode));
        }
        if err > 0 || err <= -512 {
            return Err(format!("opcode {}: error {err} out of range", h.opcode));
        }
        if err == -libc::EIO {
            return Err(format!("opcode {}: EIO", h.opcode));
        }
        let unique = h.unique;
        let whole = self.out.finish(unique, err).to_vec();
        let oh = OutHeader::read_from(&whole).ok_or("no out header")?;
        if oh.len as usize != whole.len() || oh.error != err || oh.unique != unique {
            return Err(format!("opcode {}: bad out header {oh:?}", h.opcode));
        }
        let p = &whole[size_of::<OutHeader>()..];
        if err != 0 {
            if !p.is_empty() {
                return Err(format!("opcode {}: error {err} with payload", h.opcode));
            }
            return Ok(r);
        }
        self.check_payload(&h, body, op_arg, p, well_formed)?;
        Ok(r)
    }

    fn check_payload(
        &mut self,
        h: &InHeader,
        body: &[u8],
        op_arg: Option<&[u8]>,
        p: &[u8],
        well_formed: bool,
    ) -> Result<(), String> {
        let arg = op_arg.unwrap_or(body);
        let fixed = |n: usize| -> Result<(), String> {
            if p.len() != n {
                return Err(format!(
                    "opcode {}: reply {} bytes, protocol says {n}",
                    h.opcode,
                    p.len()
                ));
            }
            Ok(())
        };
        let at_most = |n: usize| -> Result<(), String> {
            if p.len() > n {
                return Err(format!(
                    "opcode {}: reply {} bytes, asked for at most {n}",
                    h.opcode,
                    p.len()
                ));
            }
            Ok(())
        };
        let entry = size_of::<EntryOut>();
        match h.opcode {
            FUSE_LOOKUP | FUSE_MKNOD | FUSE_MKDIR | FUSE_SYMLINK | FUSE_LINK => {
                fixed(entry)?;
                let e = EntryOut::read_from(p).unwrap();
                if e.nodeid == 0 && h.opcode != FUSE_LOOKUP {
                    return Err(format!("opcode {}: entry with nodeid 0", h.opcode));
                }
                if e.nodeid != 0 && e.attr.ino != e.nodeid {
                    return Err(format!(
                        "opcode {}: nodeid {} ino {}",
                        h.opcode, e.nodeid, e.attr.ino
                    ));
                }
                if e.nodeid != 0 {
                    sane_attr(&e.attr, h.opcode)?;
                }
                self.got_entry(e.nodeid);
            }
            FUSE_CREATE | FUSE_TMPFILE => {
                fixed(entry + size_of::<OpenOut>())?;
                let e = EntryOut::read_from(p).unwrap();
                if e.nodeid == 0 || e.attr.ino != e.nodeid {
                    return Err(format!("opcode {}: bad entry {e:?}", h.opcode));
                }
                sane_attr(&e.attr, h.opcode)?;
                if e.attr.mode & libc::S_IFMT != libc::S_IFREG {
                    return Err(format!("opcode {}: made a {:o}", h.opcode, e.attr.mode));
                }
                self.got_entry(e.nodeid);
                let o = OpenOut::read_from(&p[entry..]).unwrap();
                let flags = CreateIn::read_from(arg).unwrap().flags;
                self.handles.push((o.fh, true, Use::of_flags(flags)));
            }
            FUSE_IOCTL => {
                // `fuse_ioctl_out` (result 0, no retry), then at most what
                // the kernel said fits.
                let a = IoctlIn::read_from(arg).unwrap();
                let head = size_of::<IoctlOut>();
                if p.len() < head || p.len() > head + a.out_size as usize {
                    return Err(format!("IOCTL: reply {} bytes for {a:?}", p.len()));
                }
                let o = IoctlOut::read_from(p).unwrap();
                if o.result != 0 || o.flags != 0 {
                    return Err(format!("IOCTL: {o:?}"));
                }
            }
            FUSE_GETATTR | FUSE_SETATTR => {
                fixed(size_of::<AttrOut>())?;
                sane_attr(&AttrOut::read_from(p).unwrap().attr, h.opcode)?;
            }
            FUSE_STATX => {
                fixed(size_of::<StatxOut>())?;
                let x = StatxOut::read_from(p).unwrap().stat;
                let times = [x.atime, x.btime, x.ctime, x.mtime];
                if times.iter().any(|t| t.tv_nsec >= 1_000_000_000)
                    || x.mode as u32 & libc::S_IFMT == 0
                {
                    return Err(format!("STATX: insane {x:?}"));
                }
            }
            FUSE_OPEN | FUSE_OPENDIR => {
                fixed(size_of::<OpenOut>())?;
                let o = OpenOut::read_from(p).unwrap();
                let u = match h.opcode {
                    FUSE_OPENDIR => Use::Dir,
                    _ => Use::of_flags(OpenIn::read_from(arg).unwrap().flags),
                };
                self.handles.push((o.fh, true, u));
            }
            FUSE_WRITE => {
                fixed(size_of::<WriteOut>())?;
                let w = WriteOut::read_from(p).unwrap();
                let a = WriteIn::read_from(arg).unwrap();
                // Short only where the file's size limit cuts it, as
                // Linux's `generic_write_check_limits` cuts a write.
                let room = lanefs_core::FILE_SIZE_MAX.saturating_sub(a.offset);
                let want = (a.size as u64).min(room);
                if well_formed && w.size as u64 != want {
                    return Err(format!(
                        "WRITE of {} at {} reported {}",
                        a.size, a.offset, w.size
                    ));
                }
            }
            FUSE_STATFS => {
                fixed(size_of::<Kstatfs>())?;
                let st = Kstatfs::read_from(p).unwrap();
                if st.bfree > st.blocks
                    || st.bavail > st.bfree
                    || st.ffree > st.files
                    || st.bsize == 0
                    || st.namelen != 255
                {
                    return Err(format!("STATFS: insane {st:?}"));
                }
            }
            FUSE_READ => {
                let a = ReadIn::read_from(arg).unwrap();
                at_most(a.size.min(MAX_WRITE_BYTES) as usize)?;
            }
            FUSE_READDIR => {
                let a = ReadIn::read_from(arg).unwrap();
                at_most(a.size as usize)?;
                parse_dirents(p, size_of::<Dirent>(), |_| {})?;
                if a.offset == 0 && !p.is_empty() {
                    // A listing from the start begins with `.`.
                    let d = Dirent::read_from(p).unwrap();
                    if &p[size_of::<Dirent>()..size_of::<Dirent>() + d.namelen as usize] != b"." {
                        return Err("READDIR from 0 does not start with .".into());
                    }
                }
            }
            FUSE_READDIRPLUS => {
                let a = ReadIn::read_from(arg).unwrap();
                at_most(a.size as usize)?;
                let mut got = Vec::new();
                parse_dirents(p, size_of::<Dirent>() + entry, |rec| {
                    got.push(EntryOut::read_from(rec).unwrap())
                })?;
                for e in got {
                    sane_attr(&e.attr, h.opcode)?;
                    if e.nodeid != 0 {
                        if e.attr.ino != e.nodeid {
                            return Err(format!(
                                "READDIRPLUS: nodeid {} ino {}",
                                e.nodeid, e.attr.ino
                            ));
                        }
                        self.got_entry(e.nodeid);
                    }
                }
            }
            FUSE_GETXATTR | FUSE_LISTXATTR => {
                let size = GetxattrIn::read_from(arg).unwrap().size;
                if size == 0 {
                    fixed(size_of::<GetxattrOut>())?;
                } else {
                    at_most(size as usize)?;
                    if h.opcode == FUSE_LISTXATTR && p.last().is_some_and(|&c| c != 0) {
                        return Err(format!("LISTXATTR: {p:?} not NUL-terminated names"));
                    }
                }
            }
            FUSE_READLINK => {
                at_most(libc::PATH_MAX as usize)?;
                if p.is_empty() || p.contains(&0) {
                    return Err(format!("READLINK: target {p:?}"));
                }
            }
            FUSE_FORGET | FUSE_BATCH_FORGET => unreachable!(),
            _ => fixed(0)?,
        }
        if matches!(h.opcode, FUSE_RELEASE | FUSE_RELEASEDIR) {
            let fh = ReleaseIn::read_from(arg).unwrap().fh;
            for x in self.handles.iter_mut().filter(|x| x.0 == fh) {
                x.1 = false;
            }
        }
        Ok(())
    }

    fn got_entry(&mut self, nodeid: u64) {
        if nodeid == 0 {
            return;
        }
        if !self.known.contains(&nodeid) {
            self.known.push(nodeid);
        }
        *self.held.entry(nodeid).or_default() += 1;
    }

    /// Apply a FORGET the way the model sees it.
    fn forgot(&mut self, nodeid: u64, n: u64) {
        let held = self.held.entry(nodeid).or_default();
        *held = held.saturating_sub(n);
    }

    fn run(&mut self, r: &Req) -> Result<(), String> {
        let (h, b) = self.encode(r);
        let mut msg = h.as_bytes().to_vec();
        msg.extend(&b);
        let reply = self.serve(&msg, None, true)?;
        if reply == Reply::None {
            if h.opcode == FUSE_FORGET {
                self.forgot(h.nodeid, r.nlookup);
            } else {
                let n = BatchForgetIn::read_from(&b).unwrap().count as usize;
                for f in wire::forget_items(&b[size_of::<BatchForgetIn>()..]).take(n) {
                    self.forgot(f.nodeid, f.nlookup);
                }
            }
        }
        Ok(())
    }

    /// One request as root, built from `r` with `body`; its reply and
    /// payload.
    fn request(
        &mut self,
        opcode: u32,
        nodeid: u64,
        body: &[u8],
    ) -> Result<(Reply, Vec<u8>), String> {
        let h = InHeader {
            len: (size_of::<InHeader>() + body.len()) as u32,
            opcode,
            unique: self.unique + 1,
            nodeid,
            ..Default::default()
        };
        let mut msg = h.as_bytes().to_vec();
        msg.extend(body);
        let r = self.serve(&msg, None, true)?;
        Ok((r, self.out.payload().to_vec()))
    }

    /// List directory `dir` with READDIR (or READDIRPLUS) in buffers of
    /// `chunk` bytes, each continuing at the last entry's offset. `None`
    /// when it is no directory we can open.
    fn list(&mut self, dir: u64, chunk: u32, plus: bool) -> Result<Option<Listing>, String> {
        let (r, p) = self.request(FUSE_OPENDIR, dir, &body_of(&OpenIn::default()))?;
        if r != Reply::Send(0) {
            return Ok(None);
        }
        let fh = OpenOut::read_from(&p).unwrap().fh;
        let head = size_of::<Dirent>() + if plus { size_of::<EntryOut>() } else { 0 };
        let mut names = Vec::new();
        let mut off = 0u64;
        for _ in 0..10_000 {
            let arg = ReadIn {
                fh,
                offset: off,
                size: chunk,
                ..Default::default()
            };
            let op = if plus { FUSE_READDIRPLUS } else { FUSE_READDIR };
            let (r, p) = self.request(op, dir, &body_of(&arg))?;
            if r != Reply::Send(0) {
                return Err(format!("listing {dir} at {off}: {r:?}"));
            }
            if p.is_empty() {
                let (r, _) = self.request(
                    FUSE_RELEASEDIR,
                    dir,
                    &body_of(&ReleaseIn {
                        fh,
                        ..Default::default()
                    }),
                )?;
                if r != Reply::Send(0) {
                    return Err(format!("RELEASEDIR: {r:?}"));
                }
                return Ok(Some(names));
            }
            let mut rest = &p[..];
            while !rest.is_empty() {
                let d = Dirent::read_from(&rest[head - size_of::<Dirent>()..]).unwrap();
                names.push((rest[head..head + d.namelen as usize].to_vec(), d.ino));
                off = d.off;
                rest = &rest[(head + d.namelen as usize).next_multiple_of(8)..];
            }
        }
        Err(format!("listing {dir} never ends (10,000 replies)"))
    }

    /// Every directory the sequence knows, listed in small buffers and in
    /// one large one, with and without attributes: the same entries in
    /// the same order, each name once, `.` and `..` among them.
    fn check_listings(&mut self, chunk: u32) -> Result<(), String> {
        let dirs: Vec<u64> = self.known.iter().copied().take(16).collect();
        for dir in dirs {
            let Some(whole) = self.list(dir, 1 << 20, false)? else {
                continue;
            };
            let mut seen = std::collections::HashSet::new();
            for (n, _) in &whole {
                if !seen.insert(n.clone()) {
                    return Err(format!(
                        "dir {dir}: {:?} listed twice",
                        String::from_utf8_lossy(n)
                    ));
                }
            }
            if !seen.contains(&b"."[..]) || !seen.contains(&b".."[..]) {
                return Err(format!("dir {dir}: no . or .. in {whole:?}"));
            }
            for (plus, size) in [(false, chunk), (true, chunk.max(4096)), (true, 1 << 20)] {
                let part = self.list(dir, size, plus)?.unwrap_or_default();
                if part != whole {
                    return Err(format!(
                        "dir {dir}: listing in {size}-byte buffers (plus {plus}) {part:?}, whole {whole:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn check(&self, when: &str) -> Result<(), String> {
        self.handler
            .fs()
            .check()
            .map_err(|e| format!("engine check {when}: {e:?}"))
    }

    /// What the kernel does at unmount: release every handle, forget
    /// every reference; then the engine must be consistent and, unless a
    /// FORGET gave back more than was held, have freed every unlinked
    /// inode (which `check` reports as leaked otherwise).
    fn drain(&mut self) -> Result<(), String> {
        self.give_back()?;
        if self.handler.open_handles() != 0 {
            return Err(format!(
                "{} handles left after release",
                self.handler.open_handles()
            ));
        }
        self.check("after release and forget")
    }

    /// Release every handle this "kernel" holds and forget every
    /// reference it was given.
    fn give_back(&mut self) -> Result<(), String> {
        let open: Vec<(u64, bool)> = self
            .handles
            .iter()
            .filter(|h| h.1)
            .map(|h| (h.0, h.2 == Use::Dir))
            .collect();
        for (fh, dir) in open {
            let op = if dir { FUSE_RELEASEDIR } else { FUSE_RELEASE };
            let b = body_of(&ReleaseIn {
                fh,
                ..Default::default()
            });
            let (h, _) = self.encode(&Req {
                opcode: op,
                ..plain_req()
            });
            let mut msg = InHeader {
                len: (size_of::<InHeader>() + b.len()) as u32,
                ..h
            }
            .as_bytes()
            .to_vec();
            msg.extend(&b);
            match self.serve(&msg, None, true)? {
                Reply::Send(0) => {}
                other => return Err(format!("release of {fh} at the end: {other:?}")),
            }
        }
        let held: Vec<(u64, u64)> = self
            .held
            .iter()
            .filter(|x| *x.1 > 0)
            .map(|(a, b)| (*a, *b))
            .collect();
        let mut b = body_of(&BatchForgetIn {
            count: held.len() as u32,
            dummy: 0,
        });
        for (nodeid, nlookup) in &held {
            b.extend(body_of(&ForgetOne {
                nodeid: *nodeid,
                nlookup: *nlookup,
            }));
        }
        let h = InHeader {
            len: (size_of::<InHeader>() + b.len()) as u32,
            opcode: FUSE_BATCH_FORGET,
            unique: 0,
            ..Default::default()
        };
        let mut msg = h.as_bytes().to_vec();
        msg.extend(&b);
        self.serve(&msg, None, true)?;
        self.held.clear();
        Ok(())
    }
}

fn plain_req() -> Req {
    Req {
        opcode: FUSE_STATFS,
        node: Node::Root,
        node2: Node::Root,
        fh: Fh::Raw(0),
        name: Name::Pool(b"a"),
        name2: Name::Pool(b"b"),
        xname: Name::Pool(b"user.a"),
        off: 0,
        len: 0,
        size: 0,
        flags: 0,
        flags2: 0,
        mode: 0,
        data: Data::Bytes(Vec::new()),
        who: 0,
        nlookup: 0,
    }
}

/// Attributes the kernel would take as they are: a known file type,
/// nanoseconds below 10⁹, a directory with 0 (removed) or at least 2
/// links.
fn sane_attr(a: &Attr, opcode: u32) -> Result<(), String> {
    let t = a.mode & libc::S_IFMT;
    let known = [
        libc::S_IFREG,
        libc::S_IFDIR,
        libc::S_IFLNK,
        libc::S_IFCHR,
        libc::S_IFBLK,
        libc::S_IFIFO,
        libc::S_IFSOCK,
    ];
    if !known.contains(&t)
        || a.atimensec >= 1_000_000_000
        || a.mtimensec >= 1_000_000_000
        || a.ctimensec >= 1_000_000_000
        || (t == libc::S_IFDIR && a.nlink == 1)
        || a.ino == 0
        || a.blksize == 0
    {
        return Err(format!("opcode {opcode}: insane attributes {a:?}"));
    }
    Ok(())
}

/// Walk directory records (`head` bytes of fixed header, the last 24 of
/// which are a `fuse_dirent`), each padded to 8 bytes; `each` gets a
/// record's start.
fn parse_dirents(mut p: &[u8], head: usize, mut each: impl FnMut(&[u8])) -> Result<(), String> {
    while !p.is_empty() {
        if p.len() < head {
            return Err(format!("dirent record cut: {} bytes left", p.len()));
        }
        let d = Dirent::read_from(&p[head - size_of::<Dirent>()..]).unwrap();
        let rec = (head + d.namelen as usize).next_multiple_of(8);
        if d.namelen == 0 || d.namelen > 255 || rec > p.len() {
            return Err(format!("bad dirent {d:?} with {} bytes left", p.len()));
        }
        let name = &p[head..head + d.namelen as usize];
        if d.ino == 0 || d.typ == 0 || d.typ > 14 || name.contains(&b'/') || name.contains(&0) {
            return Err(format!("bad dirent {d:?} name {name:?}"));
        }
        each(p);
        p = &p[rec..];
    }
    Ok(())
}

/// A file open read-write and a directory open for listing, so that
/// every sequence has handles to aim at from its first request.
fn setup() -> Vec<Req> {
    let p = plain_req();
    vec![
        Req {
            opcode: FUSE_CREATE,
            name: Name::Pool(b"f0"),
            mode: libc::S_IFREG | 0o666,
            flags: libc::O_RDWR as u32,
            size: 1,
            ..p.clone()
        },
        Req {
            opcode: FUSE_MKDIR,
            name: Name::Pool(b"d0"),
            mode: 0o777,
            ..p.clone()
        },
        Req {
            opcode: FUSE_OPENDIR,
            ..p
        },
    ]
}

fn run_sequence(reqs: &[Req], variant: u8) -> Result<(), String> {
    run_sequence_on(Kernel::new(variant), reqs)
}

fn run_sequence_on(mut k: Kernel, reqs: &[Req]) -> Result<(), String> {
    for r in &setup() {
        k.run(r)?;
    }
    for (i, r) in reqs.iter().enumerate() {
        k.run(r).map_err(|e| format!("request {i} ({r:?}): {e}"))?;
    }
    let chunk = 320 + (reqs.len() as u32 * 97) % 4000;
    k.check_listings(chunk)?;
    k.check("after the sequence")?;
    k.drain()
}

/// What a run exercised: replies per opcode and errno (shown with
/// `--nocapture`).
fn print_outcomes(test: &str) {
    OUTCOMES.with(|o| {
        let o = o.borrow();
        let mut line = String::new();
        let mut last = None;
        for ((op, e), n) in o.iter() {
            if last != Some(*op) {
                line.push_str(&format!("\n  op {op}:"));
                last = Some(*op);
            }
            line.push_str(&format!(
                " {}={n}",
                if *e == 0 {
                    "ok".into()
                } else {
                    format!("{}", -e)
                }
            ));
        }
        eprintln!("{test}: replies by opcode and errno:{line}");
    });
}

/// A runner of `cases` cases that keeps no failure file.
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// The handler configuration a sequence runs under (`Kernel::new`).
fn variant() -> impl Strategy<Value = u8> {
    prop_oneof![2 => Just(0u8), 3 => 0u8..64]
}

/// Print the outcomes seen, then fail the test if the run failed.
fn finish(r: Result<(), impl std::fmt::Display>) {
    print_outcomes(module_path!());
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[test]
fn request_sequences_never_panic_and_answer_clear_errnos() {
    install_panic_counter();
    let strat = (proptest::collection::vec(req(), 1..64), variant());
    let r = runner(cases()).run(&strat, |(reqs, variant)| {
        run_sequence(&reqs, variant).map_err(TestCaseError::fail)
    });
    finish(r);
}

/// The same sequences over an engine on an image (an in-memory device of
/// 16 MiB, a small cache budget so that objects are evicted and read
/// back); after the engine is dropped the image must pass `fsck`.
#[test]
fn request_sequences_on_an_image() {
    use lanefs_image::{fsck_device, mkfs_device, ImageConfig, ImageStore, MemDevice};
    use std::sync::Arc;
    install_panic_counter();
    let strat = (proptest::collection::vec(req(), 1..64), variant());
    let mut runner = runner(cases().div_ceil(4));
    let r = runner.run(&strat, |(reqs, variant)| {
        let dev = Arc::new(MemDevice::new(16 << 20));
        mkfs_device(&*dev).map_err(|e| TestCaseError::fail(format!("mkfs: {e}")))?;
        let cfg = ImageConfig {
            commit_interval: None,
            cache_bytes: Some(64 << 10),
        };
        let store = ImageStore::open_device(dev.clone(), &cfg)
            .map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
        let fs = Fs::new(Arc::new(store), lanefs_core::FsConfig::default())
            .map_err(|e| TestCaseError::fail(format!("Fs::new: {e:?}")))?;
        run_sequence_on(Kernel::with_fs(fs, variant), &reqs).map_err(TestCaseError::fail)?;
        let report =
            fsck_device(dev, false).map_err(|e| TestCaseError::fail(format!("fsck: {e}")))?;
        if !report.clean {
            return Err(TestCaseError::fail(format!(
                "fsck: {:?} {:?}",
                report.problems, report.links
            )));
        }
        Ok(())
    });
    finish(r);
}

/// Two threads serving random sequences on one handler at once (as two
/// workers do), each with its own handles and references: no panic, no
/// hang (a watchdog fails the test after 120 s), clear errnos, and an
/// engine that passes `Fs::check()` after both have released and
/// forgotten everything. Fewer cases (a quarter): each takes two threads.
#[test]
fn concurrent_request_sequences() {
    install_panic_counter();
    let strat = (
        proptest::collection::vec(req(), 1..64),
        proptest::collection::vec(req(), 1..64),
        variant(),
    );
    let mut runner = runner(cases().div_ceil(4));
    let r = runner.run(&strat, |(a, b, variant)| {
        let mut k = Kernel::new(variant);
        for r in &setup() {
            k.run(r).map_err(TestCaseError::fail)?;
        }
        let mut k2 = k.sibling();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if done_rx
                .recv_timeout(std::time::Duration::from_secs(120))
                .is_err()
            {
                eprintln!("concurrent requests hung for 120 s");
                std::process::abort();
            }
        });
        // Both start together, so that their requests overlap.
        let start = std::sync::Barrier::new(2);
        let (ra, rb) = std::thread::scope(|sc| {
            let t = sc.spawn(|| -> Result<(), String> {
                start.wait();
                for r in &b {
                    k2.run(r)?;
                }
                Ok(())
            });
            let mut ra = Ok(());
            start.wait();
            for r in &a {
                if let Err(e) = k.run(r) {
                    ra = Err(e);
                    break;
                }
            }
            (
                ra,
                t.join().unwrap_or_else(|_| Err("thread panicked".into())),
            )
        });
        let _ = done_tx.send(());
        let _ = watchdog.join();
        ra.map_err(|e| TestCaseError::fail(format!("thread A: {e}")))?;
        rb.map_err(|e| TestCaseError::fail(format!("thread B: {e}")))?;
        k2.give_back()
            .map_err(|e| TestCaseError::fail(format!("give back B: {e}")))?;
        k.drain().map_err(TestCaseError::fail)
    });
    finish(r);
}

/// Random, truncated and mangled bodies of every opcode, on both shapes
/// (`/dev/fuse`: argument in the body; io_uring: argument apart), after a
/// few requests made something to aim at.
#[test]
fn malformed_bodies_never_panic() {
    install_panic_counter();
    let strat = (
        proptest::collection::vec(req(), 0..8),
        proptest::collection::vec(
            (
                req(),
                prop_oneof![Just(None), (0usize..200).prop_map(Some),],
                proptest::collection::vec(any::<u8>(), 0..160),
                0u8..4,
                any::<u32>(),
            ),
            1..24,
        ),
    );
    let r = runner(cases()).run(&strat, |(setup, mangled)| {
        let mut k = Kernel::new(0);
        for r in &setup {
            k.run(r).map_err(TestCaseError::fail)?;
        }
        for (r, cut, junk, how, len_field) in &mangled {
            let (h, good) = k.encode(r);
            let body: Vec<u8> = match how {
                // Truncated at a random point (or not at all).
                0 => good[..cut.unwrap_or(good.len()).min(good.len())].to_vec(),
                // Random bytes.
                1 => junk.clone(),
                // The good argument with its tail replaced.
                2 => {
                    let mut b = good.clone();
                    b.truncate(cut.unwrap_or(8).min(b.len()));
                    b.extend(junk);
                    b
                }
                // Good bytes, a header whose length lies.
                _ => good.clone(),
            };
            let mut hh = InHeader {
                len: (size_of::<InHeader>() + body.len()) as u32,
                ..h
            };
            if *how == 3 {
                hh.len = *len_field % (size_of::<InHeader>() as u32 + body.len() as u32 + 64);
            }
            let mut msg = hh.as_bytes().to_vec();
            msg.extend(&body);
            k.serve(&msg, None, false)
                .map_err(|e| TestCaseError::fail(format!("dev shape {r:?} how {how}: {e}")))?;
            // The ring shape: the fixed argument apart, the rest as payload.
            let split = cut.unwrap_or(0).min(body.len());
            let mut msg = hh.as_bytes().to_vec();
            msg.extend(&body[split..]);
            let arg = body[..split].to_vec();
            k.serve(&msg, Some(&arg), false)
                .map_err(|e| TestCaseError::fail(format!("ring shape {r:?}: {e}")))?;
        }
        k.check("after malformed requests")
            .map_err(TestCaseError::fail)?;
        k.drain().map_err(TestCaseError::fail)
    });
    finish(r);
}

/// One well-formed request from the root caller, served; its reply.
fn serve_one(k: &mut Kernel, r: Req) -> Result<Reply, String> {
    let (h, b) = k.encode(&r);
    let mut msg = h.as_bytes().to_vec();
    msg.extend(&b);
    k.serve(&msg, None, true)
}

/// Found by the fuzz test: MKNOD with the symlink type made a symlink
/// with an empty target (READLINK then answered an empty target). Linux
/// (`may_mknod`; tmpfs: `mknod(path, S_IFLNK | 0777)`) answers `EINVAL`,
/// as for any type it cannot make; a directory is `EPERM`.
#[test]
fn mknod_of_a_symlink_is_einval() {
    install_panic_counter();
    let mut k = Kernel::new(0);
    for (mode, want) in [
        (libc::S_IFLNK | 0o777, -libc::EINVAL),
        (libc::S_IFDIR | 0o777, -libc::EPERM),
        (0o170000 | 0o777, -libc::EINVAL),
        (0o110000 | 0o777, -libc::EINVAL),
    ] {
        let r = serve_one(
            &mut k,
            Req {
                opcode: FUSE_MKNOD,
                mode,
                ..plain_req()
            },
        );
        assert_eq!(r, Ok(Reply::Send(want)), "mknod mode {mode:o}");
    }
    k.check("after refused mknods").unwrap();
}

/// Found by the fuzz test: a FORGET or BATCH_FORGET too short for its
/// argument (or for the items its count announces) was answered `EINVAL`;
/// they take no reply, malformed or not.
#[test]
fn malformed_forgets_take_no_reply() {
    install_panic_counter();
    let mut k = Kernel::new(0);
    let bodies: [(u32, Vec<u8>); 3] = [
        (FUSE_FORGET, vec![1, 2, 3]),
        (FUSE_BATCH_FORGET, vec![]),
        (
            FUSE_BATCH_FORGET,
            body_of(&BatchForgetIn { count: 3, dummy: 0 }),
        ),
    ];
    for (opcode, b) in bodies {
        let h = InHeader {
            len: (size_of::<InHeader>() + b.len()) as u32,
            opcode,
            unique: 7,
            nodeid: ROOT_ID,
            ..Default::default()
        };
        let mut msg = h.as_bytes().to_vec();
        msg.extend(&b);
        assert_eq!(
            k.serve(&msg, None, false),
            Ok(Reply::None),
            "opcode {opcode}"
        );
        // The ring shape too (the argument apart, here empty).
        let r = serve_raw(&k.handler, &k.session, &h, Some(&[]), &b, &mut k.out);
        assert_eq!(r, Reply::None, "opcode {opcode} (ring shape)");
    }
}

/// Found by the fuzz test: OPENDIR of a regular file (which the kernel
/// never sends) gave a handle; now `ENOTDIR`, as `open(O_DIRECTORY)`.
#[test]
fn opendir_of_a_file_is_enotdir() {
    install_panic_counter();
    let mut k = Kernel::new(0);
    for r in &setup() {
        k.run(r).unwrap();
    }
    let file = k.known[1];
    let r = serve_one(
        &mut k,
        Req {
            opcode: FUSE_OPENDIR,
            node: Node::Raw(file),
            ..plain_req()
        },
    );
    assert_eq!(r, Ok(Reply::Send(-libc::ENOTDIR)));
    k.drain().unwrap();
}

/// A regular file `name` made in the root with MKNOD (one lookup
/// reference, the entry's), then unlinked: only that reference keeps it.
/// Its node id.
fn unlinked_file_held_once(k: &mut Kernel, name: &[u8]) -> u64 {
    let mut b = body_of(&MknodIn {
        mode: libc::S_IFREG | 0o644,
        ..Default::default()
    });
    b.extend(cstr(name));
    let (r, p) = k.request(FUSE_MKNOD, ROOT_ID, &b).unwrap();
    assert_eq!(r, Reply::Send(0));
    let file = EntryOut::read_from(&p).unwrap().nodeid;
    let (r, _) = k.request(FUSE_UNLINK, ROOT_ID, &cstr(name)).unwrap();
    assert_eq!(r, Reply::Send(0));
    file
}

fn getattr_of(k: &mut Kernel, ino: u64) -> Reply {
    k.request(FUSE_GETATTR, ino, &body_of(&GetattrIn::default()))
        .unwrap()
        .0
}

/// Found by the fuzz test: a BATCH_FORGET whose `count` announced more
/// items than the message holds was dropped whole, so the references
/// its items gave back were kept for the mount's life (an unlinked file
/// behind one was never freed). The kernel never sends one
/// (`fuse_read_batch_forget` sizes `count` to the items it copies); the
/// daemon now forgets the whole items present, in both shapes.
#[test]
fn short_batch_forget_forgets_the_items_present() {
    install_panic_counter();
    let mut k = Kernel::new(0);
    for ring in [false, true] {
        let file = unlinked_file_held_once(&mut k, if ring { b"r" } else { b"d" });
        assert_eq!(
            getattr_of(&mut k, file),
            Reply::Send(0),
            "kept by its count"
        );
        let arg = body_of(&BatchForgetIn { count: 3, dummy: 0 });
        let mut items = body_of(&ForgetOne {
            nodeid: file,
            nlookup: 1,
        });
        // Part of a second item: not an item.
        items.extend([0xff; 9]);
        let r = if ring {
            let h = InHeader {
                len: (size_of::<InHeader>() + items.len()) as u32,
                opcode: FUSE_BATCH_FORGET,
                unique: 9,
                ..Default::default()
            };
            serve_raw(&k.handler, &k.session, &h, Some(&arg), &items, &mut k.out)
        } else {
            let mut b = arg;
            b.extend(&items);
            k.request(FUSE_BATCH_FORGET, 0, &b).unwrap().0
        };
        assert_eq!(r, Reply::None, "ring shape {ring}");
        assert_eq!(
            getattr_of(&mut k, file),
            Reply::Send(-libc::ENOENT),
            "ring shape {ring}: the file's only reference was forgotten, so it is freed"
        );
        k.held.remove(&file);
    }
    k.check("after short batch forgets").unwrap();
}

/// Found by the fuzz test: LOOKUP under a parent node id that names no
/// inode answered a negative entry (nodeid 0 with `negative_ttl`), which
/// says "this directory has no such name" of a directory that is not
/// there. It is `ENOENT` now (the kernel's `fuse_lookup` keeps no
/// negative dentry for it); a missing name in a directory that exists
/// still gets a negative entry.
#[test]
fn lookup_under_a_missing_parent_is_enoent() {
    install_panic_counter();
    let mut k = Kernel::new(0);
    assert!(!k.handler.config().cache.negative_ttl.is_zero());
    let (r, p) = k.request(FUSE_LOOKUP, ROOT_ID, &cstr(b"none")).unwrap();
    assert_eq!(r, Reply::Send(0));
    let e = EntryOut::read_from(&p).unwrap();
    assert_eq!(e.nodeid, 0, "a negative entry");
    assert!(e.entry_valid != 0 || e.entry_valid_nsec != 0);
    // A directory made, removed and forgotten: its number names nothing.
    let mut b = body_of(&MkdirIn {
        mode: 0o755,
        umask: 0,
    });
    b.extend(cstr(b"gone"));
    let (r, p) = k.request(FUSE_MKDIR, ROOT_ID, &b).unwrap();
    assert_eq!(r, Reply::Send(0));
    let gone = EntryOut::read_from(&p).unwrap().nodeid;
    let (r, _) = k.request(FUSE_RMDIR, ROOT_ID, &cstr(b"gone")).unwrap();
    assert_eq!(r, Reply::Send(0));
    let (r, _) = k
        .request(FUSE_FORGET, gone, &body_of(&ForgetIn { nlookup: 1 }))
        .unwrap();
    assert_eq!(r, Reply::None);
    k.held.remove(&gone);
    for parent in [gone, 0, 0x7777_7777, u64::MAX] {
        let (r, _) = k.request(FUSE_LOOKUP, parent, &cstr(b"x")).unwrap();
        assert_eq!(r, Reply::Send(-libc::ENOENT), "parent {parent}");
    }
    k.drain().unwrap();
}
