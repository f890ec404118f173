//! fsck's link-count pass (e2fsck pass 4) and reachability pass (pass 3):
//! a tree built by the engine is damaged through the store API (a leaked
//! file, a leaked directory with a file in it, a file's count off, a
//! directory named twice, a named inode with link count 0, a cycle of
//! directories detached from the root, a directory naming itself, a wrong
//! parent field); fsck reports each, repair leaves an image that checks
//! clean, and the engine mounts it and passes its own check.

use std::sync::Arc;

use lanefs_core::{Cred, Fs, FsConfig, ROOT_INO};
use lanefs_image::{fsck_device, FsckReport, ImageStore, MemDevice};
use lanefs_store::{DirEntryRecord, FileKind, Ino, Store};

mod common;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

/// The tree every test damages: `/d` (a directory) holding `/d/f` (one
/// name), `/d/sub` (a directory) holding `/d/sub/g`, and `/h`, `/d/h2`
/// (two names of one file).
struct Tree {
    dev: Arc<MemDevice>,
    d: Ino,
    f: Ino,
    sub: Ino,
    g: Ino,
    h: Ino,
}

fn tree() -> Tree {
    let dev = common::fresh(8 << 20);
    let root = Cred::root();
    let store = Arc::new(common::open(&dev));
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
    let sub = fs.mkdir(&root, d, b"sub", 0o755, 0).unwrap().ino;
    let file = |dir: Ino, name: &[u8]| {
        let (_, f, created) = fs
            .open_at(&root, dir, name, CREAT, 0o644, 0o022, false)
            .unwrap();
        assert!(created);
        fs.write(&f, 0, &[7u8; 5000]).unwrap();
        fs.lookup(&root, dir, name).unwrap().ino
    };
    let f = file(d, b"f");
    let g = file(sub, b"g");
    let h = file(ROOT_INO, b"h");
    fs.link(&root, h, d, b"h2").unwrap();
    fs.sync().unwrap();
    if let Err(p) = fs.check() {
        panic!("engine check of the new tree: {p:#?}");
    }
    drop(fs);
    store.checkpoint().unwrap();
    drop(store);
    let r = fsck_device(dev.clone(), false).unwrap();
    assert!(r.clean && r.links.is_empty(), "the new tree: {r:#?}");
    Tree {
        dev,
        d,
        f,
        sub,
        g,
        h,
    }
}

/// Change the image through the store API, then checkpoint.
fn damage(dev: &Arc<MemDevice>, f: impl FnOnce(&ImageStore)) {
    let s = common::open(dev);
    f(&s);
    s.checkpoint().unwrap();
}

fn set_nlink(s: &ImageStore, ino: Ino, nlink: u32) {
    let mut r = s.read_inode(ino).unwrap().unwrap();
    r.nlink = nlink;
    s.write_inode(&r).unwrap();
}

/// fsck reports a link problem naming each of `inos` (and no other kind
/// of problem); repair fixes it; the image is then clean, and the engine
/// mounts it and passes its own check. Returns the repair's report.
fn reported_and_repaired(dev: &Arc<MemDevice>, inos: &[Ino], words: &str) -> FsckReport {
    let r = fsck_device(dev.clone(), false).unwrap();
    assert!(!r.clean && r.store_clean(), "{r:#?}");
    for ino in inos {
        assert!(
            r.links
                .iter()
                .any(|l| l.contains(&format!(" {ino} ")) && l.contains(words)),
            "no {words:?} line for inode {ino}: {r:#?}"
        );
    }
    let fixed = fsck_device(dev.clone(), true).unwrap();
    assert!(fixed.clean, "repair left problems: {fixed:#?}");
    assert!(!fixed.repaired.is_empty(), "{fixed:#?}");
    let again = fsck_device(dev.clone(), false).unwrap();
    assert!(again.clean && again.repaired.is_empty(), "{again:#?}");
    let store = Arc::new(common::open(dev));
    let fs = Fs::new(store, FsConfig::default()).unwrap();
    if let Err(p) = fs.check() {
        panic!("engine check after repair: {p:#?}");
    }
    fixed
}

fn names(dev: &Arc<MemDevice>, dir: Ino) -> Vec<Vec<u8>> {
    let s = common::open(dev);
    let mut v: Vec<_> = s
        .dir_read(dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

#[test]
fn a_leaked_file_is_reported_and_freed() {
    let t = tree();
    // The entry goes, the record keeps link count 1.
    damage(&t.dev, |s| s.dir_remove(t.d, b"f").unwrap());
    reported_and_repaired(&t.dev, &[t.f], "leaked");
    let s = common::open(&t.dev);
    assert_eq!(s.read_inode(t.f).unwrap(), None, "the leaked file is freed");
    assert!(s.read_inode(t.h).unwrap().is_some());
}

#[test]
fn a_leaked_directory_is_freed_with_what_only_it_named() {
    let t = tree();
    damage(&t.dev, |s| s.dir_remove(t.d, b"sub").unwrap());
    // Only the directory is leaked; its file is still named (by it).
    reported_and_repaired(&t.dev, &[t.sub], "leaked");
    let s = common::open(&t.dev);
    assert_eq!(s.read_inode(t.sub).unwrap(), None);
    assert_eq!(s.read_inode(t.g).unwrap(), None, "named only by the leak");
    assert!(s.read_inode(t.f).unwrap().is_some());
}

#[test]
fn a_file_count_above_its_names_is_set_to_them() {
    let t = tree();
    damage(&t.dev, |s| set_nlink(s, t.f, 2));
    reported_and_repaired(&t.dev, &[t.f], "link count 2 but 1 entries");
    assert_eq!(
        common::open(&t.dev).read_inode(t.f).unwrap().unwrap().nlink,
        1
    );
}

#[test]
fn a_file_count_below_its_names_is_set_to_them() {
    let t = tree();
    damage(&t.dev, |s| set_nlink(s, t.h, 1));
    reported_and_repaired(&t.dev, &[t.h], "link count 1 but 2 entries");
    assert_eq!(
        common::open(&t.dev).read_inode(t.h).unwrap().unwrap().nlink,
        2
    );
    assert_eq!(names(&t.dev, t.d), [&b"f"[..], b"h2", b"sub"]);
}

#[test]
fn a_directory_named_twice_keeps_the_name_in_its_parent() {
    let t = tree();
    damage(&t.dev, |s| {
        let e = DirEntryRecord {
            name: b"again".to_vec(),
            ino: t.sub,
            kind: FileKind::Directory,
            cookie: 1000,
        };
        s.dir_insert(ROOT_INO, &e).unwrap();
    });
    reported_and_repaired(&t.dev, &[t.sub], "named by 2 entries");
    assert_eq!(names(&t.dev, ROOT_INO), [&b"d"[..], b"h"]);
    assert_eq!(names(&t.dev, t.d), [&b"f"[..], b"h2", b"sub"]);
}

#[test]
fn a_directory_count_off_on_disk_is_derived_not_a_problem() {
    // A directory's link count is a derived field (docs/FORMAT.md): a
    // crash may leave it stale, recovery recomputes it, fsck notes it.
    let t = tree();
    damage(&t.dev, |s| set_nlink(s, t.d, 9));
    let r = fsck_device(t.dev.clone(), false).unwrap();
    assert!(r.clean, "{r:#?}");
    assert!(
        r.notes.iter().any(|n| n.contains("derived")),
        "no derived-field note: {r:#?}"
    );
    let s = common::open(&t.dev);
    assert_eq!(s.read_inode(t.d).unwrap().unwrap().nlink, 3);
}

#[test]
fn a_named_inode_with_link_count_zero_is_reported() {
    let t = tree();
    damage(&t.dev, |s| set_nlink(s, t.f, 0));
    // Recovery frees it as an orphan; repair then drops the entry.
    let fixed = reported_and_repaired(&t.dev, &[t.f], "link count 0 but 1 entries");
    assert!(
        fixed.repaired.iter().any(|l| l.contains("free inode")),
        "{fixed:#?}"
    );
    assert_eq!(names(&t.dev, t.d), [&b"h2"[..], b"sub"]);
}

#[test]
fn a_leaked_tree_is_freed_level_by_level_and_counts_follow() {
    let t = tree();
    // `/d` loses its name: it, `/d/f`, `/d/sub` and `/d/sub/g` are named
    // only from inside the lost tree, and `/h` loses its second name.
    damage(&t.dev, |s| s.dir_remove(ROOT_INO, b"d").unwrap());
    let fixed = reported_and_repaired(&t.dev, &[t.d], "leaked");
    assert!(
        fixed
            .repaired
            .iter()
            .any(|l| l.contains("link count 2 but 1")),
        "{fixed:#?}"
    );
    let s = common::open(&t.dev);
    for ino in [t.d, t.f, t.sub, t.g] {
        assert_eq!(s.read_inode(ino).unwrap(), None, "inode {ino} kept");
    }
    assert_eq!(s.read_inode(t.h).unwrap().unwrap().nlink, 1);
    drop(s);
    assert_eq!(names(&t.dev, ROOT_INO), [&b"h"[..]]);
}

fn dir_entry(name: &[u8], ino: Ino) -> DirEntryRecord {
    DirEntryRecord {
        name: name.to_vec(),
        ino,
        kind: FileKind::Directory,
        cookie: 1000,
    }
}

fn set_parent(s: &ImageStore, ino: Ino, parent: Ino) {
    let mut r = s.read_inode(ino).unwrap().unwrap();
    r.parent = parent;
    s.write_inode(&r).unwrap();
}

#[test]
fn a_detached_cycle_of_two_directories_is_reported_and_freed() {
    // Pass 3: `/d` loses its name in the root and `/d/sub` names `/d`
    // (as `up`), its record's parent now `sub`: each of the two is named
    // exactly once, so link counts alone see nothing wrong.
    let t = tree();
    damage(&t.dev, |s| {
        s.dir_remove(ROOT_INO, b"d").unwrap();
        s.dir_insert(t.sub, &dir_entry(b"up", t.d)).unwrap();
        set_parent(s, t.d, t.sub);
    });
    let r = fsck_device(t.dev.clone(), false).unwrap();
    assert!(
        !r.links.iter().any(|l| l.contains("leaked")),
        "pass 4 sees a cycle as named: {r:#?}"
    );
    let fixed = reported_and_repaired(&t.dev, &[t.d, t.sub], "unreachable from the root");
    assert!(
        fixed.repaired.iter().any(|l| l.contains("freed")),
        "{fixed:#?}"
    );
    let s = common::open(&t.dev);
    for ino in [t.d, t.f, t.sub, t.g] {
        assert_eq!(s.read_inode(ino).unwrap(), None, "inode {ino} kept");
    }
    // `/h` lost its second name (`/d/h2`, inside the cycle).
    assert_eq!(s.read_inode(t.h).unwrap().unwrap().nlink, 1);
    drop(s);
    assert_eq!(names(&t.dev, ROOT_INO), [&b"h"[..]]);
}

#[test]
fn a_detached_directory_naming_itself_is_freed() {
    let t = tree();
    damage(&t.dev, |s| {
        s.dir_remove(t.d, b"sub").unwrap();
        s.dir_insert(t.sub, &dir_entry(b"me", t.sub)).unwrap();
        set_parent(s, t.sub, t.sub);
    });
    reported_and_repaired(&t.dev, &[t.sub], "unreachable from the root");
    let s = common::open(&t.dev);
    assert_eq!(s.read_inode(t.sub).unwrap(), None);
    assert_eq!(s.read_inode(t.g).unwrap(), None, "named only by the cycle");
    assert!(s.read_inode(t.d).unwrap().is_some());
    drop(s);
    assert_eq!(names(&t.dev, t.d), [&b"f"[..], b"h2"]);
}

#[test]
fn a_directory_whose_parent_field_is_wrong_gets_its_namer() {
    let t = tree();
    damage(&t.dev, |s| set_parent(s, t.sub, ROOT_INO));
    let fixed = reported_and_repaired(&t.dev, &[t.sub], &format!("parent {ROOT_INO} in"));
    assert!(
        fixed.repaired.iter().any(|l| l.contains("parent set")),
        "{fixed:#?}"
    );
    let s = common::open(&t.dev);
    assert_eq!(s.read_inode(t.sub).unwrap().unwrap().parent, t.d);
    drop(s);
    assert_eq!(names(&t.dev, t.d), [&b"f"[..], b"h2", b"sub"]);
}
