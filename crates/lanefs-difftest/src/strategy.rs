//! proptest strategies: operation sequences over a small name space so
//! that steps collide, with bad inputs mixed in (long names and paths,
//! `.`/`..`, trailing slashes, missing parents, wrong types, unprivileged
//! callers, out-of-range offsets and sizes, bad flags).
//!
//! Not generated, because lanefs deliberately differs from tmpfs there (see
//! `docs/SEMANTICS.md`): `FALLOC_FL_ZERO_RANGE`, times (never compared),
//! opening fifos/sockets/devices (the kernel would block or open a device).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::op::{Case, Op, Step, TimeArg, Who, SLOTS};

/// Most steps in one generated case.
pub const STEPS_MAX: usize = 48;

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        40 => select(vec!["a", "b", "c"]).prop_map(|s| s.as_bytes().to_vec()),
        1 => Just(b".".to_vec()),
        1 => Just(b"..".to_vec()),
        1 => Just(vec![b'L'; 255]),
        1 => Just(vec![b'N'; 256]),
        1 => Just(vec![0xff, b'\n', b' ', 0x01]),
    ]
}

/// A path: 1–3 components (mostly short), sometimes absolute, with
/// doubled or trailing slashes; rarely empty, the root, or longer than
/// `PATH_MAX`.
pub fn path() -> impl Strategy<Value = Vec<u8>> {
    let comps = prop_oneof![
        6 => vec(name(), 1..=1),
        4 => vec(name(), 2..=2),
        1 => vec(name(), 3..=3),
    ];
    let normal = (
        comps,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.03),
    )
        .prop_map(|(comps, abs, trailing, double)| {
            let mut p = Vec::new();
            if abs {
                p.push(b'/');
            }
            for (i, c) in comps.iter().enumerate() {
                if i > 0 {
                    p.push(b'/');
                    if double {
                        p.push(b'/');
                    }
                }
                p.extend_from_slice(c);
            }
            if trailing {
                p.push(b'/');
            }
            p
        });
    prop_oneof![
        100 => normal,
        1 => Just(Vec::new()),
        1 => Just(b"/".to_vec()),
        1 => Just(b"a/".repeat(2048)),
        1 => Just({ let mut p = b"./".repeat(2046); p.extend_from_slice(b"a"); p }),
    ]
}

/// Mostly a top-level name (so that steps meet the files earlier steps
/// made), else any [`path`].
pub fn short_path() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => select(vec!["a", "b", "c"]).prop_map(|s| s.as_bytes().to_vec()),
        2 => path(),
    ]
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![12 => Just(Who::Root), 5 => Just(Who::Alice), 3 => Just(Who::Bob)]
}

fn mode() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => select(vec![0o644u32, 0o755, 0o777, 0o600, 0o700, 0o666, 0o1777, 0o2775]),
        1 => Just(0u32),
        2 => 0u32..=0o7777,
    ]
}

fn id() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(0)),
        2 => Just(Some(1000)),
        2 => Just(Some(1001)),
        1 => Just(Some(1002)),
        // chown's -1 spelled as an id: leaves it alone.
        1 => Just(Some(u32::MAX)),
    ]
}

/// Mostly the first slots, so that operations find the files opened.
fn slot() -> impl Strategy<Value = usize> {
    prop_oneof![12 => Just(0usize), 5 => Just(1usize), 3 => 2..SLOTS]
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..10_000,
        2 => select(vec![4095u64, 4096, 8191, 8192, 65_536, 1 << 20]),
        1 => select(vec![
            (1u64 << 40) + 17,
            i64::MAX as u64 - 5,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            u64::MAX,
        ]),
    ]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..12_000,
        1 => select(vec![4096u64, 1 << 20, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX]),
    ]
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..300, 3 => 300usize..9_000, 1 => Just(0usize)]
}

fn open_flags() -> impl Strategy<Value = i32> {
    let extra = prop_oneof![
        3 => Just(libc::O_EXCL),
        3 => Just(libc::O_TRUNC),
        3 => Just(libc::O_APPEND),
        2 => Just(libc::O_NOFOLLOW),
        1 => Just(libc::O_DIRECTORY),
        1 => Just(libc::O_PATH),
    ];
    (
        prop_oneof![
            1 => Just(libc::O_RDONLY),
            1 => Just(libc::O_WRONLY),
            3 => Just(libc::O_RDWR),
        ],
        prop::bool::weighted(0.6),
        vec(extra, 0..3),
    )
        .prop_map(|(acc, creat, extra)| {
            let f = extra.into_iter().fold(acc, |f, x| f | x);
            if creat {
                f | libc::O_CREAT
            } else {
                f
            }
        })
}

fn time() -> impl Strategy<Value = TimeArg> {
    prop_oneof![
        2 => Just(TimeArg::Omit),
        2 => Just(TimeArg::Now),
        2 => (-10i64..2_000_000_000, 0u32..1_000_000_000).prop_map(|(sec, nsec)| TimeArg::At { sec, nsec }),
        1 => Just(TimeArg::At { sec: 5, nsec: 1_000_000_000 }),
    ]
}

fn xattr_name() -> impl Strategy<Value = Vec<u8>> {
    let long = |n: usize| {
        let mut v = b"user.".to_vec();
        v.resize(n, b'x');
        v
    };
    prop_oneof![
        14 => Just(b"user.a".to_vec()),
        4 => Just(b"user.b".to_vec()),
        1 => Just(long(255)),
        1 => Just(long(256)),
        1 => Just(Vec::new()),
        1 => Just(b"nonamespace".to_vec()),
    ]
}

/// For reads and removals: also the POSIX ACL names (set by
/// [`acl_value`] steps).
fn xattr_name_or_acl() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => xattr_name(),
        1 => Just(b"system.posix_acl_access".to_vec()),
        1 => Just(b"system.posix_acl_default".to_vec()),
    ]
}

fn acl_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"system.posix_acl_access".to_vec()),
        Just(b"system.posix_acl_default".to_vec()),
    ]
}

/// ACL values for `system.posix_acl_*` sets: ones naming the test's
/// users (1000, 1001) and groups (1000, 2000) with masks, ones a mode
/// says all of, and malformed ones (order, version, partial entry), an
/// empty value and a bare header (both remove).
fn acl_value() -> impl Strategy<Value = Vec<u8>> {
    const N: u32 = u32::MAX;
    let (uo, u, go, g, m, o) = (0x01u16, 0x02u16, 0x04u16, 0x08u16, 0x10u16, 0x20u16);
    prop_oneof![
        3 => Just(lanefs::posix_acl_xattr(&[(uo, 7, N), (u, 5, 1000), (go, 4, N), (m, 5, N), (o, 0, N)])),
        3 => Just(lanefs::posix_acl_xattr(&[(uo, 6, N), (u, 7, 1001), (go, 0, N), (g, 6, 1000), (m, 7, N), (o, 1, N)])),
        2 => Just(lanefs::posix_acl_xattr(&[(uo, 7, N), (go, 5, N), (g, 7, 2000), (m, 3, N), (o, 4, N)])),
        2 => Just(lanefs::posix_acl_xattr(&[(uo, 7, N), (u, 7, 1000), (u, 6, 1001), (go, 7, N), (m, 0, N), (o, 5, N)])),
        2 => Just(lanefs::posix_acl_xattr(&[(uo, 6, N), (go, 4, N), (o, 4, N)])),
        1 => Just(lanefs::posix_acl_xattr(&[(uo, 7, N), (go, 7, N), (o, 7, N)])),
        1 => Just(lanefs::posix_acl_xattr(&[(go, 7, N), (uo, 7, N), (o, 0, N)])),
        1 => Just(lanefs::posix_acl_xattr(&[(uo, 7, N), (u, 7, 1000), (go, 7, N), (o, 0, N)])),
        1 => Just(3u32.to_le_bytes().to_vec()),
        1 => Just(vec![2, 0, 0, 0, 1, 0]),
        1 => Just(Vec::new()),
        1 => Just(2u32.to_le_bytes().to_vec()),
    ]
}

fn xattr_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => vec(any::<u8>(), 0..40),
        1 => Just(vec![7u8; 65_536]),
        1 => Just(vec![9u8; 65_537]),
    ]
}

fn xattr_size() -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(0usize), 1 => Just(1), 1 => Just(8), 4 => Just(65_536)]
}

/// Where xattr steps act: mostly the root (which always exists) or one
/// of the top-level names.
fn xattr_path() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => Just(b".".to_vec()),
        4 => select(vec!["a", "b", "c"]).prop_map(|s| s.as_bytes().to_vec()),
        1 => path(),
    ]
}

fn mknod_mode() -> impl Strategy<Value = (u32, u64)> {
    let kind = select(vec![
        libc::S_IFIFO,
        libc::S_IFSOCK,
        libc::S_IFCHR,
        libc::S_IFBLK,
        libc::S_IFREG,
        0,
        libc::S_IFDIR,
        0o170000,
    ]);
    let rdev = prop_oneof![
        4 => Just(0u64),
        4 => (1u32..12, 0u32..256).prop_map(|(a, b)| libc::makedev(a, b)),
        // Past the kernel's 32-bit device number (EINVAL), and its largest.
        1 => select(vec![libc::makedev(5000, 1), libc::makedev(1, 1 << 20), 0xffff_ffff]),
    ];
    (kind, 0u32..=0o7777, rdev).prop_map(|(k, perm, rdev)| (k | perm, rdev))
}

fn rename_flags() -> impl Strategy<Value = u32> {
    prop_oneof![6 => Just(0u32), 2 => Just(1u32), 2 => Just(2u32), 1 => Just(3u32), 1 => Just(4u32), 1 => Just(5u32), 1 => Just(8u32)]
}

/// One operation.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (path(), mode(), any::<bool>()).prop_map(|(path, mode, excl)| Op::Create { path, mode, excl }),
        2 => (path(), mknod_mode()).prop_map(|(path, (mode, rdev))| Op::Mknod { path, mode, rdev }),
        8 => (path(), mode()).prop_map(|(path, mode)| Op::Mkdir { path, mode }),
        4 => path().prop_map(|path| Op::Unlink { path }),
        4 => path().prop_map(|path| Op::Rmdir { path }),
        3 => (prop_oneof![
                8 => path(),
                1 => Just(Vec::new()),
                1 => Just(vec![b'T'; 4096]),
                1 => Just(vec![b'T'; 4095]),
             ], path())
            .prop_map(|(target, path)| Op::Symlink { target, path }),
        2 => short_path().prop_map(|path| Op::Readlink { path }),
        3 => (path(), path()).prop_map(|(old, new)| Op::Link { old, new }),
        6 => (path(), path(), rename_flags()).prop_map(|(old, new, flags)| Op::Rename { old, new, flags }),
        10 => (slot(), short_path(), open_flags(), mode())
            .prop_map(|(slot, path, flags, mode)| Op::Open { slot, path, flags, mode }),
        1 => slot().prop_map(|slot| Op::Close { slot }),
        8 => (slot(), prop::option::weighted(0.7, offset()), len(), any::<u8>())
            .prop_map(|(slot, offset, len, seed)| Op::Write { slot, offset, len, seed }),
        6 => (slot(), prop::option::weighted(0.7, offset()), len())
            .prop_map(|(slot, offset, len)| Op::Read { slot, offset, len }),
        2 => (slot(), -5000i64..20_000, select(vec![libc::SEEK_SET, libc::SEEK_CUR, libc::SEEK_END]))
            .prop_map(|(slot, offset, whence)| Op::Seek { slot, offset, whence }),
        3 => (slot(), size()).prop_map(|(slot, size)| Op::Ftruncate { slot, size }),
        3 => (
                slot(),
                select(vec![0, libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                            libc::FALLOC_FL_PUNCH_HOLE, 0x100]),
                prop_oneof![8 => 0i64..20_000, 1 => Just(-1i64), 1 => Just(i64::MAX - 10)],
                prop_oneof![8 => 1i64..20_000, 1 => Just(0i64), 1 => Just(-1i64), 1 => Just(i64::MAX)],
            )
            .prop_map(|(slot, mode, offset, len)| Op::Fallocate { slot, mode, offset, len }),
        1 => (slot(), any::<bool>()).prop_map(|(slot, datasync)| Op::Fsync { slot, datasync }),
        1 => (slot(), mode()).prop_map(|(slot, mode)| Op::Fchmod { slot, mode }),
        2 => slot().prop_map(|slot| Op::Fstat { slot }),
        3 => (path(), size()).prop_map(|(path, size)| Op::Truncate { path, size }),
        4 => (path(), mode()).prop_map(|(path, mode)| Op::Chmod { path, mode }),
        3 => (path(), id(), id(), prop::bool::weighted(0.8))
            .prop_map(|(path, uid, gid, follow)| Op::Chown { path, uid, gid, follow }),
        3 => (path(), time(), time(), prop::bool::weighted(0.8))
            .prop_map(|(path, atime, mtime, follow)| Op::Utimens { path, atime, mtime, follow }),
        5 => (path(), any::<bool>()).prop_map(|(path, follow)| Op::Stat { path, follow }),
        2 => (path(), 0u32..9).prop_map(|(path, mask)| Op::Access { path, mask }),
        3 => path().prop_map(|path| Op::Readdir { path }),
        5 => (xattr_path(), xattr_name(), xattr_value(),
              prop_oneof![4 => Just(0u32), 2 => Just(1u32), 2 => Just(2u32), 1 => Just(3u32), 1 => Just(4u32)])
            .prop_map(|(path, name, value, flags)| Op::SetXattr { path, name, value, flags }),
        3 => (xattr_path(), acl_name(), acl_value(), prop_oneof![4 => Just(0u32), 1 => Just(1u32)])
            .prop_map(|(path, name, value, flags)| Op::SetXattr { path, name, value, flags }),
        3 => (xattr_path(), xattr_name_or_acl(), xattr_size())
            .prop_map(|(path, name, size)| Op::GetXattr { path, name, size }),
        2 => (xattr_path(), xattr_size()).prop_map(|(path, size)| Op::ListXattr { path, size }),
        3 => (xattr_path(), xattr_name_or_acl()).prop_map(|(path, name)| Op::RemoveXattr { path, name }),
        // Immutable, append-only, nodump, noatime, two together, none,
        // and sync (EOPNOTSUPP).
        2 => (xattr_path(), select(vec![0x10u32, 0x20, 0x40, 0x80, 0x30, 0xc0, 0, 0x8]))
            .prop_map(|(path, flags)| Op::SetFlags { path, flags }),
        1 => xattr_path().prop_map(|path| Op::GetFlags { path }),
    ]
}

/// One step: who and what.
pub fn step() -> impl Strategy<Value = Step> {
    (who(), op()).prop_map(|(who, op)| Step { who, op })
}

/// A fixed scenario mixed into some cases so that it is never left to
/// chance: open a file, write, unlink it while open, then write, read and
/// close through the open file (the unlinked-open lifetime rule).
fn unlinked_open_scenario(who: Who, name: Vec<u8>, len: usize, seed: u8) -> Vec<Step> {
    let slot = SLOTS - 1;
    let step = |op| Step { who, op };
    vec![
        step(Op::Open {
            slot,
            path: name.clone(),
            flags: libc::O_CREAT | libc::O_RDWR,
            mode: 0o644,
        }),
        step(Op::Write {
            slot,
            offset: Some(0),
            len,
            seed,
        }),
        step(Op::Unlink { path: name }),
        step(Op::Write {
            slot,
            offset: Some(len as u64 + 100),
            len,
            seed: seed ^ 0x55,
        }),
        step(Op::Read {
            slot,
            offset: Some(0),
            len: 2 * len + 200,
        }),
        step(Op::Fstat { slot }),
        step(Op::Close { slot }),
    ]
}

/// A whole case: a umask and up to `steps_max` steps (a quarter of the
/// cases also contain the unlinked-open scenario at a random point).
pub fn case(steps_max: usize) -> impl Strategy<Value = Case> {
    let scenario = prop::option::weighted(
        0.25,
        (
            any::<prop::sample::Index>(),
            who(),
            select(vec!["a", "b", "c"]),
            1usize..6000,
            any::<u8>(),
        ),
    );
    (
        select(vec![0o022u32, 0o002, 0o077, 0o000]),
        vec(step(), 1..=steps_max.max(1)),
        scenario,
    )
        .prop_map(|(umask, mut steps, scenario)| {
            if let Some((at, who, name, len, seed)) = scenario {
                let at = at.index(steps.len() + 1);
                let extra = unlinked_open_scenario(who, name.as_bytes().to_vec(), len, seed);
                steps.splice(at..at, extra);
            }
            Case { umask, steps }
        })
}
