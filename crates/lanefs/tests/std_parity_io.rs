//! `File` I/O against std's: reads, writes and seeks, access modes and
//! `set_len`, reading whole files (sparse, and too big for memory),
//! `copy`, and random sequences of calls on one file
//! (`LANEFS_PARITY_SEEDS` sequences, 24 unless set).
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};

mod common;
use common::parity::{build, pair};

#[test]
fn file_seek_read_write() {
    let Some(mut p) = pair() else { return };
    let mut lf = lanefs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(p.k("/f"))
        .unwrap();
    let seeks = [
        SeekFrom::End(-1),
        SeekFrom::Current(-1),
        SeekFrom::Start(0),
        SeekFrom::Start(u64::MAX),
        SeekFrom::Start(i64::MAX as u64),
        SeekFrom::Current(1),
        SeekFrom::Current(i64::MIN),
        SeekFrom::End(i64::MAX),
        SeekFrom::End(i64::MIN),
        SeekFrom::Start(10),
        SeekFrom::Current(-5),
        SeekFrom::End(0),
    ];
    for s in seeks {
        let l = lf.seek(s);
        let r = sf.seek(s);
        p.same(&format!("seek {s:?} on empty"), &l, &r);
    }
    // Writes after a seek past the end leave a hole.
    lf.seek(SeekFrom::Start(100)).unwrap();
    sf.seek(SeekFrom::Start(100)).unwrap();
    let l = lf.write(b"tail");
    let r = sf.write(b"tail");
    p.same("write at 100", &l, &r);
    for s in [
        SeekFrom::End(-4),
        SeekFrom::End(-105),
        SeekFrom::Current(-2),
        SeekFrom::End(10),
    ] {
        let l = lf.seek(s);
        let r = sf.seek(s);
        p.same(&format!("seek {s:?}"), &l, &r);
        let mut lb = [9u8; 8];
        let mut sb = [9u8; 8];
        let l = lf.read(&mut lb).map(|n| lb[..n].to_vec());
        let r = sf.read(&mut sb).map(|n| sb[..n].to_vec());
        p.same(&format!("read after seek {s:?}"), &l, &r);
    }
    // Reading at and past EOF.
    for off in [0u64, 50, 103, 104, 105, 1 << 40, i64::MAX as u64, u64::MAX] {
        let mut lb = [7u8; 16];
        let mut sb = [7u8; 16];
        let l = lf.read_at(&mut lb, off).map(|n| lb[..n].to_vec());
        let r = sf.read_at(&mut sb, off).map(|n| sb[..n].to_vec());
        p.same(&format!("read_at {off}"), &l, &r);
        let l = lf.write_at(b"", off);
        let r = sf.write_at(b"", off);
        p.same(&format!("write_at empty {off}"), &l, &r);
    }
    for off in [3u64, 200, (i64::MAX - 1) as u64, i64::MAX as u64] {
        let l = lf.write_at(b"pq", off);
        let r = sf.write_at(b"pq", off);
        p.same(&format!("write_at {off}"), &l, &r);
        let l = lf.metadata().map(|m| m.len());
        let r = sf.metadata().map(|m| m.len());
        p.same(&format!("size after write_at {off}"), &l, &r);
    }
    let l = lf.stream_position();
    let r = sf.stream_position();
    p.same("position after positional I/O", &l, &r);
    // read_exact_at / write_all_at through the trait-free helpers.
    let mut lb = [0u8; 10];
    let mut sb = [0u8; 10];
    let l = lf.read_exact_at(&mut lb, 98).map(|_| lb.to_vec());
    let r = sf.read_exact_at(&mut sb, 98).map(|_| sb.to_vec());
    p.same("read_exact_at 98", &l, &r);
    let l = lf.read_exact_at(&mut lb, 200).map(|_| lb.to_vec());
    let r = sf.read_exact_at(&mut sb, 200).map(|_| sb.to_vec());
    p.same("read_exact_at past EOF", &l, &r);
    let l = lf.write_all_at(b"all", 7);
    let r = sf.write_all_at(b"all", 7);
    p.same("write_all_at", &l, &r);
    // Vectored I/O.
    lf.seek(SeekFrom::Start(0)).unwrap();
    sf.seek(SeekFrom::Start(0)).unwrap();
    let l = lf.write_vectored(&[io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")]);
    let r = sf.write_vectored(&[io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")]);
    p.same("write_vectored", &l, &r);
    lf.seek(SeekFrom::Start(0)).unwrap();
    sf.seek(SeekFrom::Start(0)).unwrap();
    let (mut l1, mut l2, mut s1, mut s2) = ([0u8; 3], [0u8; 3], [0u8; 3], [0u8; 3]);
    let l = lf
        .read_vectored(&mut [io::IoSliceMut::new(&mut l1), io::IoSliceMut::new(&mut l2)])
        .map(|n| (n, l1, l2));
    let r = sf
        .read_vectored(&mut [io::IoSliceMut::new(&mut s1), io::IoSliceMut::new(&mut s2)])
        .map(|n| (n, s1, s2));
    p.same("read_vectored", &l, &r);
    drop((lf, sf));
    p.trees("after the seeks and writes");
    p.finish();
}

#[test]
fn file_access_modes_and_set_len() {
    let Some(mut p) = pair() else { return };
    p.write_both("/f", b"0123456789");
    // Read-only handle.
    let mut lf = p.fs.open("/f").unwrap();
    let mut sf = std::fs::File::open(p.k("/f")).unwrap();
    let l = lf.write(b"x");
    let r = sf.write(b"x");
    p.same("write on read-only", &l, &r);
    let l = lf.write(b"");
    let r = sf.write(b"");
    p.same("empty write on read-only", &l, &r);
    let l = lf.write_at(b"x", 0);
    let r = sf.write_at(b"x", 0);
    p.same("write_at on read-only", &l, &r);
    let l = lf.set_len(3);
    let r = sf.set_len(3);
    p.same("set_len on read-only", &l, &r);
    let l = lf.sync_all();
    let r = sf.sync_all();
    p.same("sync_all on read-only", &l, &r);
    let l = lf.sync_data();
    let r = sf.sync_data();
    p.same("sync_data on read-only", &l, &r);
    let l = lf.flush();
    let r = sf.flush();
    p.same("flush on read-only", &l, &r);
    let mut ls = String::new();
    let mut ss = String::new();
    let l = lf.read_to_string(&mut ls).map(|_| ls.clone());
    let r = sf.read_to_string(&mut ss).map(|_| ss.clone());
    p.same("read_to_string", &l, &r);
    // Write-only handle.
    let mut lf = lanefs::OpenOptions::new()
        .write(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .write(true)
        .open(p.k("/f"))
        .unwrap();
    let mut lb = [0u8; 4];
    let mut sb = [0u8; 4];
    let l = lf.read(&mut lb);
    let r = sf.read(&mut sb);
    p.same("read on write-only", &l, &r);
    let l = lf.read(&mut []);
    let r = sf.read(&mut []);
    p.same("empty read on write-only", &l, &r);
    let l = lf.read_at(&mut lb, 0);
    let r = sf.read_at(&mut sb, 0);
    p.same("read_at on write-only", &l, &r);
    for size in [20u64, 5, 0, 1 << 33, 7, i64::MAX as u64, u64::MAX] {
        let l = lf
            .set_len(size)
            .and_then(|_| lf.metadata().map(|m| m.len()));
        let r = sf
            .set_len(size)
            .and_then(|_| sf.metadata().map(|m| m.len()));
        p.same(&format!("set_len {size}"), &l, &r);
    }
    // set_len leaves the position alone.
    lf.seek(SeekFrom::Start(3)).unwrap();
    sf.seek(SeekFrom::Start(3)).unwrap();
    lf.set_len(1).unwrap();
    sf.set_len(1).unwrap();
    let l = lf.write(b"ab").and_then(|_| lf.stream_position());
    let r = sf.write(b"ab").and_then(|_| sf.stream_position());
    p.same("write after shrink below position", &l, &r);
    // Append: writes go to the end; the position follows.
    let mut lf = lanefs::OpenOptions::new()
        .append(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .append(true)
        .open(p.k("/f"))
        .unwrap();
    let l = lf.seek(SeekFrom::Start(0));
    let r = sf.seek(SeekFrom::Start(0));
    p.same("seek on append", &l, &r);
    let l = lf.write(b"++").and_then(|_| lf.stream_position());
    let r = sf.write(b"++").and_then(|_| sf.stream_position());
    p.same("append write", &l, &r);
    let l = lf.write_at(b"@@", 0);
    let r = sf.write_at(b"@@", 0);
    p.same("append write_at", &l, &r);
    let l = lf.set_len(2);
    let r = sf.set_len(2);
    p.same("set_len on append", &l, &r);
    drop((lf, sf));
    // A directory handle.
    p.create_dir_both("/d");
    let mut lf = p.fs.open("/d").unwrap();
    let mut sf = std::fs::File::open(p.k("/d")).unwrap();
    let l = lf.read(&mut lb);
    let r = sf.read(&mut sb);
    p.same("read of a directory", &l, &r);
    let l = lf.set_len(0);
    let r = sf.set_len(0);
    p.same("set_len of a directory", &l, &r);
    let l = lf.sync_all();
    let r = sf.sync_all();
    p.same("sync_all of a directory", &l, &r);
    let l = lf.stream_position();
    let r = sf.stream_position();
    p.same("seek in a directory", &l, &r);
    let l = lf.metadata().map(|m| m.is_dir());
    let r = sf.metadata().map(|m| m.is_dir());
    p.same("fstat of a directory", &l, &r);
    let l = p.fs.read("/d");
    let r = std::fs::read(p.k("/d"));
    p.same("fs::read of a directory", &l, &r);
    drop((lf, sf));
    p.trees("after the handles");
    p.finish();
}

#[test]
fn read_to_end_of_a_big_sparse_file() {
    let Some(mut p) = pair() else { return };
    let size = 64u64 << 20;
    let lf = p.fs.create("/big").unwrap();
    lf.set_len(size).unwrap();
    lf.write_at(b"end", size - 3).unwrap();
    let sf = std::fs::File::create(p.k("/big")).unwrap();
    sf.set_len(size).unwrap();
    sf.write_at(b"end", size - 3).unwrap();
    let t = std::time::Instant::now();
    let l = p.fs.read("/big");
    let lane_time = t.elapsed();
    let r = std::fs::read(p.k("/big"));
    let (l, r) = (
        l.map(|v| (v.len(), v[v.len() - 3..].to_vec())),
        r.map(|v| (v.len(), v[v.len() - 3..].to_vec())),
    );
    p.same("read a 64 MiB sparse file", &l, &r);
    eprintln!("lanefs read of 64 MiB sparse: {lane_time:?}");
    let mut out = Vec::new();
    let l = p.fs.open("/big").and_then(|mut f| f.read_to_end(&mut out));
    let mut out2 = Vec::new();
    let r = std::fs::File::open(p.k("/big")).and_then(|mut f| f.read_to_end(&mut out2));
    p.same("read_to_end", &l, &r);
    p.finish();
}

/// Reading a sparse file too big for memory whole: an `OutOfMemory` error
/// up front, as std's `read_to_end` (which reserves the file's size
/// fallibly), not a growing vector until the allocator aborts.
#[test]
fn reading_whole_a_file_too_big_for_memory() {
    let Some(mut p) = pair() else { return };
    let size = 1u64 << 62;
    p.fs.create("/huge").unwrap().set_len(size).unwrap();
    std::fs::File::create(p.k("/huge"))
        .unwrap()
        .set_len(size)
        .unwrap();
    let l = p.fs.read("/huge").map(|v| v.len());
    let r = std::fs::read(p.k("/huge")).map(|v| v.len());
    p.same("fs::read", &l, &r);
    let l = p.fs.read_to_string("/huge").map(|v| v.len());
    let r = std::fs::read_to_string(p.k("/huge")).map(|v| v.len());
    p.same("fs::read_to_string", &l, &r);
    let mut lv = Vec::new();
    let mut sv = Vec::new();
    let l = p.fs.open("/huge").and_then(|mut f| f.read_to_end(&mut lv));
    let r = std::fs::File::open(p.k("/huge")).and_then(|mut f| f.read_to_end(&mut sv));
    p.same("File::read_to_end", &l, &r);
    // From near the end it fits.
    let mut lv = Vec::new();
    let mut sv = Vec::new();
    let l = p.fs.open("/huge").and_then(|mut f| {
        f.seek(SeekFrom::End(-5))?;
        f.read_to_end(&mut lv)
    });
    let r = std::fs::File::open(p.k("/huge")).and_then(|mut f| {
        f.seek(SeekFrom::End(-5))?;
        f.read_to_end(&mut sv)
    });
    p.same("File::read_to_end of the last bytes", &l, &r);
    let mut ls = String::from("kept");
    let mut ss = String::from("kept");
    p.write_both("/bad", b"ok\xff");
    let l =
        p.fs.open("/bad")
            .and_then(|mut f| f.read_to_string(&mut ls))
            .map_err(|e| (e.kind(), ls.clone()));
    let r = std::fs::File::open(p.k("/bad"))
        .and_then(|mut f| f.read_to_string(&mut ss))
        .map_err(|e| (e.kind(), ss.clone()));
    assert_eq!(l, r, "read_to_string of invalid UTF-8");
    p.finish();
}

#[test]
fn copy_as_std() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d"],
        &[
            ("/tool", b"#!/bin/sh\n"),
            ("/old", b"a longer old content than the source"),
            ("/empty", b""),
        ],
        &[
            ("tool", "/ltool"),
            ("old", "/lold"),
            ("made_by_copy", "/dangling"),
        ],
    );
    for (name, mode) in [("/tool", 0o4750u32), ("/old", 0o600), ("/empty", 0o2644)] {
        p.fs.set_permissions(name, mode).unwrap();
        std::fs::set_permissions(p.k(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    {
        // A sparse source: a hole, data, a hole at the end.
        let lf = p.fs.create("/sparse").unwrap();
        let sf = std::fs::File::create(p.k("/sparse")).unwrap();
        lf.write_all_at(b"middle", 300_000).unwrap();
        sf.write_all_at(b"middle", 300_000).unwrap();
        lf.set_len(700_000).unwrap();
        sf.set_len(700_000).unwrap();
    }
    let cases = [
        ("/tool", "/new"),
        ("/tool", "/old"),
        ("/empty", "/empty2"),
        ("/ltool", "/lold"),
        ("/tool", "/dangling"),
        ("/sparse", "/sparse2"),
        ("/d", "/x"),
        ("/missing", "/x"),
        ("/tool", "/d"),
        ("/tool", "/missing/x"),
        ("/tool/", "/x"),
        ("/tool", "/x/"),
        ("/new", "/new"),
    ];
    for (from, to) in cases {
        let l = p.fs.copy(from, to);
        let r = std::fs::copy(p.k(from), p.k(to));
        p.same(&format!("copy {from} {to}"), &l, &r);
    }
    p.trees("after the copies");
    p.finish();
}

/// Random sequences of calls through `File`s on one file — positional and
/// not, vectored, through `&File`, clones and drops — on both sides: every
/// outcome and the final content equal.
#[test]
fn random_file_call_sequences() {
    let Some(mut p) = pair() else { return };
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }
    // LANEFS_PARITY_SEEDS for a longer run (2000 pass).
    let seeds: u64 = std::env::var("LANEFS_PARITY_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    for seed in 1..=seeds {
        let name = format!("/r{seed}");
        p.write_both(&name, b"");
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut slots: Vec<(lanefs::File, std::fs::File, String)> = Vec::new();
        for step in 0..250 {
            if slots.is_empty() || rng.below(12) == 0 {
                let (read, write, append) = match rng.below(4) {
                    0 => (true, false, false),
                    1 => (false, true, false),
                    2 => (true, true, false),
                    _ => (rng.below(2) == 0, false, true),
                };
                let l = lanefs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .append(append)
                    .open(&p.fs, &name)
                    .unwrap();
                let s = std::fs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .append(append)
                    .open(p.k(&name))
                    .unwrap();
                slots.push((l, s, format!("r={read} w={write} a={append}")));
                continue;
            }
            let i = rng.below(slots.len() as u64) as usize;
            let len = rng.below(9000) as usize;
            let off = rng.below(20_000);
            let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ (step as u8)).collect();
            let op = rng.below(14);
            if op == 10 {
                let (lf, sf, how) = &slots[i];
                let clone = (
                    lf.try_clone().unwrap(),
                    sf.try_clone().unwrap(),
                    format!("clone of {how}"),
                );
                slots.push(clone);
                continue;
            }
            if op == 11 && slots.len() > 1 {
                slots.swap_remove(i);
                continue;
            }
            let (lf, sf, how) = &mut slots[i];
            let what = format!("seed {seed} step {step} op {op} on {how}");
            let (l, r): (io::Result<Vec<u8>>, io::Result<Vec<u8>>) = match op {
                0 => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    (
                        lf.read(&mut a).map(|n| a[..n].to_vec()),
                        sf.read(&mut b).map(|n| b[..n].to_vec()),
                    )
                }
                1 => (
                    lf.write(&data).map(|n| vec![n as u8]),
                    sf.write(&data).map(|n| vec![n as u8]),
                ),
                2 => {
                    let to = match rng.below(3) {
                        0 => SeekFrom::Start(off),
                        1 => SeekFrom::Current(off as i64 - 10_000),
                        _ => SeekFrom::End(off as i64 - 10_000),
                    };
                    (
                        lf.seek(to).map(|n| n.to_le_bytes().to_vec()),
                        sf.seek(to).map(|n| n.to_le_bytes().to_vec()),
                    )
                }
                3 => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    (
                        lf.read_at(&mut a, off).map(|n| a[..n].to_vec()),
                        sf.read_at(&mut b, off).map(|n| b[..n].to_vec()),
                    )
                }
                4 => (
                    lf.write_at(&data, off).map(|n| vec![n as u8]),
                    sf.write_at(&data, off).map(|n| vec![n as u8]),
                ),
                5 => (
                    lf.set_len(off).map(|_| Vec::new()),
                    sf.set_len(off).map(|_| Vec::new()),
                ),
                6 => {
                    let (mut a1, mut a2) = (vec![0; len / 2], vec![0; len - len / 2]);
                    let (mut b1, mut b2) = (vec![0; len / 2], vec![0; len - len / 2]);
                    let l = lf
                        .read_vectored(&mut [
                            io::IoSliceMut::new(&mut a1),
                            io::IoSliceMut::new(&mut a2),
                        ])
                        .map(|n| [a1.clone(), a2.clone()].concat()[..n].to_vec());
                    let r = sf
                        .read_vectored(&mut [
                            io::IoSliceMut::new(&mut b1),
                            io::IoSliceMut::new(&mut b2),
                        ])
                        .map(|n| [b1.clone(), b2.clone()].concat()[..n].to_vec());
                    (l, r)
                }
                7 => {
                    let (x, y) = data.split_at(len / 3);
                    (
                        lf.write_vectored(&[io::IoSlice::new(x), io::IoSlice::new(y)])
                            .map(|n| n.to_le_bytes().to_vec()),
                        sf.write_vectored(&[io::IoSlice::new(x), io::IoSlice::new(y)])
                            .map(|n| n.to_le_bytes().to_vec()),
                    )
                }
                8 => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    (
                        (&*lf).read(&mut a).map(|n| a[..n].to_vec()),
                        (&*sf).read(&mut b).map(|n| b[..n].to_vec()),
                    )
                }
                9 => (
                    (&*lf).write(&data).map(|n| vec![n as u8]),
                    (&*sf).write(&data).map(|n| vec![n as u8]),
                ),
                12 => {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    (
                        lf.read_to_end(&mut a).map(|_| a),
                        sf.read_to_end(&mut b).map(|_| b),
                    )
                }
                _ => (
                    lf.stream_position().map(|n| n.to_le_bytes().to_vec()),
                    sf.stream_position().map(|n| n.to_le_bytes().to_vec()),
                ),
            };
            p.same(&what, &l, &r);
            if !p.mismatches.is_empty() {
                break;
            }
        }
        drop(slots);
        let l = p.fs.read(&name);
        let r = std::fs::read(p.k(&name));
        p.same(&format!("seed {seed}: final content"), &l, &r);
        if !p.mismatches.is_empty() {
            break;
        }
        // Long runs stay within a small image.
        p.fs.remove_file(&name).unwrap();
        std::fs::remove_file(p.k(&name)).unwrap();
    }
    p.finish();
}

/// `fallocate(2)`'s checks in Linux's order (`vfs_fallocate`): unknown
/// bits and invalid combinations (`EOPNOTSUPP`), then the descriptor's
/// write access (`EBADF`), the file's type (`EISDIR`), the range's end
/// (`EFBIG`), and only then what the file system does not implement —
/// collapse, insert, unshare and write-zeroes are valid modes, so a
/// read-only descriptor is `EBADF` for them and a range past `i64::MAX`
/// `EFBIG`, before tmpfs's (and lanefs's) `EOPNOTSUPP`. Zero-range on a
/// writable file is the documented divergence (SEMANTICS.md) and skipped.
#[test]
fn fallocate_checks_in_linux_order() {
    use std::os::fd::AsRawFd;
    let Some(mut p) = pair() else { return };
    p.write_both("/f", vec![1u8; 10_000]);
    p.create_dir_both("/d");
    const MODES: &[i32] = &[
        0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0a, 0x10, 0x11, 0x12, 0x18, 0x20, 0x21,
        0x28, 0x40, 0x41, 0x42, 0x80, 0x81, 0x100, 0x101,
    ];
    const RANGES: &[(i64, i64)] = &[
        (0, 4096),
        (4096, 100),
        (-1, 10),
        (0, 0),
        (i64::MAX - 10, 100),
    ];
    let opens: &[(&str, bool, bool)] = &[
        ("/f", true, false),
        ("/f", false, true),
        ("/d", true, false),
    ];
    // FALLOC_FL_WRITE_ZEROES (0x80) is a mode from Linux 6.17 on (an
    // unknown bit before): compare it only with a kernel that knows it.
    let probe = std::fs::File::open(p.k("/f")).unwrap();
    // SAFETY: a valid descriptor.
    let knows_write_zeroes = unsafe { libc::fallocate(probe.as_raw_fd(), 0x80, 0, 1) } != 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
    for &(path, read, write) in opens {
        let lf = lanefs::OpenOptions::new()
            .read(read)
            .write(write)
            .open(&p.fs, path)
            .unwrap();
        let sf = std::fs::OpenOptions::new()
            .read(read)
            .write(write)
            .open(p.k(path))
            .unwrap();
        for &mode in MODES {
            if mode & 0x80 != 0 && !knows_write_zeroes {
                continue;
            }
            if write && mode & libc::FALLOC_FL_ZERO_RANGE != 0 && mode & !0x11 == 0 {
                continue;
            }
            for &(off, len) in RANGES {
                let what =
                    format!("fallocate({path} read={read} write={write}, {mode:#x}, {off}, {len})");
                let l = lf.fallocate(mode, off, len);
                // SAFETY: a valid descriptor.
                let rc = unsafe { libc::fallocate(sf.as_raw_fd(), mode, off, len) };
                let s = if rc == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                };
                p.same(&what, &l, &s);
            }
        }
    }
    p.trees("after the fallocates");
    p.finish();
}
