//! The seeds' experiments (`seed000` … `seed004`): one workload per seed
//! mechanism, run on the engine in process under each `--variant`, so that
//! the default design and the seed's "before" designs are measured side by
//! side in one interleaved run.
//!
//! | workload | what a timed operation is | mechanism compared |
//! |---|---|---|
//! | `seed000` | stat the next file of the thread's private tree (a walk from the root), with an inode-cache budget far below the trees, so lookups miss and inodes recycle | `icache` |
//! | `seed001` | a whole instance lifecycle: `Fs::new` on a fresh `MemoryStore`, create [`SEED001_FILES`] files, drop — while a reclaim thread scans the registry without pause; each drop is timed on its own for p50/p99 | `reclaim` |
//! | `seed002:stress-orphan` | truncate an open private file by one byte (each shrinking truncate enters and leaves the orphan table, as in ext4); when it reaches 0 it is closed and removed and the next one made and opened | `orphan` |
//! | `seed002:creat_clo` | reaim `creat_clo`: create a private file, write 4 KiB, close, unlink | `orphan` |
//! | `seed003:read` | pread a random 4 KiB block of the first half of one shared cached file | `read` |
//! | `seed003:read+writer` | the same while one more thread overwrites the second half | `read` |
//! | `seed004` | create and unlink a file in the thread's private directory; CPU per operation from the threads' CPU clocks | `counter` |
//!
//! Every workload checks a post-condition after its window (`Fs::check()`
//! passes; files counted are there or gone) and fails the cell if it does
//! not hold.
//!
//! Shared state, besides the engine under test: seed001's and seed003's
//! background thread stops on an [`AtomicBool`] (`Relaxed`: a flag, it
//! orders nothing; the scoped join is the synchronisation) and counts its
//! passes in an [`AtomicU64`] (`Relaxed`), which the coordinator polls
//! until the first pass is done before the timed window opens, so the
//! background work really overlaps the measured operations.

pub mod published;
pub mod report;

use crate::backend::inproc::Inproc;
use crate::backend::{Backend, OpenMode};
use crate::harness::{measure, Measurement, Step};
use crate::workload::{mkdirs, Params, Workload, BLOCK_BYTES};
use lanefs::{FsConfig, Variants};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Why a seed workload is n/a on targets other than `inproc`.
pub const ENGINE_ONLY: &str =
    "the seed experiments measure the engine's internal designs (inproc only)";

/// seed000: directories in each thread's private tree.
pub const SEED000_DIRS: usize = 16;
/// seed000: files in each of those directories (the tree is
/// `tT/dD/fF`: [`SEED000_DIRS`] × this many files per thread).
pub const SEED000_FILES_PER_DIR: usize = 64;
/// seed000: the inode-cache budget (`FsConfig::cache_inodes_max`), a
/// quarter of one thread's tree.
pub const SEED000_CACHE_INODES: usize = 256;
/// seed000 post-condition: the cache holds at most this many times its
/// budget (eviction kept up; otherwise lookups were not cold).
pub const SEED000_CACHE_SLACK: usize = 4;
/// seed001: files created in each instance before it is dropped.
pub const SEED001_FILES: usize = 4;
/// seed001: objects the reclaim thread asks each scan to free.
pub const SEED001_SCAN_NR: usize = 128;
/// seed002 stress-orphan: bytes a file starts with (truncated one byte at a
/// time: each truncate adds the file to the orphan table and removes it).
pub const SEED002_FILE_BYTES: u64 = 16;
/// seed003: blocks of the shared file; readers use the first half, the
/// writer the second.
pub const SEED003_BLOCKS: u64 = 64;

/// The mechanism a seed workload compares, as `Variants` names it.
pub fn mechanism(w: Workload) -> Option<&'static str> {
    Some(match w.seed_number()? {
        "000" => "icache",
        "001" => "reclaim",
        "002" => "orphan",
        "003" => "read",
        "004" => "counter",
        _ => return None,
    })
}

/// The seed's "before" design: the variant each ratio divides by.
pub fn before_design(w: Workload) -> Option<&'static str> {
    Some(match w.seed_number()? {
        "000" => "icache=global",
        "001" => "reclaim=sync-grace",
        "002" => "orphan=locked",
        "003" => "read=locked",
        "004" => "counter=exact-compare",
        _ => return None,
    })
}

/// Whether `variant` (a canonical variant string) is one `--variant seeds`
/// runs for `w`: the default, and for a seed workload its own mechanism's
/// baselines.
pub fn in_seed_scope(w: Workload, variant: &str) -> bool {
    if variant == Variants::default().to_string() {
        return true;
    }
    match mechanism(w) {
        Some(m) => Variants::baselines_of(m).iter().any(|(n, _)| n == variant),
        None => false,
    }
}

fn e(err: crate::backend::OpError) -> String {
    err.0
}

/// Fresh names `t<T>/f0`, `t<T>/f1`, … in thread `T`'s private directory,
/// made without allocating per name.
struct PrivateNames {
    prefix: String,
    name: String,
    n: u64,
}

impl PrivateNames {
    /// Make thread `t`'s directory and start its names at 0.
    fn new(b: &Inproc, t: usize) -> Result<PrivateNames, String> {
        let dir = format!("t{t}");
        mkdirs(b, &dir)?;
        Ok(PrivateNames {
            prefix: format!("{dir}/f"),
            name: String::with_capacity(32),
            n: 0,
        })
    }

    fn next(&mut self) -> &str {
        self.name.clear();
        let _ = write!(self.name, "{}{}", self.prefix, self.n);
        self.n += 1;
        &self.name
    }
}

/// Post-condition of the create-and-unlink loops: every thread's private
/// directory is empty again.
fn private_dirs_empty(b: &Inproc, threads: usize) -> Result<(), String> {
    for t in 0..threads {
        let n = b.readdir(&format!("t{t}")).map_err(e)?;
        if n != 0 {
            return Err(format!("post-condition failed: t{t} holds {n} files"));
        }
    }
    Ok(())
}

fn engine(variants: Variants, config: FsConfig) -> Result<Inproc, String> {
    Inproc::with_config(FsConfig { variants, ..config })
}

/// Run seed workload `w` with `threads` workers on fresh engines of
/// `variant`, check its post-condition, and return the counts.
pub fn run(variant: &str, w: Workload, threads: usize, p: &Params) -> Result<Measurement, String> {
    let variants = Variants::parse(variant).map_err(|e| format!("variant {variant:?}: {e}"))?;
    match w {
        Workload::Seed000 => seed000(variants, threads, p),
        Workload::Seed001 => seed001(variants, threads, p),
        Workload::Seed002Orphan => seed002_orphan(variants, threads, p),
        Workload::Seed002CreatClo => seed002_creat_clo(variants, threads, p),
        Workload::Seed003Read => seed003(variants, threads, p, false),
        Workload::Seed003ReadWriter => seed003(variants, threads, p, true),
        Workload::Seed004 => seed004(variants, threads, p),
        _ => Err(format!("{} is not a seed workload", w.name())),
    }
}

fn check(b: &Inproc) -> Result<(), String> {
    b.fs()
        .check()
        .map_err(|problems| format!("post-condition failed: Fs::check: {problems:?}"))
}

fn seed000(variants: Variants, threads: usize, p: &Params) -> Result<Measurement, String> {
    let b = engine(
        variants,
        FsConfig {
            cache_inodes_max: SEED000_CACHE_INODES,
            ..FsConfig::default()
        },
    )?;
    let per_thread = SEED000_DIRS * SEED000_FILES_PER_DIR;
    let (m, _) = measure(
        threads,
        p.duration,
        |t| {
            let mut paths = Vec::with_capacity(per_thread);
            for d in 0..SEED000_DIRS {
                let dir = format!("t{t}/d{d}");
                mkdirs(&b, &dir)?;
                for f in 0..SEED000_FILES_PER_DIR {
                    let path = format!("{dir}/f{f}");
                    b.create(&path).map_err(e)?;
                    paths.push(path);
                }
            }
            // Start cold: creating the tree cached every inode (creation
            // does not count against the budget; loads do).
            b.fs().shrink();
            Ok((paths, 0usize))
        },
        |_, (paths, next)| {
            let path = &paths[*next];
            let meta = b.stat(path).map_err(e)?;
            if meta.is_dir || meta.size != 0 {
                return Err(format!("{path}: not an empty file"));
            }
            *next = (*next + 1) % paths.len();
            Ok(Step::Op)
        },
        |_, _| Ok(()),
    )?;
    let (cached, _) = b.fs().cache_counts();
    if cached > SEED000_CACHE_SLACK * SEED000_CACHE_INODES {
        return Err(format!(
            "post-condition failed: {cached} inodes cached with a budget of {SEED000_CACHE_INODES}"
        ));
    }
    check(&b)?;
    Ok(m)
}

/// One scan of the process-wide registry that the instances of
/// `variants` join (one per reclaim design), as a memory-pressure reclaim
/// pass would make it.
fn scan_registry(variants: Variants) -> usize {
    lanefs::registry(variants.reclaim).shrink_all(SEED001_SCAN_NR)
}

fn seed001(variants: Variants, threads: usize, p: &Params) -> Result<Measurement, String> {
    let stop = AtomicBool::new(false);
    let scans = AtomicU64::new(0);
    // The reclaim thread's CPU seconds (f64 bits), refreshed every
    // `CPU_EVERY` scans: its share of the window shows how much of the two
    // cores the workers had to share with it.
    let scanner_cpu = AtomicU64::new(0);
    const CPU_EVERY: u64 = 256;
    let config = FsConfig {
        variants,
        ..FsConfig::default()
    };
    let result = std::thread::scope(|scope| {
        let reclaim = scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                scan_registry(variants);
                if scans
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(CPU_EVERY)
                {
                    let cpu = crate::harness::thread_cpu_secs();
                    scanner_cpu.store(cpu.to_bits(), Ordering::Relaxed);
                }
            }
        });
        // Time only while the reclaim thread is really scanning.
        while scans.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let (scans0, t0) = (scans.load(Ordering::Relaxed), Instant::now());
        let cpu0 = f64::from_bits(scanner_cpu.load(Ordering::Relaxed));
        let r = measure(
            threads,
            p.duration,
            |_| Ok((Vec::<u64>::new(), String::with_capacity(16))),
            |_, (latencies, name)| {
                let b = Inproc::with_config(config.clone())?;
                for i in 0..SEED001_FILES {
                    name.clear();
                    let _ = write!(name, "f{i}");
                    b.create(name).map_err(e)?;
                }
                let n = b.readdir("").map_err(e)?;
                if n != SEED001_FILES {
                    return Err(format!("instance holds {n} files, {SEED001_FILES} made"));
                }
                let t0 = Instant::now();
                drop(b);
                latencies.push(t0.elapsed().as_nanos() as u64);
                Ok(Step::Op)
            },
            |_, _| Ok(()),
        );
        let window = t0.elapsed().as_secs_f64();
        let scans_per_sec = (scans.load(Ordering::Relaxed) - scans0) as f64 / window;
        let scanner_share =
            (f64::from_bits(scanner_cpu.load(Ordering::Relaxed)) - cpu0).max(0.0) / window;
        stop.store(true, Ordering::Relaxed);
        let joined = reclaim.join();
        joined.map_err(|_| "the reclaim thread panicked".to_string())?;
        r.map(|(mut m, states)| {
            m.aux_per_sec = Some(scans_per_sec);
            m.aux_cpu_share = Some(scanner_share);
            (m, states)
        })
    });
    let (mut m, states) = result?;
    for (latencies, _) in states {
        m.latency_ns.extend(latencies);
    }
    if m.latency_ns.len() as u64 != m.total_ops() {
        return Err(format!(
            "post-condition failed: {} drop latencies for {} instances",
            m.latency_ns.len(),
            m.total_ops()
        ));
    }
    Ok(m)
}

/// seed002 stress-orphan per-thread state.
struct OrphanState<F> {
    dir: String,
    name: String,
    made: u64,
    file: Option<F>,
    size: u64,
}

/// Make the next file of `s`: close and remove the spent one, then create
/// the next with [`SEED002_FILE_BYTES`] bytes and open it. As in the
/// seed's stress-orphan, the files stay linked: every truncate that
/// shrinks one puts it in the orphan table for its length.
fn next_orphan(b: &Inproc, s: &mut OrphanState<<Inproc as Backend>::File>) -> Result<(), String> {
    if let Some(f) = s.file.take() {
        b.close(f);
        b.unlink(&s.name).map_err(e)?;
    }
    s.name.clear();
    let _ = write!(s.name, "{}/f{}", s.dir, s.made);
    s.made += 1;
    let data = vec![0x5a; SEED002_FILE_BYTES as usize];
    b.create_write(&s.name, &data, false).map_err(e)?;
    s.file = Some(b.open(&s.name, OpenMode::ReadWrite).map_err(e)?);
    s.size = SEED002_FILE_BYTES;
    Ok(())
}

fn seed002_orphan(variants: Variants, threads: usize, p: &Params) -> Result<Measurement, String> {
    let b = engine(variants, FsConfig::default())?;
    let (m, states) = measure(
        threads,
        p.duration,
        |t| {
            let dir = format!("t{t}");
            mkdirs(&b, &dir)?;
            let mut s = OrphanState {
                dir,
                name: String::with_capacity(32),
                made: 0,
                file: None,
                size: 0,
            };
            next_orphan(&b, &mut s)?;
            Ok(s)
        },
        |_, s| {
            if s.size == 0 {
                next_orphan(&b, s)?;
            }
            s.size -= 1;
            let f = s.file.as_mut().ok_or("no open file")?;
            b.truncate(f, s.size).map_err(e)?;
            Ok(Step::Op)
        },
        |_, _| Ok(()),
    )?;
    for (t, s) in states.into_iter().enumerate() {
        if let Some(f) = s.file {
            b.close(f);
            b.unlink(&s.name).map_err(e)?;
        }
        let n = b.readdir(&format!("t{t}")).map_err(e)?;
        if n != 0 {
            return Err(format!("post-condition failed: t{t} holds {n} files"));
        }
    }
    check(&b)?;
    Ok(m)
}

fn seed002_creat_clo(
    variants: Variants,
    threads: usize,
    p: &Params,
) -> Result<Measurement, String> {
    let b = engine(variants, FsConfig::default())?;
    let block = vec![0xa5u8; BLOCK_BYTES];
    let (m, _) = measure(
        threads,
        p.duration,
        |t| PrivateNames::new(&b, t),
        |_, names| {
            let name = names.next();
            b.create_write(name, &block, false).map_err(e)?;
            b.unlink(name).map_err(e)?;
            Ok(Step::Op)
        },
        |_, _| Ok(()),
    )?;
    private_dirs_empty(&b, threads)?;
    check(&b)?;
    Ok(m)
}

/// The byte at `offset` of the seed003 file.
fn seed003_byte(offset: u64) -> u8 {
    (offset % 251) as u8
}

fn seed003(
    variants: Variants,
    threads: usize,
    p: &Params,
    writer: bool,
) -> Result<Measurement, String> {
    let b = engine(variants, FsConfig::default())?;
    let bytes = SEED003_BLOCKS * BLOCK_BYTES as u64;
    let content: Vec<u8> = (0..bytes).map(seed003_byte).collect();
    mkdirs(&b, "s")?;
    b.create_write("s/f", &content, false).map_err(e)?;
    // Read it all once so that every page is cached before timing.
    {
        let mut f = b.open("s/f", OpenMode::Read).map_err(e)?;
        let mut buf = vec![0u8; BLOCK_BYTES];
        for blk in 0..SEED003_BLOCKS {
            b.pread(&mut f, blk * BLOCK_BYTES as u64, &mut buf)
                .map_err(e)?;
        }
        b.close(f);
    }
    let reader_blocks = SEED003_BLOCKS / 2;
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let result = std::thread::scope(|scope| {
        let bg = writer.then(|| {
            scope.spawn(|| -> Result<(), String> {
                let mut f = b.open("s/f", OpenMode::ReadWrite).map_err(e)?;
                let mut blk = reader_blocks;
                while !stop.load(Ordering::Relaxed) {
                    let off = blk * BLOCK_BYTES as u64;
                    let range = off as usize..off as usize + BLOCK_BYTES;
                    b.pwrite(&mut f, off, &content[range]).map_err(e)?;
                    writes.fetch_add(1, Ordering::Relaxed);
                    blk = if blk + 1 == SEED003_BLOCKS {
                        reader_blocks
                    } else {
                        blk + 1
                    };
                }
                b.close(f);
                Ok(())
            })
        });
        // Time only while the writer is really writing (or has failed).
        while let Some(h) = &bg {
            if writes.load(Ordering::Relaxed) > 0 || h.is_finished() {
                break;
            }
            std::thread::yield_now();
        }
        let r = measure(
            threads,
            p.duration,
            |t| {
                let f = b.open("s/f", OpenMode::Read).map_err(e)?;
                // xorshift64 state: distinct, non-zero per thread.
                let rng = (p.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
                Ok((f, vec![0u8; BLOCK_BYTES], rng))
            },
            |_, (f, buf, rng)| {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                let off = (*rng % reader_blocks) * BLOCK_BYTES as u64;
                let n = b.pread(f, off, buf).map_err(e)?;
                let last = off + BLOCK_BYTES as u64 - 1;
                if n != BLOCK_BYTES
                    || buf[0] != seed003_byte(off)
                    || buf[BLOCK_BYTES - 1] != seed003_byte(last)
                {
                    return Err(format!("s/f: wrong data ({n} bytes) at {off}"));
                }
                Ok(Step::Op)
            },
            |_, _| Ok(()),
        );
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = bg {
            h.join()
                .map_err(|_| "the writer thread panicked".to_string())??;
        }
        r
    });
    let (m, states) = result?;
    for (f, _, _) in states {
        b.close(f);
    }
    let size = b.file_size("s/f").map_err(e)?;
    if size != bytes {
        return Err(format!(
            "post-condition failed: s/f has {size} bytes, expected {bytes}"
        ));
    }
    check(&b)?;
    Ok(m)
}

fn files_free(b: &Inproc) -> Result<u64, String> {
    Ok(b.fs()
        .statfs()
        .map_err(|e| format!("statfs: {e:?}"))?
        .files_free)
}

fn seed004(variants: Variants, threads: usize, p: &Params) -> Result<Measurement, String> {
    let b = engine(variants, FsConfig::default())?;
    let free_at_start = files_free(&b)?;
    let (m, _) = measure(
        threads,
        p.duration,
        |t| PrivateNames::new(&b, t),
        |_, names| {
            let name = names.next();
            b.create(name).map_err(e)?;
            b.unlink(name).map_err(e)?;
            Ok(Step::Op)
        },
        |_, _| Ok(()),
    )?;
    private_dirs_empty(&b, threads)?;
    // The free-inode counter is exact again: only the directories remain.
    let free_at_end = files_free(&b)?;
    if free_at_end + threads as u64 != free_at_start {
        return Err(format!(
            "post-condition failed: {free_at_end} inodes free, expected {} ({free_at_start} less {threads} directories)",
            free_at_start - threads as u64
        ));
    }
    check(&b)?;
    Ok(m)
}
