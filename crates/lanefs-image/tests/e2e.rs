//! The engine (`lanefs_core::Fs`) on an image file: build a tree, sync,
//! drop, reopen, find everything; an unlinked-but-open file in a copy of
//! the synced image is freed by recovery.

use std::path::Path;
use std::sync::Arc;

use lanefs_core::{Cred, Fs, FsConfig, ROOT_INO};
use lanefs_image::{fsck, mkfs, ImageStore};
use lanefs_store::Store;

mod common;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

fn mount(path: &Path) -> (Fs, Arc<ImageStore>) {
    let store = Arc::new(ImageStore::open_with(path, &common::cfg()).unwrap());
    (Fs::new(store.clone(), FsConfig::default()).unwrap(), store)
}

fn checked(fs: &Fs) {
    if let Err(p) = fs.check() {
        panic!("check failed: {p:#?}");
    }
}

fn body(i: usize) -> Vec<u8> {
    (0..10_000 + i * 3001).map(|k| (k * 7 + i) as u8).collect()
}

#[test]
fn a_tree_survives_drop_and_reopen_and_orphans_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    mkfs(&img, 32 << 20).unwrap();
    let root = Cred::root();
    let copy = dir.path().join("copy.img");
    {
        let (fs, _store) = mount(&img);
        let a = fs.mkdir(&root, ROOT_INO, b"a", 0o755, 0).unwrap();
        let b = fs.mkdir(&root, a.ino, b"b", 0o700, 0).unwrap();
        for i in 0..20 {
            let name = format!("f{i}");
            let parent = if i % 2 == 0 { a.ino } else { b.ino };
            let (_, f, created) = fs
                .open_at(&root, parent, name.as_bytes(), CREAT, 0o644, 0o022, false)
                .unwrap();
            assert!(created);
            fs.write(&f, 0, &body(i)).unwrap();
        }
        fs.symlink(&root, ROOT_INO, b"link", b"a/b/f1").unwrap();
        let f0 = fs.lookup(&root, a.ino, b"f0").unwrap();
        fs.link(&root, f0.ino, ROOT_INO, b"hard").unwrap();
        fs.rename(&root, a.ino, b"f2", b.ino, b"moved", 0).unwrap();
        fs.unlink(&root, a.ino, b"f4").unwrap();
        // Open, unlinked, written: lives until close — or until a crash.
        let (_, doomed, _) = fs
            .open_at(&root, ROOT_INO, b"doomed", CREAT, 0o644, 0, false)
            .unwrap();
        fs.write(&doomed, 0, &[9u8; 50_000]).unwrap();
        fs.unlink(&root, ROOT_INO, b"doomed").unwrap();
        fs.sync().unwrap();
        checked(&fs);
        // The image as a power cut right now would leave it.
        std::fs::copy(&img, &copy).unwrap();
        drop(doomed);
        fs.sync().unwrap();
    }
    let r = fsck(&img, false).unwrap();
    assert!(r.clean, "{r:#?}");
    for (path, expect_orphan) in [(&img, false), (&copy, true)] {
        let (fs, store) = mount(path);
        if expect_orphan {
            assert!(
                store.recovery_report().orphans_freed >= 1,
                "{:?}",
                store.recovery_report()
            );
        }
        checked(&fs);
        let a = fs.lookup(&root, ROOT_INO, b"a").unwrap();
        let b = fs.lookup(&root, a.ino, b"b").unwrap();
        assert_eq!(b.perm, 0o700);
        for i in 0..20 {
            let parent = if i % 2 == 0 { a.ino } else { b.ino };
            let name = match i {
                2 => "moved".to_string(),
                _ => format!("f{i}"),
            };
            let parent = if i == 2 { b.ino } else { parent };
            let got = fs.lookup(&root, parent, name.as_bytes());
            if i == 4 {
                assert_eq!(got.err(), Some(lanefs_store::Errno::ENOENT));
                continue;
            }
            let attr = got.unwrap();
            let want = body(i);
            assert_eq!(attr.size, want.len() as u64, "{name}");
            let f = fs.open(&root, attr.ino, libc::O_RDONLY).unwrap();
            let mut buf = vec![0u8; want.len() + 10];
            assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), want.len());
            assert_eq!(&buf[..want.len()], &want[..], "{name}");
        }
        let link = fs.lookup(&root, ROOT_INO, b"link").unwrap();
        assert_eq!(fs.readlink(link.ino).unwrap(), b"a/b/f1");
        let hard = fs.lookup(&root, ROOT_INO, b"hard").unwrap();
        assert_eq!(
            (hard.nlink, hard.ino),
            (2, fs.lookup(&root, a.ino, b"f0").unwrap().ino)
        );
        assert!(fs.lookup(&root, ROOT_INO, b"doomed").is_err());
        // Nothing but the live tree holds inodes: the orphan is gone.
        let live = store.list_inodes().unwrap();
        assert_eq!(
            live.len(),
            1 + 2 + 19 + 1,
            "root, a, b, 19 files, the symlink: {live:?}"
        );
        let sb = store.superblock().unwrap();
        assert_eq!(sb.used_inodes, live.len() as u64);
        drop(fs);
        drop(store);
        let r = fsck(path, false).unwrap();
        assert!(r.clean && r.orphans_pending == 0, "{r:#?}");
    }
}

tiny_budget_too!(a_tree_survives_drop_and_reopen_and_orphans_are_freed,);
