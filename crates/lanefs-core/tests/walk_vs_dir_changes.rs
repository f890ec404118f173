//! Lock-free path walks (`resolve_rcu`, `resolve_rcu_counted`) and
//! reference walks (`lookup`) through directories that move, lose
//! subdirectories, change mode and are evicted, on real threads: `/a/s/f`
//! with `s` renamed between `/a` and `/b`, `s/e` and `/b/t` made and
//! removed (numbers reused), `s` chmodded between 0755 and 0700, and
//! evictions. Every answer must be one a serial order allows: the file
//! `f` (its number, linked), a directory for a directory's name, `s`'s own
//! number for `s`, or `ENOENT` (`EACCES` for a caller other than the
//! owner) — never another inode, never `ENOTDIR`, never an unlinked
//! directory. Afterwards the engine's check passes and, once everything is
//! removed, the store holds only the root. Each seed "before" design runs
//! too.
//!
//! Knob: `LANEFS_WALK_RACE_MS` — how long the race runs (default 1500;
//! a quarter of it for each seed "before" design).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lanefs_core::*;

mod common;

fn race_time() -> Duration {
    Duration::from_millis(common::knob("LANEFS_WALK_RACE_MS", 1500))
}

struct Tree {
    a: Ino,
    b: Ino,
    s: Ino,
    f: Ino,
}

fn allowed(e: Errno, cred: &Cred) -> bool {
    e == Errno::ENOENT || (e == Errno::EACCES && !cred.is_root())
}

/// The reference walk of `path` from the root, step by step (`lookup`
/// loads what a lock-free walk bails out on).
fn ref_walk(fs: &Fs, cred: &Cred, path: &[&[u8]]) -> Result<Attr> {
    let mut at = fs.getattr(ROOT_INO)?;
    for name in path {
        at = fs.lookup(cred, at.ino, name)?;
    }
    Ok(at)
}

/// Check one answer for `path` (`top`/s/f, `top`/s/e, `top`/t or
/// `top`/s); whether it found something.
fn check(t: &Tree, cred: &Cred, path: &[&[u8]], r: Result<(Ino, FileKind, u32)>) -> bool {
    match r {
        Ok((ino, kind, nlink)) => {
            match path.last().copied() {
                Some(b"f") => assert_eq!((ino, kind, nlink), (t.f, FileKind::Regular, 1)),
                Some(b"s") => assert_eq!((ino, kind), (t.s, FileKind::Directory)),
                _ => {
                    assert_eq!(kind, FileKind::Directory, "{path:?}");
                    assert_eq!(nlink, 2, "{path:?}: an unlinked directory");
                    assert!(ino != t.f && ino != t.s, "{path:?}: {ino}");
                }
            }
            true
        }
        Err(e) => {
            assert!(allowed(e, cred), "{path:?}: {e:?}");
            false
        }
    }
}

/// One walker's checks, over and over until `stop`: each path lock-free
/// (plain, or counted for `s`), and by the reference walk when the
/// lock-free one does not answer. Returns how many lock-free walks found
/// something.
fn walker(fs: Fs, t: Arc<Tree>, cred: Cred, stop: Arc<AtomicBool>) -> u64 {
    let mut rcu_found = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let top: &[u8] = if i.is_multiple_of(2) { b"a" } else { b"b" };
        i += 1;
        let paths: [&[&[u8]]; 4] = [
            &[top, b"s", b"f"],
            &[top, b"s", b"e"],
            &[top, b"t"],
            &[top, b"s"],
        ];
        for path in paths {
            let rcu = if path.last() == Some(&&b"s"[..]) {
                fs.resolve_rcu_counted(&cred, ROOT_INO, path).map(|r| {
                    r.map(|found| {
                        fs.forget(found.ino, 1);
                        (found.ino, found.kind, 2)
                    })
                })
            } else {
                fs.resolve_rcu(&cred, ROOT_INO, path)
                    .map(|r| r.map(|a| (a.ino, a.kind, a.nlink)))
            };
            match rcu {
                Some(r) => rcu_found += check(&t, &cred, path, r) as u64,
                None => {
                    let r = ref_walk(&fs, &cred, path).map(|a| (a.ino, a.kind, a.nlink));
                    check(&t, &cred, path, r);
                }
            }
        }
    }
    rcu_found
}

fn remove_all(fs: &Fs, dir: Ino) {
    let r = Cred::root();
    let h = fs.open(&r, dir, libc::O_RDONLY).unwrap();
    let mut names = Vec::new();
    fs.readdir(&h, 0, &mut |e| {
        if e.name != b"." && e.name != b".." {
            names.push((e.name.to_vec(), e.ino, e.kind));
        }
        false
    })
    .unwrap();
    drop(h);
    for (name, ino, kind) in names {
        if kind == FileKind::Directory {
            remove_all(fs, ino);
            fs.rmdir(&r, dir, &name).unwrap();
        } else {
            fs.unlink(&r, dir, &name).unwrap();
        }
    }
}

fn race(variants: Variants, time: Duration) {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(
        store.clone(),
        FsConfig {
            variants,
            cache_inodes_max: 8,
            ..FsConfig::default()
        },
    )
    .unwrap();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT_INO, b"a", 0o777, 0).unwrap();
    let b = fs.mkdir(&r, ROOT_INO, b"b", 0o777, 0).unwrap();
    let s = fs.mkdir(&r, a.ino, b"s", 0o755, 0).unwrap();
    let f = fs.mknod(&r, s.ino, b"f", 0o644, 0, 0).unwrap();
    let t = Arc::new(Tree {
        a: a.ino,
        b: b.ino,
        s: s.ino,
        f: f.ino,
    });
    fs.forget(f.ino, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let mut changers = Vec::new();
    for what in 0..4u32 {
        let (fs, t, stop) = (fs.clone(), t.clone(), stop.clone());
        changers.push(std::thread::spawn(move || {
            let r = Cred::root();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match what {
                    0 => {
                        fs.rename(&r, t.a, b"s", t.b, b"s", 0).unwrap();
                        fs.rename(&r, t.b, b"s", t.a, b"s", 0).unwrap();
                    }
                    1 => {
                        let e = fs.mkdir(&r, t.s, b"e", 0o755, 0).unwrap();
                        fs.forget(e.ino, 1);
                        fs.rmdir(&r, t.s, b"e").unwrap();
                        let d = fs.mkdir(&r, t.b, b"t", 0o755, 0).unwrap();
                        fs.forget(d.ino, 1);
                        fs.rmdir(&r, t.b, b"t").unwrap();
                    }
                    2 => {
                        let ch = SetAttr {
                            mode: Some(if i.is_multiple_of(2) { 0o700 } else { 0o755 }),
                            ..Default::default()
                        };
                        fs.setattr(&r, t.s, &ch, None).unwrap();
                    }
                    _ => {
                        fs.shrink();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                i += 1;
            }
        }));
    }
    let walkers: Vec<_> = [Cred::root(), Cred::user(1000, 1000)]
        .into_iter()
        .map(|cred| {
            let (fs, t, stop) = (fs.clone(), t.clone(), stop.clone());
            std::thread::spawn(move || walker(fs, t, cred, stop))
        })
        .collect();
    std::thread::sleep(time);
    stop.store(true, Ordering::Relaxed);
    let mut failure = None;
    for h in changers {
        if let Err(e) = h.join() {
            failure.get_or_insert(e);
        }
    }
    let mut answered = 0;
    for h in walkers {
        match h.join() {
            Ok(n) => answered += n,
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        std::panic::resume_unwind(e);
    }
    assert!(
        answered > 0,
        "no lock-free walk found anything ({variants})"
    );
    if let Err(p) = fs.check() {
        panic!("inconsistent after the race ({variants}): {p:#?}");
    }
    for ino in [t.a, t.b, t.s] {
        fs.forget(ino, 1);
    }
    remove_all(&fs, ROOT_INO);
    fs.shrink();
    if let Err(p) = fs.check() {
        panic!("inconsistent after cleanup ({variants}): {p:#?}");
    }
    assert_eq!(
        store.inode_records(),
        1,
        "only the root is left ({variants})"
    );
}

#[test]
fn walks_racing_dir_renames_rmdirs_and_chmods() {
    race(Variants::default(), race_time());
}

#[test]
fn walks_racing_dir_renames_rmdirs_and_chmods_every_baseline() {
    for (name, v) in Variants::baselines() {
        eprintln!("walks: baseline {name}");
        race(v, race_time() / 4);
    }
}
