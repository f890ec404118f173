//! The RCU-walk, the lock-free directory index and the defects fixed with
//! them: a dead directory's `..`, creation's lock order, and name changes
//! that are all-or-nothing against a failing store.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use lanefs_core::*;

mod common;
use common::{Call, HookedStore};

fn root() -> Cred {
    Cred::root()
}

/// Regression: `..` of a dead directory followed `rec.parent`, a number
/// nobody holds. rmdir b, rmdir a, create x reusing a's number: `..` of the
/// held b answered x. A dead directory's `..` is now ENOENT.
#[test]
fn dotdot_of_a_dead_directory_is_enoent_not_a_reused_number() {
    let fs = Fs::new_in_memory();
    let r = root();
    let a = fs.mkdir(&r, ROOT_INO, b"a", 0o755, 0).unwrap();
    let b = fs.mkdir(&r, a.ino, b"b", 0o755, 0).unwrap(); // b stays held
    fs.forget(a.ino, 1);
    fs.rmdir(&r, a.ino, b"b").unwrap();
    fs.rmdir(&r, ROOT_INO, b"a").unwrap();
    // Create until a's number comes back (the store reuses freed numbers).
    let mut reused = None;
    for i in 0..64 {
        let x = fs
            .mknod(&r, ROOT_INO, format!("x{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        if x.ino == a.ino {
            reused = Some(x);
            break;
        }
    }
    let x = reused.expect("the memory store reuses a freed inode number");
    assert_eq!(x.ino, a.ino);
    assert_eq!(fs.lookup(&r, b.ino, b".."), Err(Errno::ENOENT));
    assert_eq!(fs.lookup_counted(&r, b.ino, b".."), Err(Errno::ENOENT));
    fs.forget(b.ino, 1);
}

/// Regression for the lock order: creation inserted the new inode into the
/// inode cache (shard write lock) while holding the directory's `meta`. In
/// debug builds the insert asserts that this thread holds no `meta`.
#[test]
fn creation_inserts_into_the_icache_with_no_meta_held() {
    let fs = Fs::new_in_memory();
    let r = root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
    let f = fs.mknod(&r, d.ino, b"f", 0o644, 0, 0).unwrap();
    let s = fs.symlink(&r, d.ino, b"s", b"f").unwrap();
    let (a, _file, created) = fs
        .open_at(
            &r,
            d.ino,
            b"o",
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
            0,
            false,
        )
        .unwrap();
    assert!(created);
    for (name, ino) in [(&b"f"[..], f.ino), (b"s", s.ino), (b"o", a.ino)] {
        assert_eq!(fs.lookup(&r, d.ino, name).unwrap().ino, ino);
    }
}

#[test]
fn rcu_walk_answers_as_lookups_do() {
    let fs = Fs::new_in_memory();
    let r = root();
    let a = fs.mkdir(&r, ROOT_INO, b"a", 0o755, 0).unwrap();
    let b = fs.mkdir(&r, a.ino, b"b", 0o700, 0).unwrap();
    let f = fs.mknod(&r, b.ino, b"f", 0o644, 0, 0).unwrap();
    let l = fs.symlink(&r, a.ino, b"l", b"b").unwrap();
    let walk = |cred: &Cred, comps: &[&[u8]]| {
        // The first walk may miss the cache; a second one is lock-free.
        let _ = fs.resolve_rcu(cred, ROOT_INO, comps);
        fs.resolve_rcu(cred, ROOT_INO, comps)
    };
    assert_eq!(walk(&r, &[b"a", b"b", b"f"]), Some(Ok(f)));
    assert_eq!(walk(&r, &[b"a", b".", b"b"]).unwrap().unwrap().ino, b.ino);
    assert_eq!(walk(&r, &[b"a", b"nope"]), Some(Err(Errno::ENOENT)));
    assert_eq!(
        walk(&r, &[b"a", b"b", b"f", b"g"]),
        Some(Err(Errno::ENOTDIR))
    );
    assert_eq!(
        walk(&r, &[b"a", &[b'x'; 256]]),
        Some(Err(Errno::ENAMETOOLONG))
    );
    let user = Cred::user(1000, 1000);
    assert_eq!(walk(&user, &[b"a", b"b", b"f"]), Some(Err(Errno::EACCES)));
    // A final symlink is returned; one in the middle and `..` are left to
    // the reference walk.
    assert_eq!(walk(&r, &[b"a", b"l"]).unwrap().unwrap().ino, l.ino);
    assert_eq!(walk(&r, &[b"a", b"l", b"f"]), None);
    assert_eq!(walk(&r, &[b"a", b"..", b"a"]), None);
    // Counted: exactly one lookup reference on the final inode.
    let got = fs.resolve_rcu_counted(&r, ROOT_INO, &[b"a", b"b", b"f"]);
    let found = got.unwrap().unwrap();
    assert_eq!(
        (found.ino, found.kind, found.generation),
        (f.ino, f.kind, f.generation)
    );
    fs.unlink(&r, b.ino, b"f").unwrap();
    assert_eq!(
        fs.getattr(f.ino).unwrap().nlink,
        0,
        "held by the walk's count"
    );
    fs.forget(f.ino, 2); // mknod's and the walk's
    assert_eq!(fs.getattr(f.ino), Err(Errno::ENOENT));
    // After a shrink the index is not loaded: the RCU-walk steps aside
    // until a reference walk has loaded it again.
    fs.shrink();
    let _ = fs.lookup(&r, ROOT_INO, b"a");
    assert_eq!(
        fs.lookup(&r, a.ino, b"b").unwrap().ino,
        b.ino,
        "lookup falls back and loads"
    );
}

/// Stat walks racing renames, unlinks and creates that reuse numbers: every
/// answer is one some serial order allows — the file that was at that name
/// (same number *and* generation, still linked) or ENOENT.
#[test]
fn rcu_walks_racing_renames_and_unlinks_see_only_linked_inodes() {
    let fs = Fs::new_in_memory();
    let r = root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
    let stop = Arc::new(AtomicU64::new(0));
    let names: [&[u8]; 2] = [b"x", b"y"];
    let writer = {
        let fs = fs.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let r = root();
            let mut rounds = 0u64;
            while stop.load(Ordering::Relaxed) == 0 || rounds < 200 {
                let f = fs.mknod(&r, d.ino, b"x", 0o644, 0, 0).unwrap();
                fs.forget(f.ino, 1);
                fs.rename(&r, d.ino, b"x", d.ino, b"y", 0).unwrap();
                fs.unlink(&r, d.ino, b"y").unwrap();
                rounds += 1;
            }
        })
    };
    let mut seen = 0;
    for i in 0..20_000 {
        let name = names[i % 2];
        match fs.resolve_rcu(&r, ROOT_INO, &[b"d", name]) {
            Some(Ok(a)) => {
                assert_eq!(a.kind, FileKind::Regular);
                assert_eq!(a.nlink, 1, "a walk returned an unlinked inode");
                seen += 1;
            }
            Some(Err(e)) => assert_eq!(e, Errno::ENOENT),
            None => {}
        }
    }
    stop.store(1, Ordering::Relaxed);
    writer.join().unwrap();
    let _ = seen;
    fs.check().unwrap();
}

/// Name → (number, kind) of every entry under `dir`, recursively.
fn tree(fs: &Fs, dir: Ino, prefix: &str, out: &mut Vec<(String, Ino, u32)>) {
    let r = root();
    let h = fs.open(&r, dir, libc::O_RDONLY).unwrap();
    let mut entries = Vec::new();
    fs.readdir(&h, 2, &mut |e| {
        entries.push((e.name.to_vec(), e.ino, e.kind));
        false
    })
    .unwrap();
    for (name, ino, kind) in entries {
        let path = format!("{prefix}/{}", String::from_utf8_lossy(&name));
        let nlink = fs.getattr(ino).unwrap().nlink;
        out.push((path.clone(), ino, nlink));
        if kind == FileKind::Directory {
            tree(fs, ino, &path, out);
        }
    }
    out.sort();
}

type Op = fn(&Fs, Ino, Ino) -> Result<()>;

/// Every name operation, failed at each of its store calls in turn, leaves
/// the tree (entries and link counts, in memory and, after a shrink, in the
/// store) as it was, and the check passes; with no failure it succeeds.
#[test]
fn name_changes_are_all_or_nothing_against_a_failing_store() {
    let r = root();
    let ops: [(&str, Op); 9] = [
        ("rename", |fs, a, _| fs.rename(&root(), a, b"f", a, b"g", 0)),
        ("rename over", |fs, a, _| {
            fs.rename(&root(), a, b"f", a, b"h", 0)
        }),
        ("rename across", |fs, a, b| {
            fs.rename(&root(), a, b"f", b, b"f2", 0)
        }),
        ("rename dir across over dir", |fs, a, b| {
            fs.rename(&root(), a, b"sub", b, b"empty", 0)
        }),
        ("exchange", |fs, a, b| {
            fs.rename(&root(), a, b"sub", b, b"empty", RENAME_EXCHANGE)
        }),
        ("link", |fs, a, b| {
            let f = fs.lookup(&root(), a, b"f")?;
            fs.link(&root(), f.ino, b, b"lnk")
                .map(|x| fs.forget(x.ino, 1))
        }),
        ("unlink", |fs, a, _| fs.unlink(&root(), a, b"h")),
        ("rmdir", |fs, _, b| fs.rmdir(&root(), b, b"empty")),
        ("mkdir", |fs, a, _| {
            fs.mkdir(&root(), a, b"new", 0o755, 0)
                .map(|x| fs.forget(x.ino, 1))
        }),
    ];
    for (what, op) in ops {
        for fail_at in 1..=4 {
            // Fails the `n`-th directory call after `countdown` is set to
            // `n` (0 = never).
            let countdown = Arc::new(AtomicI64::new(0));
            let left = countdown.clone();
            let store = Arc::new(HookedStore::new(move |call| {
                let dir_call = matches!(call, Call::DirInsert | Call::DirRemove);
                if dir_call && left.fetch_sub(1, Ordering::SeqCst) == 1 {
                    return Err(Errno::EIO);
                }
                Ok(())
            }));
            let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
            let a = fs.mkdir(&r, ROOT_INO, b"a", 0o755, 0).unwrap();
            let b = fs.mkdir(&r, ROOT_INO, b"b", 0o755, 0).unwrap();
            for n in [&b"f"[..], b"h"] {
                let x = fs.mknod(&r, a.ino, n, 0o644, 0, 0).unwrap();
                fs.forget(x.ino, 1);
            }
            for (d, n) in [(a.ino, &b"sub"[..]), (b.ino, b"empty")] {
                let x = fs.mkdir(&r, d, n, 0o755, 0).unwrap();
                fs.forget(x.ino, 1);
            }
            let mut before = Vec::new();
            tree(&fs, ROOT_INO, "", &mut before);
            countdown.store(fail_at, Ordering::SeqCst);
            let res = op(&fs, a.ino, b.ino);
            let failed = countdown.load(Ordering::SeqCst) <= 0;
            countdown.store(0, Ordering::SeqCst);
            let mut after = Vec::new();
            tree(&fs, ROOT_INO, "", &mut after);
            if failed {
                assert_eq!(
                    res,
                    Err(Errno::EIO),
                    "{what} failing at store call {fail_at}"
                );
                assert_eq!(
                    before, after,
                    "{what} failing at store call {fail_at}: half done"
                );
            } else {
                assert_eq!(res, Ok(()), "{what}");
                assert_ne!(before, after, "{what} changed nothing");
            }
            fs.shrink();
            let mut reloaded = Vec::new();
            tree(&fs, ROOT_INO, "", &mut reloaded);
            assert_eq!(
                after, reloaded,
                "{what} at {fail_at}: store and memory differ"
            );
            fs.check()
                .unwrap_or_else(|e| panic!("{what} failing at {fail_at}: {e:?}"));
            fs.forget(a.ino, 1);
            fs.forget(b.ino, 1);
        }
    }
}
