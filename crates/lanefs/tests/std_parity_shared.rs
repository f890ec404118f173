//! One file's handles shared as std's are: `Send`/`Sync` as std's types,
//! `try_clone` and `&File` sharing one position, handles on many threads,
//! writers whose records stay whole, and handles that outlive the last
//! `Filesystem` view.
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use lanefs::Filesystem;

mod common;
use common::parity::{pair, unit};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn types_are_send_and_sync_as_std() {
    assert_send_sync::<std::fs::File>();
    assert_send_sync::<lanefs::File>();
    assert_send_sync::<Filesystem>();
    assert_send_sync::<lanefs::OpenOptions>();
    assert_send_sync::<lanefs::Metadata>();
    assert_send_sync::<lanefs::ReadDir>();
    assert_send_sync::<lanefs::DirEntryOwned>();
}

#[test]
fn try_clone_shares_the_position() {
    let Some(mut p) = pair() else { return };
    p.write_both("/f", b"0123456789");
    for append in [false, true] {
        let mut la = lanefs::OpenOptions::new()
            .read(true)
            .write(!append)
            .append(append)
            .open(&p.fs, "/f")
            .unwrap();
        let mut sa = std::fs::OpenOptions::new()
            .read(true)
            .write(!append)
            .append(append)
            .open(p.k("/f"))
            .unwrap();
        let mut two = [0u8; 2];
        la.read_exact(&mut two).unwrap();
        sa.read_exact(&mut two).unwrap();
        let mut lb = la.try_clone().unwrap();
        let mut sb = sa.try_clone().unwrap();
        let what = |s: &str| format!("append={append}: {s}");
        let l = lb.stream_position();
        let r = sb.stream_position();
        p.same(&what("clone's position"), &l, &r);
        let (mut l3, mut s3) = ([0u8; 3], [0u8; 3]);
        let l = lb.read(&mut l3).map(|n| l3[..n].to_vec());
        let r = sb.read(&mut s3).map(|n| s3[..n].to_vec());
        p.same(&what("read through the clone"), &l, &r);
        let l = la.stream_position();
        let r = sa.stream_position();
        p.same(&what("original's position after it"), &l, &r);
        let l = la.write(b"W").and_then(|_| lb.stream_position());
        let r = sa.write(b"W").and_then(|_| sb.stream_position());
        p.same(&what("clone's position after a write"), &l, &r);
        let l = la
            .seek(SeekFrom::End(-1))
            .and_then(|_| lb.stream_position());
        let r = sa
            .seek(SeekFrom::End(-1))
            .and_then(|_| sb.stream_position());
        p.same(&what("clone's position after a seek"), &l, &r);
        // The clone of a clone, and the original gone.
        let mut lc = lb.try_clone().unwrap();
        let mut sc = sb.try_clone().unwrap();
        drop((la, sa, lb, sb));
        let l = lc.stream_position().and_then(|_| lc.write(b"Z"));
        let r = sc.stream_position().and_then(|_| sc.write(b"Z"));
        p.same(&what("write through the last clone"), &l, &r);
        let l = lc.stream_position();
        let r = sc.stream_position();
        p.same(&what("last clone's position"), &l, &r);
    }
    // A clone keeps an unlinked file.
    let la = p.fs.open("/f").unwrap();
    let sa = std::fs::File::open(p.k("/f")).unwrap();
    let mut lb = la.try_clone().unwrap();
    let mut sb = sa.try_clone().unwrap();
    drop((la, sa));
    p.fs.remove_file("/f").unwrap();
    std::fs::remove_file(p.k("/f")).unwrap();
    let mut ls = Vec::new();
    let mut ss = Vec::new();
    let l = lb.read_to_end(&mut ls).map(|_| ls.clone());
    let r = sb.read_to_end(&mut ss).map(|_| ss.clone());
    p.same("read of an unlinked file through a clone", &l, &r);
    p.finish();
}

/// Threads opening, writing, truncating, linking, renaming and removing one
/// name: every call succeeds or fails as Linux may (`ENOENT`, `EEXIST`),
/// nothing panics, and the engine's check passes after.
#[test]
fn many_threads_on_one_file() {
    let fs = Filesystem::new_in_memory().unwrap();
    let threads = 4;
    let rounds = 400;
    let start = std::sync::Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let fs = fs.clone();
            let start = start.clone();
            std::thread::spawn(move || -> Result<(), String> {
                start.wait();
                let allowed = |e: &io::Error| {
                    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EEXIST))
                };
                for i in 0..rounds {
                    let step = |r: io::Result<()>, what: &str| match r {
                        Err(e) if !allowed(&e) => Err(format!("thread {t} {what}: {e}")),
                        _ => Ok(()),
                    };
                    let r = lanefs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(i % 3 == 0)
                        .open(&fs, "/one")
                        .and_then(|mut f| {
                            f.write_all(format!("{t}:{i};").as_bytes())?;
                            f.write_all_at(b"@", (i % 7) as u64)?;
                            if i % 5 == 0 {
                                f.set_len((i % 11) as u64)?;
                            }
                            let g = f.try_clone()?;
                            let mut buf = Vec::new();
                            f.seek(SeekFrom::Start(0))?;
                            f.read_to_end(&mut buf)?;
                            g.sync_data()?;
                            Ok(())
                        });
                    step(r, "open/write")?;
                    match i % 4 {
                        0 => step(fs.remove_file("/one"), "remove")?,
                        1 => step(fs.hard_link("/one", format!("/h{t}")), "link")?,
                        2 => step(fs.rename(format!("/h{t}"), "/one"), "rename")?,
                        _ => step(unit(fs.metadata("/one")), "stat")?,
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no panic").unwrap();
    }
    fs.core().check().expect("engine check");
}

/// Reads through clones of one `File` on several threads move one shared
/// position: every byte is read exactly once, as with `dup`ed descriptors.
#[test]
fn clones_share_the_position_across_threads() {
    let fs = Filesystem::new_in_memory().unwrap();
    // Each 4-byte word holds its own offset: a chunk says where it was.
    let data: Vec<u8> = (0..50_000u32).flat_map(|i| (i * 4).to_le_bytes()).collect();
    fs.write("/f", &data).unwrap();
    let first = fs.open("/f").unwrap();
    let clones: Vec<_> = (0..4).map(|_| first.try_clone().unwrap()).collect();
    drop(first);
    let handles: Vec<_> = clones
        .into_iter()
        .map(|mut f| {
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let mut buf = [0u8; 996];
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        return got;
                    }
                    got.push(buf[..n].to_vec());
                }
            })
        })
        .collect();
    let mut chunks: Vec<(usize, Vec<u8>)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .map(|c| {
            let at = u32::from_le_bytes(c[..4].try_into().unwrap()) as usize;
            (at, c)
        })
        .collect();
    chunks.sort();
    let mut next = 0;
    for (at, c) in chunks {
        assert_eq!(at, next, "each byte read exactly once, in one piece");
        assert_eq!(c, data[at..at + c.len()]);
        next = at + c.len();
    }
    assert_eq!(next, data.len());
}

/// `Read`, `Write` and `Seek` through `&File`, mixed with calls through
/// `&mut File` and clones: one position, as std's.
#[test]
fn shared_file_references() {
    use std::io::BufRead;
    let Some(mut p) = pair() else { return };
    p.write_both("/f", b"line one\nline two\nline three\n");
    let mut lf = lanefs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p.fs, "/f")
        .unwrap();
    let mut sf = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p.k("/f"))
        .unwrap();
    let mut lb = [0u8; 5];
    let mut sb = [0u8; 5];
    let l = lf.read(&mut lb).map(|n| lb[..n].to_vec());
    let r = sf.read(&mut sb).map(|n| sb[..n].to_vec());
    p.same("read through &mut", &l, &r);
    let l = (&lf).read(&mut lb).map(|n| lb[..n].to_vec());
    let r = (&sf).read(&mut sb).map(|n| sb[..n].to_vec());
    p.same("read through &", &l, &r);
    let l = lf.stream_position();
    let r = sf.stream_position();
    p.same("position through &mut after &", &l, &r);
    let l = (&lf).seek(SeekFrom::Current(-2));
    let r = (&sf).seek(SeekFrom::Current(-2));
    p.same("seek through &", &l, &r);
    let l = (&lf).write(b"ONE").and_then(|_| lf.stream_position());
    let r = (&sf).write(b"ONE").and_then(|_| sf.stream_position());
    p.same("write through &", &l, &r);
    let l = lf.seek(SeekFrom::Start(0));
    let r = sf.seek(SeekFrom::Start(0));
    p.same("seek through &mut", &l, &r);
    let l: io::Result<Vec<String>> = io::BufReader::new(&lf).lines().collect();
    let r: io::Result<Vec<String>> = io::BufReader::new(&sf).lines().collect();
    p.same("lines through BufReader<&File>", &l, &r);
    let lc = lf.try_clone().unwrap();
    let sc = sf.try_clone().unwrap();
    let l = (&lc)
        .seek(SeekFrom::Start(5))
        .and_then(|_| lf.stream_position());
    let r = (&sc)
        .seek(SeekFrom::Start(5))
        .and_then(|_| sf.stream_position());
    p.same("seek through a clone's &", &l, &r);
    let mut lv = Vec::new();
    let mut sv = Vec::new();
    let l = io::copy(&mut &lf, &mut lv).map(|n| (n, lv.clone()));
    let r = io::copy(&mut &sf, &mut sv).map(|n| (n, sv.clone()));
    p.same("io::copy from &File", &l, &r);
    let mut ls = String::new();
    let mut ss = String::new();
    (&lf).seek(SeekFrom::Start(0)).unwrap();
    (&sf).seek(SeekFrom::Start(0)).unwrap();
    let l = (&lf).read_to_string(&mut ls).map(|n| (n, ls.clone()));
    let r = (&sf).read_to_string(&mut ss).map(|n| (n, ss.clone()));
    p.same("read_to_string through &", &l, &r);
    drop((lf, sf, lc, sc));
    p.trees("after the shared references");
    p.finish();
}

/// Writers on several threads through one position (clones, `&File`) or
/// through `O_APPEND`: every record lands whole and none overwrites
/// another, as on Linux (appends are atomic; a shared position moves under
/// its lock).
#[test]
fn concurrent_writers_keep_records_whole() {
    let fs = Filesystem::new_in_memory().unwrap();
    const REC: usize = 100;
    const PER: usize = 300;
    for mode in ["append", "clones", "shared ref"] {
        let path = format!("/{}", mode.replace(' ', "_"));
        let f = lanefs::OpenOptions::new()
            .write(true)
            .create(true)
            .append(mode == "append")
            .open(&fs, &path)
            .unwrap();
        let f = std::sync::Arc::new(f);
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let fs = fs.clone();
                let path = path.clone();
                let shared = f.clone();
                let clone = f.try_clone().unwrap();
                let mode = mode.to_string();
                std::thread::spawn(move || {
                    let mut own = match mode.as_str() {
                        "append" => Some(
                            lanefs::OpenOptions::new()
                                .append(true)
                                .open(&fs, &path)
                                .unwrap(),
                        ),
                        "clones" => Some(clone),
                        _ => None,
                    };
                    for i in 0..PER {
                        let mut rec = vec![b'a' + t; REC];
                        rec[..4].copy_from_slice(&(i as u32).to_le_bytes());
                        match own.as_mut() {
                            Some(f) => f.write_all(&rec).unwrap(),
                            None => (&*shared).write_all(&rec).unwrap(),
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let data = fs.read(&path).unwrap();
        assert_eq!(
            data.len(),
            4 * PER * REC,
            "{mode}: every record written once"
        );
        let mut per_thread = [0usize; 4];
        for rec in data.chunks(REC) {
            let t = rec[REC - 1];
            assert!(rec[4..].iter().all(|&b| b == t), "{mode}: a record torn");
            let i = u32::from_le_bytes(rec[..4].try_into().unwrap()) as usize;
            let t = (t - b'a') as usize;
            assert_eq!(i, per_thread[t], "{mode}: records of a thread in order");
            per_thread[t] += 1;
        }
    }
}

/// Handles made after the last `Filesystem` view is gone (clones of an open
/// file) work on any thread, and the listing's entries keep their paths.
#[test]
fn clones_and_listings_after_the_filesystem_is_gone() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/d").unwrap();
    fs.write("/d/f", b"hello").unwrap();
    let mut f = lanefs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fs, "/d/f")
        .unwrap();
    let listing = fs.read_dir("/d").unwrap();
    drop(fs);
    let mut g = f.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        g.seek(SeekFrom::End(0))?;
        g.write_all(b", world")?;
        g.sync_all()?;
        Ok::<_, io::Error>(g.position())
    });
    assert_eq!(t.join().unwrap().unwrap(), 12);
    assert_eq!(f.position(), 12, "the position is shared");
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello, world");
    let paths: Vec<PathBuf> = listing.map(|e| e.unwrap().path()).collect();
    assert_eq!(paths, [PathBuf::from("/d/f")]);
    let h = f.try_clone().unwrap();
    drop(f);
    assert_eq!(h.metadata().unwrap().len(), 12);
}
