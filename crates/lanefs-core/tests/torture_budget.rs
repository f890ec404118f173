//! Torture of the page cache under a tiny page budget and a small inode
//! budget, checked against a model. Several threads run random operations
//! while page reclaim (`Fs::enforce_page_budget`, which walks the inode
//! cache one part at a time from a shared cursor), eviction and reloading
//! run all the time:
//! * workers, each the owner of some pages of every SHARED file: pure
//!   overwrites of a whole own page or half of one (several lanes overwrite
//!   each file, so it gets stripes and those overwrites take
//!   `FileData::try_overwrite`, which waits on the data lock held shared
//!   when its stripe stays taken), writes of several own pages, punches and
//!   zero-ranges of own pages, a cut of the file inside the last owner's
//!   pages and back, fsync and stat, reads of anyone's pages; on their
//!   PRIVATE files, writes anywhere (holes too), overwrites inside a page,
//!   appends, truncates down and up, fallocate (allocate, keep-size, punch,
//!   zero-range), `O_TRUNC` opens, reads, fsync, unlink and create again;
//!   `Fs::shrink` and `Fs::sync`; handles closed at random, so inodes are
//!   evicted and loaded again;
//! * HOT threads: whole-page overwrites and reads of the first pages of a
//!   scratch file in a tight loop (an overwrite under a stripe racing a
//!   lock-free read of its page), which the chaos thread unlinks and
//!   creates again while they hold it open;
//! * a CHAOS thread: `shrink`, `sync`, stat and reads of the shared files.
//!
//! The checks are exact despite the races. Each half of a shared page (a
//! *slot*) has one owner, which writes it only whole; every version is
//! stamped with (file, slot, owner, sequence number), and a punched,
//! zeroed or cut version is zeros. Before an operation on a slot its owner
//! publishes the version's number as *started*, after it as *committed*.
//! A reader takes `lo` = committed before its read and `hi` = started
//! after it: the slot must hold one whole version numbered in `[lo, hi]`
//! (never a torn mix, never one older than the last committed), never
//! older than one the same reader saw before. stat's mtime and ctime never
//! go back for a reader, and after a writer's overwrite are no earlier
//! than the clock before it. Private files are compared byte for byte.
//! At the end: what the store holds after `sync`, then every file after a
//! `shrink` that drops every page (the page count must be 0), then after
//! mounting the store again, equals the model, and `Fs::check` finds
//! nothing. A run that does not end within the hang limit fails.
//!
//! Knobs (soak runs): `LANEFS_TORTURE_RUNS` (seeds per design set,
//! default 5), `LANEFS_TORTURE_OPS` (operations per worker per run,
//! default 400), `LANEFS_TORTURE_SEED` (first seed, default 1; a failure
//! names its seed), `LANEFS_TORTURE_BASELINE_RUNS` (seeds for each other
//! design, default 1), `LANEFS_TORTURE_BUDGET` (every run's
//! `cache_pages_max`, instead of one chosen by the seed),
//! `LANEFS_TORTURE_HANG_S` (default 120).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use lanefs_core::*;

mod common;

const THREADS: usize = 4;
/// Shared files, and pages of each a thread owns (48 pages in all: pages
/// `p` and `p + 32` share a stripe and have different owners).
const SHARED: usize = 2;
const OWN: usize = 12;
const SHARED_PAGES: usize = THREADS * OWN;
/// Each shared page is versioned by halves (slots), so an overwrite of
/// half a page is checked as exactly as one of a whole page.
const SLOT: usize = PAGE_SIZE / 2;
const SLOTS: usize = SHARED_PAGES * 2;
/// Private files per thread, and the most pages each grows to.
const PRIVATE: usize = 3;
const PRIVATE_MAX: u64 = 20 * PAGE_SIZE as u64;
const PAGE: u64 = PAGE_SIZE as u64;
const MAGIC: u64 = 0x5AFE << 48;
/// A file everyone overwrites and the chaos thread unlinks and makes again.
const SCRATCH: &[u8] = b"scratch";
const SCRATCH_PAGES: usize = 40;
/// Threads overwriting and reading the first pages of the scratch file
/// in a tight loop, and those pages.
const HOT: usize = 2;
const HOT_PAGES: usize = 3;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The stamp words of slot `slot` of shared file `file`.
fn key(file: usize, slot: usize) -> u64 {
    MAGIC | (file as u64) << 40 | (slot as u64) << 16 | (slot / 2 / OWN) as u64
}

/// What slots `slots` of shared file `file` hold as version `seq`.
fn stamp(file: usize, slots: std::ops::Range<usize>, seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(slots.len() * SLOT);
    for slot in slots {
        for _ in 0..SLOT / 16 {
            out.extend_from_slice(&key(file, slot).to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
        }
    }
    out
}

/// The version `bytes` (slot `slot` of shared file `file`) is: `Some(0)`
/// for zeros, `Some(seq)` for a whole stamp, `None` when torn.
fn version_of(file: usize, slot: usize, bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|b| *b == 0) {
        return Some(0);
    }
    let key = key(file, slot);
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    let seq = word(1);
    let whole = (0..SLOT / 8).all(|i| word(i) == if i % 2 == 0 { key } else { seq });
    (whole && seq != 0).then_some(seq)
}

/// The slots of pages `pages`.
fn slots(pages: std::ops::Range<usize>) -> std::ops::Range<usize> {
    pages.start * 2..pages.end * 2
}

/// The owner's versions of one slot of a shared page.
#[derive(Default)]
struct PageLog {
    started: AtomicU64,
    committed: AtomicU64,
    /// Numbers of the zero versions (0, the initial one, first).
    zeros: Mutex<Vec<u64>>,
}

struct Shared {
    pages: Vec<Vec<PageLog>>,
}

impl Shared {
    fn new() -> Shared {
        let pages = (0..SHARED)
            .map(|_| {
                (0..SLOTS)
                    .map(|_| {
                        let l = PageLog::default();
                        l.zeros.lock().unwrap().push(0);
                        l
                    })
                    .collect()
            })
            .collect();
        Shared { pages }
    }
}

/// A reader's view of the shared pages: the oldest version it may still
/// see of each.
struct Seen(Vec<Vec<u64>>, Vec<(Timespec, Timespec)>);

impl Seen {
    fn new() -> Seen {
        let zero = Timespec { sec: 0, nsec: 0 };
        Seen(vec![vec![0; SLOTS]; SHARED], vec![(zero, zero); SHARED])
    }

    /// stat of shared file `file`: its mtime and ctime never go back, and
    /// are no earlier than `since` (taken before this reader's own latest
    /// change of it returned).
    fn stat(&mut self, fs: &Fs, f: &OpenFile, file: usize, since: Option<Timespec>, what: &str) {
        let a = fs.getattr(f.ino()).unwrap();
        let (cut, full) = (
            ((THREADS - 1) * OWN) as u64 * PAGE,
            SHARED_PAGES as u64 * PAGE,
        );
        assert!(
            a.size == full || (a.size >= cut && a.size.is_multiple_of(PAGE)),
            "{what}: size of shared{file} {}",
            a.size
        );
        let (m, c) = self.1[file];
        assert!(
            a.mtime >= m && a.ctime >= c,
            "{what}: shared{file} went back from (mtime {m:?}, ctime {c:?}) to ({:?}, {:?})",
            a.mtime,
            a.ctime
        );
        if let Some(t) = since {
            assert!(
                a.mtime >= t,
                "{what}: shared{file} mtime {:?}, before the write at {t:?}",
                a.mtime
            );
        }
        assert!(
            a.ctime >= a.mtime,
            "{what}: shared{file} ctime {:?} < mtime {:?}",
            a.ctime,
            a.mtime
        );
        self.1[file] = (a.mtime, a.ctime);
    }
}

/// Each piece of `buf` inside one page is one byte repeated (zeros, or
/// one whole-page overwrite of the scratch file).
fn assert_uniform_pages(buf: &[u8], what: &str) {
    for (p, piece) in buf.chunks(PAGE_SIZE).enumerate() {
        assert!(
            piece.iter().all(|b| *b == piece[0]),
            "{what}: scratch page {p} torn: {:?} … {:?}",
            &piece[..8],
            &piece[piece.len() - 8..]
        );
    }
}

fn shared_name(i: usize) -> Vec<u8> {
    format!("shared{i}").into_bytes()
}

fn private_name(t: usize, k: usize) -> Vec<u8> {
    format!("p{t}-{k}").into_bytes()
}

/// Bytes of private write number `seq` at `off`.
fn fill(seq: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i).wrapping_mul(0x9E37_79B9) ^ seq.wrapping_mul(0xC2B2_AE35);
            (x ^ (x >> 13)) as u8 | 1
        })
        .collect()
}

fn open(fs: &Fs, name: &[u8], flags: i32) -> OpenFile {
    fs.open_at(&Cred::root(), ROOT_INO, name, flags, 0o644, 0, false)
        .map(|(_, f, _)| f)
        .unwrap_or_else(|e| panic!("open {:?}: {e:?}", String::from_utf8_lossy(name)))
}

fn truncate(fs: &Fs, f: &OpenFile, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(&Cred::root(), f.ino(), &set, Some(f)).unwrap();
}

/// Read pages `[first, first + n)` of shared file `file` and check every
/// slot against its owner's log and what this reader saw before.
fn read_shared(
    fs: &Fs,
    sh: &Shared,
    seen: &mut Seen,
    f: &OpenFile,
    file: usize,
    pages: std::ops::Range<usize>,
    what: &str,
) {
    let (first, n) = (pages.start, pages.len());
    let logs = &sh.pages[file];
    let lo: Vec<u64> = slots(pages)
        .map(|s| logs[s].committed.load(SeqCst))
        .collect();
    let mut buf = vec![0u8; n * PAGE_SIZE];
    let got = fs.read(f, first as u64 * PAGE, &mut buf).unwrap();
    // Short only where the last owner cut the file (page-aligned).
    let cut = (THREADS - 1) * OWN;
    assert!(
        got == buf.len() || (got.is_multiple_of(PAGE_SIZE) && first + got / PAGE_SIZE >= cut),
        "{what}: read of shared{file} at page {first}: {got} of {} bytes",
        buf.len()
    );
    for (i, bytes) in buf[..got].chunks_exact(SLOT).enumerate() {
        let p = first * 2 + i;
        let hi = logs[p].started.load(SeqCst);
        let floor = lo[i].max(seen.0[file][p]);
        let Some(v) = version_of(file, p, bytes) else {
            let w: Vec<u64> = bytes
                .chunks_exact(8)
                .take(4)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                .collect();
            panic!("{what}: shared{file} slot {p} torn or foreign: {w:x?} (window {floor}..={hi})");
        };
        if v == 0 {
            // Some zero version inside the window.
            let zeros = logs[p].zeros.lock().unwrap();
            let Some(z) = zeros.iter().copied().find(|z| (floor..=hi).contains(z)) else {
                panic!("{what}: shared{file} slot {p} reads zeros; no zero version in {floor}..={hi} ({:?})", &zeros[zeros.len().saturating_sub(4)..]);
            };
            seen.0[file][p] = z;
        } else {
            assert!(
                (floor..=hi).contains(&v),
                "{what}: shared{file} slot {p} holds version {v}, outside {floor}..={hi} (committed before the read {}, seen before {})",
                lo[i],
                seen.0[file][p]
            );
            seen.0[file][p] = v;
        }
    }
}

/// One worker: owner of pages `[t * OWN, (t + 1) * OWN)` of every shared
/// file and of its private files. Returns its private files' contents.
fn worker(fs: &Fs, sh: &Shared, t: usize, seed: u64, ops: u64, stop: &AtomicBool) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed ^ (t as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut seen = Seen::new();
    let mut seq = 0u64;
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); PRIVATE];
    let mut shared: Vec<Option<OpenFile>> = (0..SHARED).map(|_| None).collect();
    let mut private: Vec<Option<OpenFile>> = (0..PRIVATE).map(|_| None).collect();
    let mut scratch: Option<OpenFile> = None;
    let own = t * OWN..(t + 1) * OWN;
    for op in 0..ops {
        if stop.load(SeqCst) {
            break;
        }
        let what = format!("thread {t} op {op} seed {seed}");
        if rng.below(8) == 0 {
            std::thread::yield_now();
        }
        // Handles come and go, so inodes are evicted and reloaded.
        if rng.below(16) == 0 {
            let i = rng.below(SHARED as u64) as usize;
            shared[i] = None;
        }
        if rng.below(16) == 0 {
            let k = rng.below(PRIVATE as u64) as usize;
            private[k] = None;
        }
        if rng.below(16) == 0 {
            scratch = None;
        }
        let roll = rng.below(100);
        if roll < 55 {
            // Shared file.
            let file = rng.below(SHARED as u64) as usize;
            let f = shared[file].get_or_insert_with(|| open(fs, &shared_name(file), libc::O_RDWR));
            let logs = &sh.pages[file];
            match roll {
                0..=29 => {
                    // A pure overwrite of one whole own page, or of half.
                    let p = own.start + rng.below(OWN as u64) as usize;
                    let range = match rng.below(4) {
                        0 => p * 2..p * 2 + 1,
                        1 => p * 2 + 1..p * 2 + 2,
                        _ => slots(p..p + 1),
                    };
                    seq += 1;
                    for s in range.clone() {
                        logs[s].started.store(seq, SeqCst);
                    }
                    let before = Timespec::now();
                    let data = stamp(file, range.clone(), seq);
                    let (n, _) = fs.write(f, (range.start * SLOT) as u64, &data).unwrap();
                    assert_eq!(n, data.len(), "{what}");
                    for s in range {
                        logs[s].committed.store(seq, SeqCst);
                    }
                    if rng.below(4) == 0 {
                        seen.stat(fs, f, file, Some(before), &what);
                    }
                }
                30..=35 => {
                    // Several own slots at once, across pages.
                    let a = own.start * 2 + rng.below(OWN as u64 * 2) as usize;
                    let b = (a + 2 + rng.below(7) as usize).min(own.end * 2);
                    seq += 1;
                    for log in &logs[a..b] {
                        log.started.store(seq, SeqCst);
                    }
                    let data = stamp(file, a..b, seq);
                    let (n, _) = fs.write(f, (a * SLOT) as u64, &data).unwrap();
                    assert_eq!(n, data.len(), "{what}");
                    for log in &logs[a..b] {
                        log.committed.store(seq, SeqCst);
                    }
                }
                36..=38 => {
                    // Punch or zero whole own pages (the size stays).
                    let a = own.start + rng.below(OWN as u64) as usize;
                    let b = (a + 1 + rng.below(3) as usize).min(own.end);
                    seq += 1;
                    for s in slots(a..b) {
                        logs[s].zeros.lock().unwrap().push(seq);
                        logs[s].started.store(seq, SeqCst);
                    }
                    let mode = if rng.below(2) == 0 {
                        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                    } else {
                        FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE
                    };
                    let len = (b - a) as i64 * PAGE as i64;
                    fs.fallocate(f, mode, a as i64 * PAGE as i64, len)
                        .unwrap_or_else(|e| panic!("{what}: fallocate {mode:#x}: {e:?}"));
                    for s in slots(a..b) {
                        logs[s].committed.store(seq, SeqCst);
                    }
                }
                39 if t == THREADS - 1 => {
                    // The last owner cuts the file inside its pages and
                    // grows it back: a zero version of the pages cut.
                    let k = own.start + rng.below(OWN as u64) as usize;
                    seq += 1;
                    for s in slots(k..own.end) {
                        logs[s].zeros.lock().unwrap().push(seq);
                        logs[s].started.store(seq, SeqCst);
                    }
                    truncate(fs, f, k as u64 * PAGE);
                    truncate(fs, f, SHARED_PAGES as u64 * PAGE);
                    for s in slots(k..own.end) {
                        logs[s].committed.store(seq, SeqCst);
                    }
                }
                39..=40 => {
                    fs.fsync(f, rng.below(2) == 0).unwrap();
                    seen.stat(fs, f, file, None, &what);
                }
                _ => {
                    // Read any pages, anyone's.
                    let first = rng.below(SHARED_PAGES as u64) as usize;
                    let n = 1 + rng.below((SHARED_PAGES - first).min(8) as u64) as usize;
                    read_shared(fs, sh, &mut seen, f, file, first..first + n, &what);
                }
            }
            continue;
        }
        if (97..99).contains(&roll) {
            // The scratch file, which the chaos thread unlinks and makes
            // again: whole-page overwrites by everyone, reads that check
            // each page is one overwrite's.
            if scratch.is_none() {
                scratch = fs
                    .open_at(&Cred::root(), ROOT_INO, SCRATCH, libc::O_RDWR, 0, 0, false)
                    .ok()
                    .map(|(_, f, _)| f);
            }
            let Some(f) = &scratch else { continue };
            if rng.below(3) == 0 {
                let mut buf = vec![0u8; SCRATCH_PAGES * PAGE_SIZE];
                let n = fs.read(f, 0, &mut buf).unwrap();
                assert_uniform_pages(&buf[..n], &what);
            } else {
                seq += 1;
                let byte = 1 + (t as u8) * 50 + (seq % 50) as u8;
                let p = rng.below(SCRATCH_PAGES as u64);
                fs.write(f, p * PAGE, &[byte; PAGE_SIZE]).unwrap();
            }
            continue;
        }
        if roll >= 99 {
            if rng.below(2) == 0 {
                fs.shrink();
            } else {
                fs.sync().unwrap();
            }
            continue;
        }
        // Private file.
        let k = rng.below(PRIVATE as u64) as usize;
        let name = private_name(t, k);
        let f = private[k].get_or_insert_with(|| open(fs, &name, libc::O_RDWR));
        let m = &mut model[k];
        let size = m.len() as u64;
        match roll {
            55..=64 => {
                // A write anywhere: mostly near the end, sometimes far past
                // it (a hole).
                let past = if rng.below(4) == 0 { PRIVATE_MAX } else { PAGE };
                let off = rng.below((size + past).min(PRIVATE_MAX - 1));
                let len = (1 + rng.below(2 * PAGE)).min(PRIVATE_MAX - off) as usize;
                seq += 1;
                let data = fill(seq, off, len);
                let (n, _) = fs.write(f, off, &data).unwrap();
                assert_eq!(n, len, "{what}");
                let end = off as usize + len;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            65..=69 => {
                // A pure overwrite inside one page.
                if size == 0 {
                    continue;
                }
                let off = rng.below(size);
                let room = (PAGE - off % PAGE).min(size - off);
                let len = 1 + rng.below(room) as usize;
                seq += 1;
                let data = fill(seq, off, len);
                fs.write(f, off, &data).unwrap();
                m[off as usize..off as usize + len].copy_from_slice(&data);
            }
            70..=73 => {
                // Append.
                if size >= PRIVATE_MAX - PAGE {
                    continue;
                }
                let len = 1 + rng.below(PAGE + PAGE / 2) as usize;
                seq += 1;
                let data = fill(seq, size, len);
                let app = open(fs, &name, libc::O_WRONLY | libc::O_APPEND);
                let (n, end) = fs.write(&app, 0, &data).unwrap();
                assert_eq!((n, end), (len, size + len as u64), "{what}: append");
                m.extend_from_slice(&data);
            }
            74..=78 => {
                // Truncate down or up.
                let to = rng.below(PRIVATE_MAX);
                let to = if rng.below(3) == 0 {
                    to & !(PAGE - 1)
                } else {
                    to
                };
                truncate(fs, f, to);
                m.resize(to as usize, 0);
            }
            79..=83 => {
                // fallocate: allocate, keep size, punch, zero range.
                let off = rng.below(PRIVATE_MAX - 1);
                let len = (1 + rng.below(3 * PAGE)).min(PRIVATE_MAX - off);
                let (mode, kind) = match rng.below(5) {
                    0 => (0, "alloc"),
                    1 => (FALLOC_FL_KEEP_SIZE, "keep"),
                    2 => (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "punch"),
                    3 => (FALLOC_FL_ZERO_RANGE, "zero"),
                    _ => (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, "zero-keep"),
                };
                fs.fallocate(f, mode, off as i64, len as i64)
                    .unwrap_or_else(|e| panic!("{what}: fallocate {kind}: {e:?}"));
                let end = (off + len) as usize;
                let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
                if !keep && m.len() < end {
                    m.resize(end, 0);
                }
                if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
                    let e = end.min(m.len());
                    if (off as usize) < e {
                        m[off as usize..e].fill(0);
                    }
                }
            }
            84..=91 => {
                // Read any range, checked byte for byte.
                let off = rng.below(size + PAGE);
                let len = 1 + rng.below(3 * PAGE) as usize;
                let mut buf = vec![0xEEu8; len];
                let n = fs.read(f, off, &mut buf).unwrap();
                let want = m
                    .get(off as usize..(off as usize + len).min(m.len()))
                    .unwrap_or(&[]);
                assert_eq!(n, want.len(), "{what}: read of p{t}-{k} at {off}: length");
                if buf[..n] != *want {
                    let at = buf.iter().zip(want).position(|(a, b)| a != b).unwrap();
                    panic!(
                        "{what}: p{t}-{k} byte {} reads {:#x}, model {:#x} (size {size})",
                        off as usize + at,
                        buf[at],
                        want[at]
                    );
                }
                let a = fs.getattr(f.ino()).unwrap();
                assert_eq!(a.size, size, "{what}: size of p{t}-{k}");
            }
            92 => {
                fs.fsync(f, false).unwrap();
            }
            93 => {
                // Open with O_TRUNC.
                private[k] = Some(open(fs, &name, libc::O_RDWR | libc::O_TRUNC));
                m.clear();
            }
            _ => {
                // Unlink and create again, open or not.
                if rng.below(2) == 0 {
                    private[k] = None;
                }
                fs.unlink(&Cred::root(), ROOT_INO, &name).unwrap();
                private[k] = None;
                let f = open(fs, &name, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR);
                private[k] = Some(f);
                m.clear();
            }
        }
    }
    model
}

/// A hot thread: overwrites of whole pages of the first [`HOT_PAGES`] of
/// the scratch file (one byte repeated) and reads of them in a tight loop,
/// so overwrites under stripes and lock-free reads of the same pages
/// overlap; every page read must be one overwrite's.
fn hot(fs: &Fs, id: usize, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng(seed ^ (id as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut buf = vec![0u8; HOT_PAGES * PAGE_SIZE];
    while !stop.load(SeqCst) {
        let Ok((_, f, _)) = fs.open_at(&Cred::root(), ROOT_INO, SCRATCH, libc::O_RDWR, 0, 0, false)
        else {
            std::thread::yield_now();
            continue;
        };
        for i in 0..256u64 {
            let p = rng.below(HOT_PAGES as u64);
            if rng.below(2) == 0 {
                let byte = 1 + (id as u8) * 100 + (i % 100) as u8;
                fs.write(&f, p * PAGE, &[byte; PAGE_SIZE]).unwrap();
            } else {
                let n = fs.read(&f, 0, &mut buf).unwrap();
                assert_uniform_pages(&buf[..n], &format!("hot thread {id} seed {seed}"));
            }
        }
    }
}

/// One more thread: shrinks, syncs and reads the shared files.
fn chaos(fs: &Fs, sh: &Shared, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng(seed ^ 0xC4A0_5C4A_05C4_A05C);
    let mut seen = Seen::new();
    let mut i = 0u64;
    while !stop.load(SeqCst) {
        i += 1;
        match rng.below(9) {
            0 => {
                fs.shrink();
            }
            8 => {
                // A new scratch file; the old one lives on while open.
                match fs.unlink(&Cred::root(), ROOT_INO, SCRATCH) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => panic!("unlink scratch: {e:?}"),
                }
                let f = open(fs, SCRATCH, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR);
                truncate(fs, &f, SCRATCH_PAGES as u64 * PAGE);
            }
            1 => fs.sync().unwrap(),
            2 => {
                let file = rng.below(SHARED as u64) as usize;
                let f = open(fs, &shared_name(file), libc::O_RDONLY);
                seen.stat(fs, &f, file, None, &format!("chaos stat {i} seed {seed}"));
            }
            _ => {
                let file = rng.below(SHARED as u64) as usize;
                let f = open(fs, &shared_name(file), libc::O_RDONLY);
                let first = rng.below(SHARED_PAGES as u64) as usize;
                let n = 1 + rng.below((SHARED_PAGES - first) as u64) as usize;
                read_shared(
                    fs,
                    sh,
                    &mut seen,
                    &f,
                    file,
                    first..first + n,
                    &format!("chaos read {i} seed {seed}"),
                );
            }
        }
        std::thread::yield_now();
    }
}

/// A budget of a few pages, or one the shared files fit in (so pure
/// overwrites find their pages cached and take stripes).
fn budget(seed: u64) -> usize {
    let forced = common::knob("LANEFS_TORTURE_BUDGET", u64::MAX);
    if forced != u64::MAX {
        return forced as usize;
    }
    [1, 3, 6, 12, 160][(seed % 5) as usize]
}

fn mount(variants: Variants, seed: u64) -> Fs {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 4096 * PAGE,
        max_inodes: 1024,
    }));
    let config = FsConfig {
        cache_pages_max: budget(seed),
        // A few inodes, or a table of several parts (the page reclaim
        // cursor walks one at a time).
        cache_inodes_max: [2, 5, 16, 5000][(seed / 5 % 4) as usize],
        variants,
        ..FsConfig::default()
    };
    Fs::new(store, config).unwrap()
}

/// One run: the workers, the hot threads and the chaos thread on a fresh
/// mount, then the final comparisons with the model.
fn run(variants: Variants, seed: u64, ops: u64) {
    let fs = mount(variants, seed);
    for i in 0..SHARED {
        let f = open(&fs, &shared_name(i), libc::O_CREAT | libc::O_RDWR);
        truncate(&fs, &f, SHARED_PAGES as u64 * PAGE);
    }
    let f = open(&fs, SCRATCH, libc::O_CREAT | libc::O_RDWR);
    truncate(&fs, &f, SCRATCH_PAGES as u64 * PAGE);
    drop(f);
    for t in 0..THREADS {
        for k in 0..PRIVATE {
            open(&fs, &private_name(t, k), libc::O_CREAT | libc::O_RDWR);
        }
    }
    let sh = Shared::new();
    let stop = AtomicBool::new(false);
    // A thread that fails stops the others, and the first failure is
    // reported (the workers' first, in thread order).
    let guarded = |f: &dyn Fn() -> Vec<Vec<u8>>| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        if r.is_err() {
            stop.store(true, SeqCst);
        }
        r
    };
    let results = std::thread::scope(|s| {
        let (fs, sh, stop, guarded) = (&fs, &sh, &stop, &guarded);
        let others: Vec<_> = std::iter::once(s.spawn(move || {
            guarded(&|| {
                chaos(fs, sh, seed, stop);
                Vec::new()
            })
        }))
        .chain((0..HOT).map(|id| {
            s.spawn(move || {
                guarded(&|| {
                    hot(fs, id, seed, stop);
                    Vec::new()
                })
            })
        }))
        .collect();
        let workers: Vec<_> = (0..THREADS)
            .map(|t| s.spawn(move || guarded(&|| worker(fs, sh, t, seed, ops, stop))))
            .collect();
        let mut results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, SeqCst);
        results.extend(others.into_iter().map(|o| o.join().unwrap()));
        results
    });
    let mut models = Vec::new();
    for r in results {
        match r {
            Ok(m) => models.push(m),
            Err(e) => std::panic::resume_unwind(e),
        }
    }
    models.truncate(THREADS);
    // What the store holds after a sync, read directly.
    fs.sync().unwrap();
    let store = Arc::clone(fs.store());
    let want = final_contents(&sh, &models);
    for (name, bytes) in &want {
        let f = open(&fs, name, libc::O_RDONLY);
        let (ino, size) = (f.ino(), bytes.len());
        for (idx, want) in bytes.chunks(PAGE_SIZE).enumerate() {
            let mut page = [0u8; PAGE_SIZE];
            store.read_page(ino, idx as u64, &mut page).unwrap();
            assert!(
                page[..want.len()] == *want,
                "seed {seed}: {} page {idx} in the store after sync differs (size {size})",
                String::from_utf8_lossy(name)
            );
        }
    }
    let (_, pages) = fs.cache_counts();
    assert!(
        pages <= budget(seed) + THREADS * 4 + 4,
        "seed {seed}: {pages} pages cached over a budget of {}",
        budget(seed)
    );
    // Everything dropped, then every file read back from the store.
    fs.shrink();
    assert_eq!(
        fs.cache_counts().1,
        0,
        "seed {seed}: pages left after shrink"
    );
    compare(&fs, &want, seed, "after shrink");
    fs.check()
        .unwrap_or_else(|bad| panic!("seed {seed}: check: {bad:#?}"));
    // And from a mount of the store again.
    let config = FsConfig {
        cache_pages_max: budget(seed),
        variants,
        ..FsConfig::default()
    };
    drop(fs);
    let fs = Fs::new(store, config).unwrap();
    compare(&fs, &want, seed, "mounted again");
    fs.check()
        .unwrap_or_else(|bad| panic!("seed {seed}: check after mounting again: {bad:#?}"));
}

/// Every file's name and final contents by the model.
fn final_contents(sh: &Shared, models: &[Vec<Vec<u8>>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for file in 0..SHARED {
        let mut bytes = Vec::with_capacity(SHARED_PAGES * PAGE_SIZE);
        for (slot, log) in sh.pages[file].iter().enumerate() {
            let last = log.committed.load(SeqCst);
            if log.zeros.lock().unwrap().last() == Some(&last) {
                bytes.extend_from_slice(&[0; SLOT]);
            } else {
                bytes.extend_from_slice(&stamp(file, slot..slot + 1, last));
            }
        }
        out.push((shared_name(file), bytes));
    }
    for (t, model) in models.iter().enumerate() {
        for (k, m) in model.iter().enumerate() {
            out.push((private_name(t, k), m.clone()));
        }
    }
    out
}

/// Every file of `want` reads (and stats) as the model says.
fn compare(fs: &Fs, want: &[(Vec<u8>, Vec<u8>)], seed: u64, when: &str) {
    for (name, m) in want {
        let name_s = String::from_utf8_lossy(name);
        let f = open(fs, name, libc::O_RDONLY);
        let size = fs.getattr(f.ino()).unwrap().size;
        assert_eq!(size, m.len() as u64, "seed {seed}, {when}: {name_s} size");
        let mut buf = vec![0u8; m.len() + 1];
        let n = fs.read(&f, 0, &mut buf).unwrap();
        assert_eq!(n, m.len(), "seed {seed}, {when}: {name_s} length read");
        if buf[..n] != m[..] {
            let at = buf.iter().zip(m).position(|(a, b)| a != b).unwrap();
            panic!(
                "seed {seed}, {when}: {name_s} byte {at} (page {}) is {:#x}, model {:#x}",
                at / PAGE_SIZE,
                buf[at],
                m[at]
            );
        }
    }
}

/// Runs of `variants` over the seeds, each under a watchdog: a run past
/// the hang limit fails the test (the stuck threads are left behind).
fn torture(variants: &str, runs: u64) {
    let ops = common::knob("LANEFS_TORTURE_OPS", 400);
    let first = common::knob("LANEFS_TORTURE_SEED", 1);
    let hang = Duration::from_secs(common::knob("LANEFS_TORTURE_HANG_S", 120));
    let v = Variants::parse(variants).unwrap();
    for seed in first..first + runs {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(|| run(v, seed, ops));
            let _ = tx.send(r);
        });
        match rx.recv_timeout(hang) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("torture {variants}: seed {seed} failed");
                std::panic::resume_unwind(e);
            }
            Err(_) => panic!("torture {variants}: seed {seed} hung for {hang:?}"),
        }
    }
}

#[test]
fn torture_default_variants() {
    torture("default", common::knob("LANEFS_TORTURE_RUNS", 5));
}

#[test]
fn torture_locked_reads() {
    torture("read=locked", common::knob("LANEFS_TORTURE_RUNS", 5));
}

/// Every other design of each mechanism (`Variants::baselines`), fewer
/// seeds each.
#[test]
fn torture_baselines() {
    for (name, _) in Variants::baselines() {
        if name != "read=locked" {
            torture(&name, common::knob("LANEFS_TORTURE_BASELINE_RUNS", 1));
        }
    }
}
