//! The workloads: an fxmark-style matrix and an fs_mark-like create.
//!
//! Each workload is written once against [`Backend`] and runs unchanged on
//! every target. Sharing levels follow fxmark: **L** (low) — each thread works
//! in its own directory or file; **M** (medium) — threads share a directory
//! or a file but touch different entries or blocks; **H** (high) — every
//! thread touches the same object.
//!
//! Setup (making directories, pre-creating and filling files, opening them)
//! happens before the start barrier and is not timed; see [`crate::harness`].
//! After the timed window each workload checks its post-condition (for
//! example: MWCL made exactly as many files as it counted) and fails the cell
//! if it does not hold.
//!
//! Workloads that consume or grow state (create, unlink, fs_mark) have a
//! budget of `files` objects per thread: the timed window ends at the
//! duration or when the first thread uses its budget up, whichever is first;
//! the measured rate covers the window actually timed.
//!
//! No state is shared between workers except the file system under test.

use crate::backend::{Backend, OpError, OpenMode};
use crate::harness::{measure, Measurement, Step};
use std::fmt::Write as _;
use std::time::Duration;

/// Size of a block for the data workloads.
pub const BLOCK_BYTES: usize = 4096;
/// Files per private directory in MRPL (a thread stats a random one).
pub const PRIVATE_FILES: usize = 16;
/// Files in a shared directory in MRPM (a thread stats a random one).
pub const SHARED_FILES: usize = 64;
/// Entries of the directory that MRDL / MRDM list.
pub const READDIR_ENTRIES: usize = 64;
/// DWAL appends this many blocks, then truncates its file back to zero
/// (untimed), so memory stays bounded: 4 MiB per thread.
pub const APPEND_BLOCKS_MAX: u64 = 1024;
/// Directory depth of the stat workloads' files (`a/b/c/file` below the
/// thread's or the shared directory).
pub const STAT_DEPTH: usize = 4;

macro_rules! workloads {
    (matrix { $($v:ident => $name:literal, $desc:literal;)* }
     seeds { $($sv:ident => $sname:literal, $sdesc:literal;)* }) => {
        /// A named workload.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Workload { $($v,)* $($sv,)* }

        impl Workload {
            /// Every workload, in report order: the matrix, then the seeds.
            pub const ALL: &'static [Workload] = &[$(Workload::$v,)* $(Workload::$sv,)*];
            /// The fxmark-style matrix and fs_mark (the default selection).
            pub const MATRIX: &'static [Workload] = &[$(Workload::$v,)*];
            /// The seeds' experiments (engine only; see [`crate::seeds`]).
            pub const SEEDS: &'static [Workload] = &[$(Workload::$sv,)*];

            /// The name used on the command line and in results.
            pub fn name(self) -> &'static str {
                match self { $(Workload::$v => $name,)* $(Workload::$sv => $sname,)* }
            }

            /// One line saying what the timed operation is.
            pub fn description(self) -> &'static str {
                match self { $(Workload::$v => $desc,)* $(Workload::$sv => $sdesc,)* }
            }
        }
    };
}

workloads! {
    matrix {
        Mrpl => "MRPL", "stat a file 4 levels deep, random one of 16 in a private directory";
        Mrpm => "MRPM", "stat a file 4 levels deep, random one of 64 in a shared directory";
        Mrph => "MRPH", "stat the same file 4 levels deep from every thread";
        Mrdl => "MRDL", "open, list and close a private directory of 64 files";
        Mrdm => "MRDM", "open, list and close a shared directory of 64 files";
        Mwcl => "MWCL", "create (and close) an empty file in a private directory";
        Mwcm => "MWCM", "create (and close) an empty file in a shared directory";
        Mwul => "MWUL", "unlink a pre-created file in a private directory";
        Mwum => "MWUM", "unlink a pre-created file in a shared directory";
        Mwrl => "MWRL", "rename a file back and forth in a private directory";
        Mwrm => "MWRM", "rename a file back and forth in a shared directory";
        Drbl => "DRBL", "pread 4 KiB of a private cached file";
        Drbm => "DRBM", "pread a thread's own 4 KiB block of a shared cached file";
        Drbh => "DRBH", "pread the same 4 KiB block of a shared cached file";
        Dwol => "DWOL", "pwrite 4 KiB over a private file's block";
        Dwom => "DWOM", "pwrite 4 KiB over a thread's own block of a shared file";
        Dwal => "DWAL", "append 4 KiB to a private file (reset to 0 every 4 MiB, untimed)";
        Dwtl => "DWTL", "ftruncate a private file alternately to 0 and 4 KiB";
        Fsmark => "FSMARK", "fs_mark: create a file in a private directory, write it, close";
        FsmarkSync => "FSMARK_SYNC", "fs_mark: create, write, fsync, close";
    }
    seeds {
        Seed000 => "seed000", "inode cache: stat-walk private trees larger than the inode-cache budget (cold lookups, inodes recycle)";
        Seed001 => "seed001", "instance lifecycle: new engine, create 4 files, drop; a reclaim thread scans the registry";
        Seed002Orphan => "seed002:stress-orphan", "orphan table: truncate an open private file byte by byte (each truncate is in the table for its length)";
        Seed002CreatClo => "seed002:creat_clo", "orphan table: reaim creat_clo, create-write-close-unlink a private file";
        Seed003Read => "seed003:read", "cached read: pread a random 4 KiB block of one shared cached file";
        Seed003ReadWriter => "seed003:read+writer", "cached read: the same while a writer thread overwrites another range";
        Seed004 => "seed004", "counters: create and unlink a file in a private directory (ops/s and CPU per op)";
    }
}

impl Workload {
    /// Parse a name (case-insensitive).
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL
            .iter()
            .copied()
            .find(|w| w.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Parse a name or a group: `seedNNN` (every part of that seed's
    /// experiment, e.g. `seed002` is `seed002:stress-orphan` and
    /// `seed002:creat_clo`), `seeds` (all of them), `matrix`.
    pub fn parse_group(s: &str) -> Option<Vec<Workload>> {
        let s = s.trim();
        if let Some(w) = Workload::parse(s) {
            return Some(vec![w]);
        }
        if s.eq_ignore_ascii_case("seeds") {
            return Some(Workload::SEEDS.to_vec());
        }
        if s.eq_ignore_ascii_case("matrix") {
            return Some(Workload::MATRIX.to_vec());
        }
        let lower = s.to_ascii_lowercase();
        let number = lower.strip_prefix("seed")?;
        let parts: Vec<Workload> = Workload::SEEDS
            .iter()
            .copied()
            .filter(|w| w.seed_number() == Some(number))
            .collect();
        (!parts.is_empty()).then_some(parts)
    }

    /// Whether this is one of the seeds' experiments.
    pub fn is_seed(self) -> bool {
        Workload::SEEDS.contains(&self)
    }

    /// `000` … `004` for a seed experiment.
    pub fn seed_number(self) -> Option<&'static str> {
        let n = self.name().strip_prefix("seed")?;
        Some(n.split(':').next().unwrap_or(n))
    }
}

/// Knobs of a workload run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Length of the timed window.
    pub duration: Duration,
    /// Budget of objects per thread for create / unlink / fs_mark.
    pub files: usize,
    /// Bytes each fs_mark file gets.
    pub fsmark_bytes: usize,
    /// Seed of the per-thread random choices.
    pub seed: u64,
}

/// Per-thread state of every workload (each uses the fields it needs).
pub struct ThreadState<F> {
    paths: Vec<String>,
    name: String,
    n: u64,
    rng: u64,
    file: Option<F>,
    buf: Vec<u8>,
}

impl<F> ThreadState<F> {
    fn new(seed: u64, tid: usize) -> ThreadState<F> {
        // splitmix64 of (seed, tid): distinct, non-zero xorshift states.
        let mut z = seed ^ (tid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ThreadState {
            paths: Vec::new(),
            name: String::with_capacity(64),
            n: 0,
            rng: z | 1,
            file: None,
            buf: vec![0u8; BLOCK_BYTES],
        }
    }

    /// xorshift64*.
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn file(&mut self) -> Result<&mut F, String> {
        self.file.as_mut().ok_or_else(|| "no open file".to_string())
    }
}

fn e(err: OpError) -> String {
    err.0
}

/// `mkdir -p` of `path` (relative).
pub fn mkdirs<B: Backend>(b: &B, path: &str) -> Result<(), String> {
    let mut at = 0;
    loop {
        let end = path[at..].find('/').map(|i| at + i).unwrap_or(path.len());
        let prefix = &path[..end];
        match b.stat(prefix) {
            Ok(m) if m.is_dir => {}
            Ok(_) => return Err(format!("{prefix}: not a directory")),
            Err(_) => b.mkdir(prefix).map_err(e)?,
        }
        if end == path.len() {
            return Ok(());
        }
        at = end + 1;
    }
}

/// Create `dir/f0` … `dir/f{n-1}` (empty) and return their paths.
fn make_files<B: Backend>(b: &B, dir: &str, prefix: &str, n: usize) -> Result<Vec<String>, String> {
    (0..n)
        .map(|i| {
            let p = format!("{dir}/{prefix}{i}");
            b.create(&p).map_err(e)?;
            Ok(p)
        })
        .collect()
}

/// The block every data workload writes: a recognisable pattern.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn stat_dir(base: &str) -> String {
    let mut d = base.to_string();
    for c in ["a", "b", "c"].iter().take(STAT_DEPTH - 1) {
        d.push('/');
        d.push_str(c);
    }
    d
}

fn expect(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(format!("post-condition failed: {}", what()))
    }
}

fn no_maintenance<F>(_: usize, _: &mut ThreadState<F>) -> Result<(), String> {
    Ok(())
}

/// Run `w` with `threads` workers on a fresh backend instance, check its
/// post-condition, and return the per-worker counts.
pub fn run<B: Backend>(
    b: &B,
    w: Workload,
    threads: usize,
    p: &Params,
) -> Result<Measurement, String> {
    if let Some(why) = b.unsupported(w) {
        return Err(format!("n/a: {why}"));
    }

    let d = p.duration;
    let budget = p.files as u64;
    let st = |t: usize| ThreadState::<B::File>::new(p.seed, t);
    let block = pattern(BLOCK_BYTES);
    let m = match w {
        Workload::Mrpl | Workload::Mrpm | Workload::Mrph => {
            let shared = stat_dir("s");
            match w {
                Workload::Mrpm => {
                    mkdirs(b, &shared)?;
                    make_files(b, &shared, "f", SHARED_FILES)?;
                }
                Workload::Mrph => {
                    mkdirs(b, &shared)?;
                    make_files(b, &shared, "f", 1)?;
                }
                _ => {}
            }
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    s.paths = match w {
                        Workload::Mrpl => {
                            let dir = stat_dir(&format!("t{t}"));
                            mkdirs(b, &dir)?;
                            make_files(b, &dir, "f", PRIVATE_FILES)?
                        }
                        Workload::Mrpm => (0..SHARED_FILES)
                            .map(|i| format!("{shared}/f{i}"))
                            .collect(),
                        _ => vec![format!("{shared}/f0")],
                    };
                    Ok(s)
                },
                |_, s| {
                    let i = (s.next() % s.paths.len() as u64) as usize;
                    let m = b.stat(&s.paths[i]).map_err(e)?;
                    if m.is_dir {
                        return Err(format!("{}: is a directory", s.paths[i]));
                    }
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            m
        }
        Workload::Mrdl | Workload::Mrdm => {
            if w == Workload::Mrdm {
                mkdirs(b, "s/d")?;
                make_files(b, "s/d", "f", READDIR_ENTRIES)?;
            }
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    let dir = if w == Workload::Mrdl {
                        let dir = format!("t{t}/d");
                        mkdirs(b, &dir)?;
                        make_files(b, &dir, "f", READDIR_ENTRIES)?;
                        dir
                    } else {
                        "s/d".to_string()
                    };
                    s.paths = vec![dir];
                    Ok(s)
                },
                |_, s| {
                    let n = b.readdir(&s.paths[0]).map_err(e)?;
                    if n != READDIR_ENTRIES {
                        return Err(format!(
                            "{}: {n} entries, expected {READDIR_ENTRIES}",
                            s.paths[0]
                        ));
                    }
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            m
        }
        Workload::Mwcl | Workload::Mwcm | Workload::Fsmark | Workload::FsmarkSync => {
            let shared = w == Workload::Mwcm;
            if shared {
                mkdirs(b, "s")?;
            }
            let data = pattern(p.fsmark_bytes);
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    let dir = if shared {
                        "s".to_string()
                    } else {
                        format!("t{t}")
                    };
                    if !shared {
                        mkdirs(b, &dir)?;
                    }
                    s.paths = vec![if shared {
                        format!("s/t{t}.")
                    } else {
                        format!("{dir}/f")
                    }];
                    Ok(s)
                },
                |_, s| {
                    if s.n >= budget {
                        return Ok(Step::Exhausted);
                    }
                    s.name.clear();
                    let _ = write!(s.name, "{}{}", s.paths[0], s.n);
                    match w {
                        Workload::Fsmark => b.create_write(&s.name, &data, false),
                        Workload::FsmarkSync => b.create_write(&s.name, &data, true),
                        _ => b.create(&s.name),
                    }
                    .map_err(e)?;
                    s.n += 1;
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            // Post-condition: every counted create made a file.
            if shared {
                let n = b.readdir("s").map_err(e)?;
                expect(n as u64 == m.total_ops(), || {
                    format!("s holds {n} files, {} were created", m.total_ops())
                })?;
            } else {
                for (t, &ops) in m.ops.iter().enumerate() {
                    let n = b.readdir(&format!("t{t}")).map_err(e)?;
                    expect(n as u64 == ops, || {
                        format!("t{t} holds {n} files, {ops} were created")
                    })?;
                }
                if matches!(w, Workload::Fsmark | Workload::FsmarkSync) && m.ops[0] > 0 {
                    let size = b.file_size("t0/f0").map_err(e)?;
                    expect(size == p.fsmark_bytes as u64, || {
                        format!("t0/f0 has {size} bytes, expected {}", p.fsmark_bytes)
                    })?;
                }
            }
            m
        }
        Workload::Mwul | Workload::Mwum => {
            let shared = w == Workload::Mwum;
            if shared {
                mkdirs(b, "s")?;
            }
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    let prefix = if shared {
                        format!("s/t{t}.")
                    } else {
                        mkdirs(b, &format!("t{t}"))?;
                        format!("t{t}/f")
                    };
                    for i in 0..budget {
                        s.name.clear();
                        let _ = write!(s.name, "{prefix}{i}");
                        b.create(&s.name).map_err(e)?;
                    }
                    s.paths = vec![prefix];
                    Ok(s)
                },
                |_, s| {
                    if s.n >= budget {
                        return Ok(Step::Exhausted);
                    }
                    s.name.clear();
                    let _ = write!(s.name, "{}{}", s.paths[0], s.n);
                    b.unlink(&s.name).map_err(e)?;
                    s.n += 1;
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            let left = |ops: u64| budget - ops;
            if shared {
                let n = b.readdir("s").map_err(e)? as u64;
                let want: u64 = m.ops.iter().map(|&o| left(o)).sum();
                expect(n == want, || format!("s holds {n} files, expected {want}"))?;
            } else {
                for (t, &ops) in m.ops.iter().enumerate() {
                    let n = b.readdir(&format!("t{t}")).map_err(e)? as u64;
                    expect(n == left(ops), || {
                        format!("t{t} holds {n} files, expected {}", left(ops))
                    })?;
                }
            }
            m
        }
        Workload::Mwrl | Workload::Mwrm => {
            let shared = w == Workload::Mwrm;
            if shared {
                mkdirs(b, "s")?;
            }
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    let (a, z) = if shared {
                        (format!("s/t{t}.a"), format!("s/t{t}.b"))
                    } else {
                        mkdirs(b, &format!("t{t}"))?;
                        (format!("t{t}/a"), format!("t{t}/b"))
                    };
                    b.create(&a).map_err(e)?;
                    s.paths = vec![a, z];
                    Ok(s)
                },
                |_, s| {
                    let (from, to) = if s.n % 2 == 0 { (0, 1) } else { (1, 0) };
                    b.rename(&s.paths[from], &s.paths[to]).map_err(e)?;
                    s.n += 1;
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            for (t, &ops) in m.ops.iter().enumerate() {
                let (a, z) = if shared {
                    (format!("s/t{t}.a"), format!("s/t{t}.b"))
                } else {
                    (format!("t{t}/a"), format!("t{t}/b"))
                };
                let (there, gone) = if ops % 2 == 0 { (a, z) } else { (z, a) };
                expect(b.stat(&there).is_ok() && b.stat(&gone).is_err(), || {
                    format!("after {ops} renames {there} should exist and {gone} not")
                })?;
            }
            m
        }
        Workload::Drbl | Workload::Drbm | Workload::Drbh | Workload::Dwol | Workload::Dwom => {
            let private = matches!(w, Workload::Drbl | Workload::Dwol);
            let write = matches!(w, Workload::Dwol | Workload::Dwom);
            if !private {
                mkdirs(b, "s")?;
                let blocks = if w == Workload::Drbh { 1 } else { threads };
                b.create_write("s/f", &pattern(blocks * BLOCK_BYTES), false)
                    .map_err(e)?;
            }
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    let path = if private {
                        mkdirs(b, &format!("t{t}"))?;
                        let path = format!("t{t}/f");
                        b.create_write(&path, &block, false).map_err(e)?;
                        path
                    } else {
                        "s/f".to_string()
                    };
                    let mode = if write {
                        OpenMode::ReadWrite
                    } else {
                        OpenMode::Read
                    };
                    s.file = Some(b.open(&path, mode).map_err(e)?);
                    // The block this thread touches.
                    s.n = if matches!(w, Workload::Drbm | Workload::Dwom) {
                        t as u64
                    } else {
                        0
                    };
                    s.paths = vec![path];
                    Ok(s)
                },
                |_, s| {
                    let off = s.n * BLOCK_BYTES as u64;
                    let n = if write {
                        let f = s.file.as_mut().ok_or("no open file")?;
                        b.pwrite(f, off, &block).map_err(e)?
                    } else {
                        let mut buf = std::mem::take(&mut s.buf);
                        let r = b.pread(s.file()?, off, &mut buf);
                        s.buf = buf;
                        r.map_err(e)?
                    };
                    if n != BLOCK_BYTES {
                        return Err(format!(
                            "{}: {n} bytes at {off}, expected {BLOCK_BYTES}",
                            s.paths[0]
                        ));
                    }
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            let want = if private || w == Workload::Drbh {
                BLOCK_BYTES
            } else {
                threads * BLOCK_BYTES
            } as u64;
            let path = if private { "t0/f" } else { "s/f" };
            let size = b.file_size(path).map_err(e)?;
            expect(size == want, || {
                format!("{path} has {size} bytes, expected {want}")
            })?;
            m
        }
        Workload::Dwal => {
            let (m, states) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    mkdirs(b, &format!("t{t}"))?;
                    let path = format!("t{t}/f");
                    b.create(&path).map_err(e)?;
                    s.file = Some(b.open(&path, OpenMode::Append).map_err(e)?);
                    s.paths = vec![path];
                    Ok(s)
                },
                |_, s| {
                    let f = s.file.as_mut().ok_or("no open file")?;
                    let n = b.append(f, &block).map_err(e)?;
                    if n != BLOCK_BYTES {
                        return Err(format!("{}: short append ({n} bytes)", s.paths[0]));
                    }
                    s.n += 1;
                    if s.n % APPEND_BLOCKS_MAX == 0 {
                        Ok(Step::OpThenMaintain)
                    } else {
                        Ok(Step::Op)
                    }
                },
                |_, s: &mut ThreadState<B::File>| {
                    // Untimed: start the file over at size 0.
                    if let Some(f) = s.file.take() {
                        b.close(f);
                    }
                    b.reset(&s.paths[0]).map_err(e)?;
                    s.file = Some(b.open(&s.paths[0], OpenMode::Append).map_err(e)?);
                    Ok(())
                },
            )?;
            for s in states {
                if let Some(f) = s.file {
                    b.close(f);
                }
            }
            for (t, &ops) in m.ops.iter().enumerate() {
                let size = b.file_size(&format!("t{t}/f")).map_err(e)?;
                let want = (ops % APPEND_BLOCKS_MAX) * BLOCK_BYTES as u64;
                expect(size == want, || {
                    format!("t{t}/f has {size} bytes after {ops} appends, expected {want}")
                })?;
            }
            m
        }
        Workload::Dwtl => {
            let (m, _) = measure(
                threads,
                d,
                |t| {
                    let mut s = st(t);
                    mkdirs(b, &format!("t{t}"))?;
                    let path = format!("t{t}/f");
                    b.create_write(&path, &block, false).map_err(e)?;
                    s.file = Some(b.open(&path, OpenMode::ReadWrite).map_err(e)?);
                    Ok(s)
                },
                |_, s| {
                    let size = if s.n % 2 == 0 { 0 } else { BLOCK_BYTES as u64 };
                    let f = s.file.as_mut().ok_or("no open file")?;
                    b.truncate(f, size).map_err(e)?;
                    s.n += 1;
                    Ok(Step::Op)
                },
                no_maintenance,
            )?;
            for (t, &ops) in m.ops.iter().enumerate() {
                let size = b.file_size(&format!("t{t}/f")).map_err(e)?;
                let want = if ops == 0 || ops % 2 == 0 {
                    BLOCK_BYTES as u64
                } else {
                    0
                };
                expect(size == want, || {
                    format!("t{t}/f has {size} bytes after {ops} truncates, expected {want}")
                })?;
            }
            m
        }
        Workload::Seed000
        | Workload::Seed001
        | Workload::Seed002Orphan
        | Workload::Seed002CreatClo
        | Workload::Seed003Read
        | Workload::Seed003ReadWriter
        | Workload::Seed004 => return Err(format!("n/a: {}", crate::seeds::ENGINE_ONLY)),
    };
    Ok(m)
}
