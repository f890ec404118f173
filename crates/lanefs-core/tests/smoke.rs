//! End-to-end scenarios through the core API, each followed by a full check.

use std::sync::Arc;

use lanefs_core::*;

fn fresh(cap_pages: u64, inodes: u64) -> (Fs, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: cap_pages * PAGE_SIZE as u64,
        max_inodes: inodes,
    }));
    (Fs::new(store.clone(), FsConfig::default()).unwrap(), store)
}

fn checked(fs: &Fs) {
    if let Err(problems) = fs.check() {
        panic!("check failed: {problems:#?}");
    }
}

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

#[test]
fn write_read_shrink_reload() {
    let (fs, _) = fresh(1024, 100);
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    let (a, f, created) = fs
        .open_at(&root, d.ino, b"f", CREAT, 0o644, 0o022, false)
        .unwrap();
    assert!(created);
    assert_eq!(a.perm, 0o644);
    assert_eq!(fs.write(&f, 10_000, b"hello").unwrap(), (5, 10_005));
    drop(f);
    checked(&fs);
    let stats = fs.shrink();
    assert!(stats.inodes_evicted >= 1, "{stats:?}");
    let attr = fs.lookup(&root, d.ino, b"f").unwrap();
    assert_eq!(attr.size, 10_005);
    assert_eq!(attr.blocks, 8, "one 4 KiB page allocated");
    let f = fs.open(&root, attr.ino, libc::O_RDONLY).unwrap();
    let mut buf = vec![9u8; 20_000];
    assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), 10_005);
    assert!(buf[..10_000].iter().all(|b| *b == 0));
    assert_eq!(&buf[10_000..10_005], b"hello");
    assert_eq!(fs.write(&f, 0, b"x"), Err(Errno::EBADF));
    drop(f);
    fs.forget(d.ino, 1);
    checked(&fs);
}

#[test]
fn unlinked_open_file_lives_until_close() {
    let (fs, store) = fresh(1024, 100);
    let root = Cred::root();
    let (_, f, _) = fs
        .open_at(&root, ROOT_INO, b"f", CREAT, 0o644, 0, false)
        .unwrap();
    fs.write(&f, 0, &[1u8; 9000]).unwrap();
    fs.unlink(&root, ROOT_INO, b"f").unwrap();
    assert_eq!(fs.lookup(&root, ROOT_INO, b"f"), Err(Errno::ENOENT));
    checked(&fs);
    fs.write(&f, 9000, b"more").unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(fs.read(&f, 9000, &mut buf).unwrap(), 4);
    assert_eq!(fs.getattr(f.ino()).unwrap().nlink, 0);
    drop(f);
    checked(&fs);
    assert_eq!(store.inode_records(), 1, "only the root is left");
    assert_eq!(store.page_records(), 0);
    assert_eq!(fs.statfs().unwrap().blocks_free, 1024);
}

#[test]
fn rename_edges() {
    let (fs, _) = fresh(1024, 100);
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT_INO, b"a", 0o755, 0).unwrap();
    let b = fs.mkdir(&r, a.ino, b"b", 0o755, 0).unwrap();
    fs.mkdir(&r, ROOT_INO, b"e", 0o755, 0).unwrap();
    fs.mknod(&r, ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"a", b.ino, b"x", 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"f", ROOT_INO, b"e", 0),
        Err(Errno::EISDIR)
    );
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"e", ROOT_INO, b"f", 0),
        Err(Errno::ENOTDIR)
    );
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"e", ROOT_INO, b"a", 0),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"f", ROOT_INO, b"e", RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    fs.rename(&r, a.ino, b"b", ROOT_INO, b"e", 0).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(
        fs.getattr(ROOT_INO).unwrap().nlink,
        4,
        "a, e(=old b), plus . and .."
    );
    assert_eq!(fs.lookup(&r, b.ino, b"..").unwrap().ino, ROOT_INO);
    fs.rename(&r, ROOT_INO, b"f", a.ino, b"g", RENAME_EXCHANGE)
        .unwrap_err();
    fs.mknod(&r, a.ino, b"g", 0, 0, 0).unwrap();
    fs.rename(&r, ROOT_INO, b"f", a.ino, b"g", RENAME_EXCHANGE)
        .unwrap();
    fs.rename(&r, ROOT_INO, b"e", a.ino, b"g", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.lookup(&r, a.ino, b"g").unwrap().ino, b.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    checked(&fs);
}

#[test]
fn readdir_cookies_survive_eviction_and_changes() {
    let (fs, _) = fresh(1024, 1000);
    let r = Cred::root();
    for i in 0..100 {
        fs.mknod(&r, ROOT_INO, format!("f{i}").as_bytes(), 0, 0, 0)
            .unwrap();
    }
    let dir = fs
        .open(&r, ROOT_INO, libc::O_RDONLY | libc::O_DIRECTORY)
        .unwrap();
    let mut seen = Vec::new();
    let mut off = 0;
    loop {
        let mut batch = Vec::new();
        fs.readdir(&dir, off, &mut |e| {
            batch.push((e.name.to_vec(), e.next_offset));
            batch.len() == 7
        })
        .unwrap();
        if batch.is_empty() {
            break;
        }
        off = batch.last().unwrap().1;
        let full = batch.len() == 7;
        seen.extend(batch.into_iter().map(|(n, _)| n));
        if !full {
            break;
        }
        fs.shrink();
        fs.mknod(&r, ROOT_INO, format!("new{off}").as_bytes(), 0, 0, 0)
            .unwrap();
        assert!(seen.len() < 300, "listing does not end");
        let victim = format!("f{}", 99 - seen.len() / 7);
        let _ = fs.unlink(&r, ROOT_INO, victim.as_bytes());
    }
    let names: std::collections::HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(names.len(), seen.len(), "no duplicates");
    for i in 0..50 {
        assert!(
            names.contains(format!("f{i}").as_bytes()),
            "f{i} was present throughout"
        );
    }
    drop(dir);
    checked(&fs);
}

#[test]
fn enospc_changes_nothing() {
    let (fs, _) = fresh(4, 3);
    let r = Cred::root();
    let (_, f, _) = fs
        .open_at(&r, ROOT_INO, b"f", CREAT, 0o644, 0, false)
        .unwrap();
    fs.write(&f, 0, &[1u8; 3 * PAGE_SIZE]).unwrap();
    assert_eq!(
        fs.write(&f, 3 * PAGE_SIZE as u64, &[2u8; 2 * PAGE_SIZE]),
        Err(Errno::ENOSPC)
    );
    assert_eq!(fs.getattr(f.ino()).unwrap().size, 3 * PAGE_SIZE as u64);
    fs.mknod(&r, ROOT_INO, b"g", 0, 0, 0).unwrap();
    assert_eq!(fs.mknod(&r, ROOT_INO, b"h", 0, 0, 0), Err(Errno::ENOSPC));
    assert_eq!(fs.lookup(&r, ROOT_INO, b"h"), Err(Errno::ENOENT));
    drop(f);
    checked(&fs);
}

#[test]
fn permissions_sticky_and_setgid() {
    let (fs, _) = fresh(1024, 100);
    let r = Cred::root();
    let alice = Cred::user(1000, 1000);
    let bob = Cred::user(1001, 1001);
    let tmp = fs.mkdir(&r, ROOT_INO, b"tmp", 0o1777, 0).unwrap();
    fs.mknod(&alice, tmp.ino, b"a", 0o644, 0, 0).unwrap();
    assert_eq!(fs.unlink(&bob, tmp.ino, b"a"), Err(Errno::EPERM));
    let sg = fs.mkdir(&r, ROOT_INO, b"sg", 0o777, 0).unwrap();
    fs.setattr(
        &r,
        sg.ino,
        &SetAttr {
            mode: Some(0o2777),
            gid: Some(50),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let sub = fs.mkdir(&alice, sg.ino, b"sub", 0o755, 0).unwrap();
    assert_eq!((sub.gid, sub.perm & 0o2000), (50, 0o2000));
    assert_eq!(
        fs.open_at(&alice, ROOT_INO, b"own", CREAT, 0o644, 0, false)
            .unwrap_err(),
        Errno::EACCES
    );
    let (_, f, _) = fs
        .open_at(&alice, tmp.ino, b"own", CREAT, 0o6755, 0, false)
        .unwrap();
    fs.setattr(
        &r,
        f.ino(),
        &SetAttr {
            mode: Some(0o6755),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    fs.write(&f, 0, b"x").unwrap();
    assert_eq!(
        fs.getattr(f.ino()).unwrap().perm,
        0o755,
        "write by owner clears suid/sgid"
    );
    assert_eq!(
        fs.open(&bob, f.ino(), libc::O_WRONLY).unwrap_err(),
        Errno::EACCES
    );
    drop(f);
    checked(&fs);
}

#[test]
fn link_edges_do_not_deadlock() {
    let (fs, _) = fresh(1024, 100);
    let r = Cred::root();
    let alice = Cred::user(1000, 1000);
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o777, 0).unwrap();
    assert_eq!(fs.link(&r, d.ino, d.ino, b"self"), Err(Errno::EPERM));
    assert_eq!(fs.link(&alice, d.ino, d.ino, b"self"), Err(Errno::EPERM));
    assert_eq!(fs.link(&r, d.ino, ROOT_INO, b"d"), Err(Errno::EEXIST));
    let f = fs.mknod(&r, d.ino, b"f", 0o600, 0, 0).unwrap();
    assert_eq!(
        fs.link(&alice, f.ino, d.ino, b"g"),
        Err(Errno::EPERM),
        "protected_hardlinks"
    );
    let g = fs.link(&r, f.ino, d.ino, b"g").unwrap();
    assert_eq!(g.nlink, 2);
    checked(&fs);
}
