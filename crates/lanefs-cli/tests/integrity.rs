//! Data integrity through a real mount: fio with crc32c verification, and
//! an fsx-style random-operation checker (write, truncate, punch hole, zero
//! range, fallocate, mmap read/write, read back) against an in-memory model.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use common::*;

fn fio(m: &TestMount, name: &str, args: &[&str]) {
    let fio = require_tool("fio");
    let dir = m.path(name);
    std::fs::create_dir(&dir).unwrap();
    let out = run_timeout(
        240,
        Command::new(fio)
            .arg(format!("--name={name}"))
            .arg(format!("--directory={}", dir.display()))
            // fio saves its verify state (`*-verify.state`) in the working
            // directory: keep it on the mount, out of the source tree.
            .current_dir(&dir)
            .args(["--bs=4k", "--verify_fatal=1", "--exitall_on_error=1"])
            .args(args),
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "fio {name} failed:\n{}", show(&out));
    assert!(!text.contains("verify: bad"), "fio {name}: {}", show(&out));
    for l in text.lines().filter(|l| l.contains("err=")) {
        assert!(l.contains("err= 0"), "fio {name}: {l}\n{}", show(&out));
    }
}

fn fio_verify_crc32c() {
    let m = TestMount::new("fio");
    // Random writes, then read everything back and check each block's crc.
    fio(
        &m,
        "randwrite",
        &[
            "--rw=randwrite",
            "--size=32M",
            "--numjobs=2",
            "--ioengine=psync",
            "--verify=crc32c",
            "--do_verify=1",
        ],
    );
    // Mixed random reads and writes, verifying as it goes.
    fio(
        &m,
        "randrw",
        &[
            "--rw=randrw",
            "--size=16M",
            "--numjobs=2",
            "--ioengine=psync",
            "--bssplit=4k/50:16k/30:64k/20",
            "--verify=crc32c",
            "--verify_backlog=64",
        ],
    );
    // Trims: fio's sync engines trim only block devices (BLKDISCARD), so
    // trims on a file go through the falloc engine (punch hole); the
    // punched data's contents are checked by the fsx test below.
    fio(
        &m,
        "randtrim",
        &["--rw=randtrim", "--size=16M", "--ioengine=falloc"],
    );
    fio(
        &m,
        "falloc-mix",
        &[
            "--rw=randrw",
            "--size=16M",
            "--ioengine=falloc",
            "--numjobs=2",
        ],
    );
    // Direct I/O with a deeper queue, verified.
    fio(
        &m,
        "direct",
        &[
            "--rw=randwrite",
            "--size=8M",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
            "--verify=crc32c",
        ],
    );
}

const FSX_FILE_BYTES_MAX: u64 = 512 << 10;
const FSX_OP_BYTES_MAX: u64 = 64 << 10;
const PAGE: u64 = 4096;

struct Fsx {
    fd: i32,
    path: CString,
    model: Vec<u8>,
    rng: Rng,
    log: Vec<String>,
    seed: u64,
    ops: u64,
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Fsx {
    fn open(path: &Path) -> i32 {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C string; flags and mode are plain ints.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644) };
        assert!(fd >= 0, "open: {}", errno());
        fd
    }

    fn fail(&self, what: String) -> ! {
        let tail: Vec<_> = self.log.iter().rev().take(25).rev().cloned().collect();
        panic!(
            "fsx failed after {} ops (seed {:#x}, LANEFS_FSX_SEED to replay): {what}\nlast ops:\n{}",
            self.ops,
            self.seed,
            tail.join("\n")
        );
    }

    fn note(&mut self, s: String) {
        if self.log.len() >= 1000 {
            self.log.drain(..500);
        }
        self.log.push(s);
    }

    fn check_size(&self) {
        // SAFETY: zeroed stat is a valid out-buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is a valid out pointer.
        if unsafe { libc::fstat(self.fd, &mut st) } != 0 {
            self.fail(format!("fstat: {}", errno()));
        }
        if st.st_size as u64 != self.model.len() as u64 {
            self.fail(format!(
                "size {} but model has {}",
                st.st_size,
                self.model.len()
            ));
        }
    }

    fn compare(&self, off: u64, got: &[u8], how: &str) {
        let off = off as usize;
        let want_end = (off + got.len()).min(self.model.len());
        let want = if off < self.model.len() {
            &self.model[off..want_end]
        } else {
            &[][..]
        };
        if got.len() != want.len() {
            self.fail(format!(
                "{how} at {off}: got {} bytes, model has {}",
                got.len(),
                want.len()
            ));
        }
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            self.fail(format!(
                "{how}: byte {} is {:#x}, model says {:#x}",
                off + i,
                got[i],
                want[i]
            ));
        }
    }

    fn set_len(&mut self, n: u64) {
        self.model.resize(n as usize, 0);
    }

    fn op_write(&mut self) {
        let off = self.rng.below(FSX_FILE_BYTES_MAX);
        let len = 1 + self
            .rng
            .below(FSX_OP_BYTES_MAX.min(FSX_FILE_BYTES_MAX - off));
        let fill = (self.ops & 0xff) as u8;
        let data: Vec<u8> = (0..len)
            .map(|i| fill.wrapping_add((i % 251) as u8) ^ 0x5a)
            .collect();
        self.note(format!("write {off}+{len}"));
        // SAFETY: data is valid for len bytes.
        let n = unsafe { libc::pwrite(self.fd, data.as_ptr().cast(), len as usize, off as i64) };
        if n != len as isize {
            self.fail(format!("pwrite {off}+{len} returned {n}: {}", errno()));
        }
        if off + len > self.model.len() as u64 {
            self.set_len(off + len);
        }
        self.model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }

    fn op_read(&mut self) {
        let off = self.rng.below(FSX_FILE_BYTES_MAX + PAGE);
        let len = 1 + self.rng.below(FSX_OP_BYTES_MAX);
        self.note(format!("read {off}+{len}"));
        let mut buf = vec![0u8; len as usize];
        // SAFETY: buf is valid for len bytes.
        let n = unsafe { libc::pread(self.fd, buf.as_mut_ptr().cast(), len as usize, off as i64) };
        if n < 0 {
            self.fail(format!("pread: {}", errno()));
        }
        buf.truncate(n as usize);
        self.compare(off, &buf, "read");
    }

    fn op_truncate(&mut self) {
        let n = self.rng.below(FSX_FILE_BYTES_MAX);
        self.note(format!("truncate {n}"));
        // SAFETY: fd is open.
        if unsafe { libc::ftruncate(self.fd, n as i64) } != 0 {
            self.fail(format!("ftruncate {n}: {}", errno()));
        }
        self.set_len(n);
    }

    fn op_fallocate(&mut self, mode: i32, name: &str) {
        let off = self.rng.below(FSX_FILE_BYTES_MAX);
        let len = 1 + self
            .rng
            .below(FSX_OP_BYTES_MAX.min(FSX_FILE_BYTES_MAX - off));
        self.note(format!("{name} {off}+{len}"));
        // SAFETY: fd is open.
        if unsafe { libc::fallocate(self.fd, mode, off as i64, len as i64) } != 0 {
            self.fail(format!("fallocate({name}) {off}+{len}: {}", errno()));
        }
        let end = off + len;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let zero = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        let old = self.model.len() as u64;
        if zero {
            let z_end = end.min(old) as usize;
            if (off as usize) < z_end {
                self.model[off as usize..z_end].fill(0);
            }
        }
        if !keep && end > old {
            self.set_len(end);
        }
    }

    fn map(&self, off: u64, len: u64, prot: i32) -> (*mut u8, usize, usize) {
        let pg = off & !(PAGE - 1);
        let map_len = (off + len - pg) as usize;
        // SAFETY: a fresh shared mapping of an open fd; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                prot,
                libc::MAP_SHARED,
                self.fd,
                pg as i64,
            )
        };
        if p == libc::MAP_FAILED {
            self.fail(format!("mmap {off}+{len}: {}", errno()));
        }
        (p.cast(), map_len, (off - pg) as usize)
    }

    fn op_mapread(&mut self) {
        let size = self.model.len() as u64;
        if size == 0 {
            return;
        }
        let off = self.rng.below(size);
        let len = 1 + self.rng.below(FSX_OP_BYTES_MAX.min(size - off));
        self.note(format!("mapread {off}+{len}"));
        let (p, map_len, delta) = self.map(off, len, libc::PROT_READ);
        // SAFETY: [delta, delta+len) lies inside the mapping, which lies
        // inside the file (off+len <= size), so no SIGBUS.
        let got = unsafe { std::slice::from_raw_parts(p.add(delta), len as usize) }.to_vec();
        // SAFETY: unmapping exactly what was mapped.
        unsafe { libc::munmap(p.cast(), map_len) };
        self.compare(off, &got, "mapread");
    }

    fn op_mapwrite(&mut self) {
        let off = self.rng.below(FSX_FILE_BYTES_MAX - 1);
        let len = 1 + self
            .rng
            .below(FSX_OP_BYTES_MAX.min(FSX_FILE_BYTES_MAX - off));
        self.note(format!("mapwrite {off}+{len}"));
        let end = off + len;
        if end > self.model.len() as u64 {
            // Grow first: stores past EOF in a mapping are lost (SIGBUS).
            // SAFETY: fd is open.
            if unsafe { libc::ftruncate(self.fd, end as i64) } != 0 {
                self.fail(format!("ftruncate (mapwrite) {end}: {}", errno()));
            }
            self.set_len(end);
        }
        let fill = (self.ops & 0xff) as u8;
        let data: Vec<u8> = (0..len).map(|i| fill ^ (i % 253) as u8 ^ 0xa5).collect();
        let (p, map_len, delta) = self.map(off, len, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the range lies inside the writable mapping and the file.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(delta), len as usize);
            if libc::msync(p.cast(), map_len, libc::MS_SYNC) != 0 {
                self.fail(format!("msync: {}", errno()));
            }
            libc::munmap(p.cast(), map_len);
        }
        self.model[off as usize..end as usize].copy_from_slice(&data);
    }

    fn full_check(&mut self) {
        self.note("check".into());
        self.check_size();
        let mut buf = vec![0u8; self.model.len() + 1];
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::pread(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            self.fail(format!("pread: {}", errno()));
        }
        buf.truncate(n as usize);
        self.compare(0, &buf, "full read");
    }

    fn reopen(&mut self) {
        self.note("close+reopen".into());
        // SAFETY: fd is open and ours.
        unsafe { libc::close(self.fd) };
        let p = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(self.path.as_bytes()));
        self.fd = Self::open(&p);
    }

    fn step(&mut self) {
        self.ops += 1;
        match self.rng.below(100) {
            0..=21 => self.op_write(),
            22..=39 => self.op_read(),
            40..=46 => self.op_truncate(),
            47..=54 => self.op_fallocate(
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                "punch",
            ),
            55..=58 => self.op_fallocate(libc::FALLOC_FL_ZERO_RANGE, "zero"),
            59..=60 => self.op_fallocate(
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                "zero-keep",
            ),
            61..=63 => self.op_fallocate(0, "falloc"),
            64..=65 => self.op_fallocate(libc::FALLOC_FL_KEEP_SIZE, "falloc-keep"),
            66..=79 => self.op_mapread(),
            80..=93 => self.op_mapwrite(),
            94..=96 => {
                self.note("fsync".into());
                // SAFETY: fd is open.
                if unsafe { libc::fsync(self.fd) } != 0 {
                    self.fail(format!("fsync: {}", errno()));
                }
            }
            97 => self.reopen(),
            _ => self.full_check(),
        }
        if self.ops & 15 == 0 {
            self.check_size();
        }
    }
}

fn fsx_random_ops_match_model() {
    let ops = env_count("LANEFS_FSX_OPS", 100_000);
    let seed = env_seed("LANEFS_FSX_SEED");
    eprintln!("fsx: {ops} ops, seed {seed:#x}");
    let m = TestMount::new("fsx");
    let path = m.path("fsx.data");
    let fd = Fsx::open(&path);
    let mut f = Fsx {
        fd,
        path: CString::new(path.as_os_str().as_bytes()).unwrap(),
        model: Vec::new(),
        rng: Rng(seed),
        log: Vec::new(),
        seed,
        ops: 0,
    };
    let start = std::time::Instant::now();
    for _ in 0..ops {
        f.step();
    }
    f.full_check();
    eprintln!("fsx: {ops} ops in {:?}", start.elapsed());
    // SAFETY: fd is open and ours.
    unsafe { libc::close(f.fd) };
}

on_both_transports_and_writeback!(fio_verify_crc32c, fsx_random_ops_match_model,);

// The same checkers on an image mount (issue 13), each image checked by
// `lanefs fsck` after its unmount.
on_image_mount!(
    fio_verify_crc32c => fio_verify_crc32c_on_image,
    fsx_random_ops_match_model => fsx_random_ops_match_model_on_image,
);
