//! Unit tests for the POSIX edge cases of issue 2 (items 3 and 4), through
//! the Rust API (and the core where the API cannot express the input).
//! Every expectation is what Linux (tmpfs) does, unless the test name says
//! `divergence_` (those are listed in `docs/SEMANTICS.md`).

use std::collections::HashMap;
use std::io::{self, Read, Seek, Write};

use lanefs::{
    Cred, Errno, FileKind, Filesystem, FsConfig, MemoryStoreConfig, OpenOptions, TimeSet, Timespec,
    FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, FILE_SIZE_MAX, LINK_MAX,
    PAGE_SIZE, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT, XATTR_CREATE, XATTR_REPLACE,
    XATTR_SIZE_MAX,
};

fn fs() -> Filesystem {
    Filesystem::new_in_memory().expect("new file system")
}

fn alice(fs: &Filesystem) -> Filesystem {
    fs.with_cred(Cred::user(1000, 1000))
}

fn bob(fs: &Filesystem) -> Filesystem {
    fs.with_cred(Cred {
        uid: 1001,
        gid: 1001,
        groups: vec![1000],
    })
}

/// The errno of a failed call (panics on success, naming `what`).
#[track_caller]
fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> Errno {
    match r {
        Ok(v) => panic!("expected an error, got Ok({:?})", v),
        Err(e) => Errno(e.raw_os_error().expect("error carries an errno")),
    }
}

fn names(fs: &Filesystem, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = fs
        .read_dir(dir)
        .expect("read_dir")
        .map(|e| String::from_utf8_lossy(e.expect("entry").name_bytes()).into_owned())
        .collect();
    v.sort();
    v
}

// ---- rename ----------------------------------------------------------------

#[test]
fn rename_over_empty_dir_replaces_it() -> io::Result<()> {
    let fs = fs();
    fs.create_dir_all("/a/x")?;
    fs.create_dir("/b")?;
    fs.rename("/a", "/b")?;
    assert_eq!(names(&fs, "/"), ["b"]);
    assert!(fs.metadata("/b/x")?.is_dir());
    assert_eq!(fs.metadata("/")?.nlink(), 3);
    Ok(())
}

#[test]
fn rename_over_nonempty_dir_is_enotempty() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/a")?;
    fs.create_dir_all("/b/inner")?;
    assert_eq!(errno(fs.rename("/a", "/b")), Errno::ENOTEMPTY);
    // A directory onto its own ancestor: the ancestor is not empty.
    assert_eq!(errno(fs.rename("/b/inner", "/b")), Errno::ENOTEMPTY);
    Ok(())
}

#[test]
fn rename_dir_into_own_subtree_is_einval() -> io::Result<()> {
    let fs = fs();
    fs.create_dir_all("/a/b/c")?;
    assert_eq!(errno(fs.rename("/a", "/a/b/c/d")), Errno::EINVAL);
    assert_eq!(errno(fs.rename("/a", "/a/b/x")), Errno::EINVAL);
    assert_eq!(
        errno(fs.rename_flags("/a", "/a/b", RENAME_EXCHANGE)),
        Errno::EINVAL
    );
    assert!(fs.metadata("/a/b/c")?.is_dir());
    Ok(())
}

#[test]
fn rename_same_inode_is_a_noop() -> io::Result<()> {
    let fs = fs();
    fs.write("/f", b"x")?;
    fs.hard_link("/f", "/g")?;
    fs.rename("/f", "/g")?;
    // Both names stay (Linux: "If oldpath and newpath are existing hard
    // links referring to the same file, rename() does nothing").
    assert_eq!(names(&fs, "/"), ["f", "g"]);
    assert_eq!(fs.metadata("/f")?.nlink(), 2);
    fs.rename("/f", "/f")?;
    Ok(())
}

#[test]
fn rename_type_mismatches() -> io::Result<()> {
    let fs = fs();
    fs.write("/file", b"x")?;
    fs.create_dir("/dir")?;
    assert_eq!(errno(fs.rename("/file", "/dir")), Errno::EISDIR);
    assert_eq!(errno(fs.rename("/dir", "/file")), Errno::ENOTDIR);
    assert_eq!(errno(fs.rename("/file/", "/x")), Errno::ENOTDIR);
    assert_eq!(errno(fs.rename("/file", "/x/")), Errno::ENOTDIR);
    fs.rename("/dir/", "/dir2/")?;
    assert_eq!(errno(fs.rename("/missing", "/x")), Errno::ENOENT);
    assert_eq!(errno(fs.rename("/.", "/x")), Errno::EBUSY);
    assert_eq!(errno(fs.rename("/file", "/dir2/..")), Errno::EBUSY);
    assert_eq!(errno(fs.rename("/", "/x")), Errno::EBUSY);
    Ok(())
}

#[test]
fn rename_noreplace_and_exchange() -> io::Result<()> {
    let fs = fs();
    fs.write("/f", b"file")?;
    fs.create_dir("/d")?;
    fs.write("/d/inside", b"")?;
    assert_eq!(
        errno(fs.rename_flags("/f", "/d", RENAME_NOREPLACE)),
        Errno::EEXIST
    );
    assert_eq!(
        errno(fs.rename_flags("/f", "/d", RENAME_NOREPLACE | RENAME_EXCHANGE)),
        Errno::EINVAL
    );
    assert_eq!(
        errno(fs.rename_flags("/f", "/nope", RENAME_EXCHANGE)),
        Errno::ENOENT
    );
    assert_eq!(errno(fs.rename_flags("/f", "/g", 64)), Errno::EINVAL);
    fs.rename_flags("/f", "/g", RENAME_NOREPLACE)?;
    // Exchange a file and a non-empty directory: both stay, swapped.
    fs.rename_flags("/g", "/d", RENAME_EXCHANGE)?;
    assert!(fs.metadata("/g")?.is_dir());
    assert!(fs.metadata("/g/inside")?.is_file());
    assert_eq!(fs.read("/d")?, b"file");
    Ok(())
}

/// Linux looks the source up before it checks the change's permissions:
/// a missing source is `ENOENT` even where the caller may not write the
/// directories (lanefs answers it from a lock-free look, before any lock),
/// an existing one `EACCES`; a search-denied parent stays `EACCES`.
#[test]
fn rename_whiteout_leaves_a_whiteout() -> io::Result<()> {
    // tmpfs (shmem_whiteout): the source name is left naming a 0/0
    // character device of mode 0, owned by the caller; with a trailing
    // slash the usual rules apply first. Until 2026-11 lanefs answered
    // EINVAL.
    let fs = fs();
    fs.write("/a", b"x")?;
    fs.rename_flags("/a", "/b", RENAME_WHITEOUT)?;
    assert_eq!(fs.read("/b")?, b"x");
    let w = fs.symlink_metadata("/a")?;
    assert_eq!(
        (w.mode(), w.rdev(), w.nlink(), w.len()),
        (libc::S_IFCHR, 0, 1, 0)
    );
    assert_eq!(
        errno(fs.rename_flags("/b", "/a", RENAME_WHITEOUT | RENAME_NOREPLACE)),
        Errno::EEXIST
    );
    assert_eq!(
        errno(fs.rename_flags("/b", "/c/", RENAME_WHITEOUT)),
        Errno::ENOTDIR
    );
    fs.create_dir("/d")?;
    fs.set_permissions("/d", 0o777)?;
    alice(&fs).create_dir("/d/mine")?;
    alice(&fs).rename_flags("/d/mine/", "/d/moved", RENAME_WHITEOUT)?;
    let w = fs.symlink_metadata("/d/mine")?;
    assert_eq!((w.mode(), w.uid(), w.gid()), (libc::S_IFCHR, 1000, 1000));
    assert!(fs.metadata("/d/moved")?.is_dir());
    assert_eq!(fs.metadata("/d")?.nlink(), 3, "one subdirectory");
    assert_eq!(names(&fs, "/d"), ["mine", "moved"]);
    Ok(())
}

#[test]
fn rename_of_a_missing_source_is_enoent_before_write_permission() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/ro")?;
    fs.write("/ro/f", b"x")?;
    fs.create_dir("/rw")?;
    fs.set_permissions("/rw", 0o777)?;
    fs.set_permissions("/ro", 0o555)?;
    let a = alice(&fs);
    assert_eq!(errno(a.rename("/ro/nope", "/ro/g")), Errno::ENOENT);
    assert_eq!(errno(a.rename("/ro/nope", "/rw/g")), Errno::ENOENT);
    assert_eq!(errno(a.rename("/ro/f", "/ro/g")), Errno::EACCES);
    assert_eq!(errno(a.rename("/ro/f", "/rw/g")), Errno::EACCES);
    fs.set_permissions("/ro", 0o700)?;
    assert_eq!(errno(a.rename("/ro/nope", "/rw/g")), Errno::EACCES);
    // The same names, made since, rename.
    fs.set_permissions("/ro", 0o777)?;
    a.write("/ro/nope", b"y")?;
    a.rename("/ro/nope", "/rw/g")?;
    assert_eq!(fs.read("/rw/g")?, b"y");
    Ok(())
}
#[test]
fn rename_across_dirs_updates_link_counts() -> io::Result<()> {
    let fs = fs();
    fs.create_dir_all("/p/child")?;
    fs.create_dir("/q")?;
    assert_eq!(fs.metadata("/p")?.nlink(), 3);
    fs.rename("/p/child", "/q/child")?;
    assert_eq!(fs.metadata("/p")?.nlink(), 2);
    assert_eq!(fs.metadata("/q")?.nlink(), 3);
    // `..` of the moved directory is its new parent.
    assert_eq!(fs.metadata("/q/child/..")?.ino(), fs.metadata("/q")?.ino());
    fs.core().check().expect("consistent");
    Ok(())
}

// ---- links, names, paths -------------------------------------------------

/// A directory's link count never passes `LINK_MAX`, also when mkdirs in
/// it race under different stripes: each reserves its link from its
/// stripe's room of granted links, and the last ones are decided holding
/// every stripe (`fs::reserve_subdir_link`), so exactly one of the last
/// two succeeds.
#[test]
fn racing_mkdirs_stop_at_the_link_limit() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/p")?;
    // A new directory has 2 links; each subdirectory adds one.
    for i in 2..LINK_MAX - 1 {
        fs.create_dir(format!("/p/{i}"))?;
    }
    assert_eq!(fs.metadata("/p")?.nlink(), LINK_MAX - 1);
    let results: Vec<io::Result<()>> = std::thread::scope(|s| {
        let racers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|n| {
                let fs = fs.clone();
                s.spawn(move || fs.create_dir(format!("/p/last-{n}")))
            })
            .collect();
        racers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    let err = results
        .into_iter()
        .find_map(|r| r.err())
        .expect("one failed");
    assert_eq!(errno(Err::<(), _>(err)), Errno::EMLINK);
    assert_eq!(fs.metadata("/p")?.nlink(), LINK_MAX);
    Ok(())
}

#[test]
fn link_to_directory_is_eperm_and_emlink_at_the_limit() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    assert_eq!(errno(fs.hard_link("/d", "/d2")), Errno::EPERM);
    fs.write("/f", b"")?;
    fs.create_dir("/links")?;
    for i in 1..LINK_MAX {
        fs.hard_link("/f", format!("/links/{}", i))?;
    }
    assert_eq!(fs.metadata("/f")?.nlink(), LINK_MAX);
    assert_eq!(errno(fs.hard_link("/f", "/one-too-many")), Errno::EMLINK);
    fs.remove_file("/links/1")?;
    fs.hard_link("/f", "/now-fits")?;
    Ok(())
}

#[test]
fn name_and_path_lengths() -> io::Result<()> {
    let fs = fs();
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    fs.write(format!("/{}", n255), b"ok")?;
    assert_eq!(
        errno(fs.write(format!("/{}", n256), b"")),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(fs.create_dir(format!("/{}", n256))),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(fs.metadata(format!("/{}/x", n256))),
        Errno::ENAMETOOLONG
    );
    // Whole path: 4095 bytes resolve, 4096 do not.
    let mut p = "/.".repeat(2046);
    p.push('/');
    assert_eq!(p.len(), 4093);
    assert!(fs.metadata(format!("{}/.", p)).is_ok());
    assert_eq!(errno(fs.metadata(format!("{}//.", p))), Errno::ENAMETOOLONG);
    assert_eq!(errno(fs.metadata("")), Errno::ENOENT);
    // Symlink targets: up to 4095 bytes.
    let t4095 = "t".repeat(4095);
    fs.symlink(&t4095, "/long")?;
    assert_eq!(fs.read_link("/long")?.as_os_str().len(), 4095);
    assert_eq!(
        errno(fs.symlink("t".repeat(4096), "/toolong")),
        Errno::ENAMETOOLONG
    );
    assert_eq!(errno(fs.symlink("", "/empty")), Errno::ENOENT);
    Ok(())
}

#[test]
fn names_are_bytes() -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let fs = fs();
    let odd = std::ffi::OsStr::from_bytes(b"/\xff\xfe\n tab\t");
    fs.write(odd, b"bytes")?;
    assert_eq!(fs.read(odd)?, b"bytes");
    let e = fs.read_dir("/")?.next().expect("one entry")?;
    assert_eq!(e.name_bytes(), b"\xff\xfe\n tab\t");
    Ok(())
}

#[test]
fn dot_and_dotdot_and_slashes() -> io::Result<()> {
    let fs = fs();
    fs.create_dir_all("/a/b")?;
    fs.write("/a/b/f", b"1")?;
    assert_eq!(fs.read("//a/./b/../b///f")?, b"1");
    assert_eq!(fs.read("a/b/f")?, b"1", "relative to the root");
    assert_eq!(fs.metadata("/..")?.ino(), fs.metadata("/")?.ino());
    assert_eq!(errno(fs.metadata("/a/b/f/")), Errno::ENOTDIR);
    assert_eq!(errno(fs.metadata("/a/b/f/.")), Errno::ENOTDIR);
    assert_eq!(errno(fs.create_dir("/a/.")), Errno::EEXIST);
    assert_eq!(errno(fs.create_dir("/")), Errno::EEXIST);
    assert_eq!(errno(fs.remove_dir("/a/.")), Errno::EINVAL);
    assert_eq!(errno(fs.remove_dir("/a/b/..")), Errno::ENOTEMPTY);
    assert_eq!(errno(fs.remove_dir("/")), Errno::EBUSY);
    assert_eq!(errno(fs.remove_file("/a/b/f/")), Errno::ENOTDIR);
    assert_eq!(errno(fs.remove_file("/a/b/")), Errno::EISDIR);
    assert_eq!(errno(fs.remove_file("/a")), Errno::EISDIR);
    assert_eq!(errno(fs.remove_dir("/a/b/f")), Errno::ENOTDIR);
    assert_eq!(errno(fs.remove_dir("/a")), Errno::ENOTEMPTY);
    assert_eq!(
        errno(fs.mknod("/a/new/", libc::S_IFIFO | 0o644, 0)),
        Errno::ENOENT
    );
    assert_eq!(
        errno(fs.mknod("/a/b/f/", libc::S_IFIFO | 0o644, 0)),
        Errno::EEXIST
    );
    fs.create_dir("/a/c/")?;
    Ok(())
}

#[test]
fn symlink_resolution_and_eloop() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    fs.write("/d/f", b"data")?;
    fs.symlink("d", "/ld")?;
    fs.symlink("/d/f", "/lf")?;
    fs.symlink("lf", "/llf")?;
    assert_eq!(fs.read("/ld/f")?, b"data");
    assert_eq!(fs.read("/llf")?, b"data");
    assert!(fs.symlink_metadata("/llf")?.is_symlink());
    assert!(
        fs.symlink_metadata("/ld/")?.is_dir(),
        "a trailing slash follows"
    );
    assert_eq!(errno(fs.symlink_metadata("/lf/")), Errno::ENOTDIR);
    // A chain of 40 links resolves, 41 do not.
    fs.symlink("/d/f", "/c0")?;
    for i in 1..=40 {
        fs.symlink(format!("c{}", i - 1), format!("/c{}", i))?;
    }
    assert_eq!(fs.read("/c39")?, b"data");
    assert_eq!(errno(fs.read("/c40")), Errno::ELOOP);
    fs.symlink("loop", "/loop")?;
    assert_eq!(errno(fs.metadata("/loop")), Errno::ELOOP);
    assert!(fs.symlink_metadata("/loop")?.is_symlink());
    // O_NOFOLLOW on a final symlink.
    let nofollow = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&fs, "/lf");
    assert_eq!(errno(nofollow), Errno::ELOOP);
    // O_CREAT through a dangling symlink creates its target.
    fs.symlink("/d/created", "/dangling")?;
    fs.write("/dangling", b"via link")?;
    assert_eq!(fs.read("/d/created")?, b"via link");
    // O_CREAT|O_EXCL does not follow: the link exists.
    let excl = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fs, "/dangling");
    assert_eq!(errno(excl), Errno::EEXIST);
    assert_eq!(errno(fs.read_link("/d")), Errno::EINVAL);
    Ok(())
}

#[test]
fn open_flag_rules() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    fs.write("/f", b"abc")?;
    let dir_only = |p: &str| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&fs, p)
    };
    assert_eq!(errno(dir_only("/f")), Errno::ENOTDIR);
    assert!(dir_only("/d").is_ok());
    assert_eq!(
        errno(OpenOptions::new().write(true).open(&fs, "/d")),
        Errno::EISDIR
    );
    assert_eq!(errno(fs.create("/d")), Errno::EISDIR);
    assert_eq!(errno(fs.create("/new/")), Errno::EISDIR);
    assert_eq!(errno(fs.open("/missing")), Errno::ENOENT);
    assert_eq!(
        errno(fs.open_flags(
            "/x",
            libc::O_CREAT | libc::O_DIRECTORY | libc::O_RDWR,
            0o644
        )),
        Errno::EINVAL
    );
    // O_TRUNC truncates; O_APPEND writes at the end whatever the position.
    let mut f = OpenOptions::new().append(true).open(&fs, "/f")?;
    f.write_all(b"def")?;
    assert_eq!(f.write_at(b"!", 0)?, 1);
    assert_eq!(fs.read("/f")?, b"abcdef!");
    let mut r = fs.open("/f")?;
    assert_eq!(errno(r.write(b"x")), Errno::EBADF);
    let w = OpenOptions::new().write(true).open(&fs, "/f")?;
    assert_eq!(errno(w.read_at(&mut [0u8; 4], 0)), Errno::EBADF);
    assert_eq!(
        errno(r.set_len(0)),
        Errno::EINVAL,
        "ftruncate needs a writable fd"
    );
    let d = fs.open("/d")?;
    assert_eq!(errno(d.read_at(&mut [0u8; 4], 0)), Errno::EISDIR);
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&fs, "/f")?;
    assert_eq!(fs.metadata("/f")?.len(), 0);
    let mut s = String::new();
    r.read_to_string(&mut s)?;
    assert_eq!(s, "");
    Ok(())
}

// ---- data --------------------------------------------------------------------

#[test]
fn o_path_names_the_file_and_grants_nothing() -> io::Result<()> {
    // As open(2) on tmpfs (kernel 6.18): with O_PATH every flag but
    // O_DIRECTORY and O_NOFOLLOW is ignored (no create, no truncate), any
    // kind opens, only search permission on the path is needed, and the
    // descriptor allows fstat (and linkat) only. Until 2026-11 O_PATH was
    // ignored: O_PATH|O_TRUNC truncated the file, a symlink with
    // O_NOFOLLOW was ELOOP, a fifo ENXIO, a mode-0 file EACCES.
    let fs = fs();
    fs.write("/file", b"hello")?;
    fs.create_dir("/dir")?;
    fs.symlink("file", "/sl")?;
    fs.mknod("/fifo", libc::S_IFIFO | 0o644, 0)?;
    fs.set_permissions("/file", 0)?;
    let path = |p: &str, flags: i32| fs.open_flags(p, libc::O_PATH | flags, 0o644);
    let mut f = path("/file", libc::O_TRUNC | libc::O_WRONLY)?;
    assert_eq!(f.metadata()?.len(), 5, "O_TRUNC ignored");
    assert_eq!(fs.read("/file")?, b"hello");
    let mut buf = [0u8; 4];
    assert_eq!(errno(f.read_at(&mut buf, 0)), Errno::EBADF);
    assert_eq!(errno(f.write_at(b"x", 0)), Errno::EBADF);
    assert_eq!(errno(f.read(&mut buf)), Errno::EBADF);
    assert_eq!(errno(f.set_len(0)), Errno::EBADF);
    assert_eq!(errno(f.set_permissions(0o644)), Errno::EBADF);
    assert_eq!(errno(f.sync_all()), Errno::EBADF);
    assert_eq!(errno(f.seek(std::io::SeekFrom::Start(0))), Errno::EBADF);
    assert_eq!(errno(f.fallocate(0, 0, 10)), Errno::EBADF);
    // A name for it, as linkat(fd, "", AT_EMPTY_PATH) by root.
    fs.link_file(&f, "/file2")?;
    assert_eq!(fs.metadata("/file2")?.nlink(), 2);
    drop(f);
    assert_eq!(
        errno(path("/missing", libc::O_CREAT)),
        Errno::ENOENT,
        "O_CREAT ignored"
    );
    assert_eq!(
        errno(path("/missing", libc::O_CREAT | libc::O_EXCL)),
        Errno::ENOENT
    );
    assert!(!fs.try_exists("/missing")?);
    let sl = path("/sl", libc::O_NOFOLLOW)?;
    assert!(sl.metadata()?.is_symlink());
    assert_eq!(
        errno(path("/sl", libc::O_NOFOLLOW | libc::O_DIRECTORY)),
        Errno::ENOTDIR
    );
    assert!(path("/sl", 0)?.metadata()?.is_file());
    assert_eq!(path("/fifo", 0)?.metadata()?.kind(), FileKind::Fifo);
    let d = path("/dir", libc::O_WRONLY)?;
    assert_eq!(
        fs.core().readdir(d.handle(), 0, &mut |_| true),
        Err(Errno::EBADF),
        "no listing through it"
    );
    path("/dir", libc::O_RDWR | libc::O_CREAT)?;
    path("/dir/", 0)?;
    assert_eq!(errno(path("/file", libc::O_DIRECTORY)), Errno::ENOTDIR);
    assert_eq!(errno(path("/file/", 0)), Errno::ENOTDIR);
    // Only search permission on the path: a mode-0 file and directory
    // open for another user, a name inside that directory does not.
    fs.set_permissions("/dir", 0)?;
    let a = alice(&fs);
    a.open_flags("/file", libc::O_PATH, 0)?;
    a.open_flags("/dir", libc::O_PATH, 0)?;
    assert_eq!(
        errno(a.open_flags("/dir/x", libc::O_PATH, 0)),
        Errno::EACCES
    );
    // An O_PATH handle keeps an unlinked file as any open does.
    fs.write("/gone", b"data")?;
    let g = path("/gone", 0)?;
    fs.remove_file("/gone")?;
    assert_eq!((g.metadata()?.nlink(), g.metadata()?.len()), (0, 4));
    Ok(())
}

#[test]
fn sparse_files_truncate_and_fallocate() -> io::Result<()> {
    let fs = fs();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/s")?;
    f.write_at(b"end", 1 << 20)?;
    assert_eq!(f.metadata()?.len(), (1 << 20) + 3);
    let mut buf = vec![1u8; 8192];
    assert_eq!(f.read_at(&mut buf, 4096)?, 8192);
    assert!(buf.iter().all(|&b| b == 0), "holes read as zeros");
    assert_eq!(
        f.metadata()?.blocks(),
        (PAGE_SIZE / 512) as u64,
        "one page allocated"
    );
    // Shrink cuts, grow adds zeros.
    f.set_len(2)?;
    f.set_len(10)?;
    let mut buf = [9u8; 16];
    assert_eq!(f.read_at(&mut buf, 0)?, 10);
    assert_eq!(&buf[..10], &[0u8; 10]);
    // Reads at or past EOF return 0.
    assert_eq!(f.read_at(&mut buf, 10)?, 0);
    assert_eq!(f.read_at(&mut buf, 1 << 40)?, 0);
    // fallocate: default grows, KEEP_SIZE does not, punch zeroes.
    f.fallocate(0, 0, 8192)?;
    assert_eq!(f.metadata()?.len(), 8192);
    f.fallocate(FALLOC_FL_KEEP_SIZE, 8192, 8192)?;
    assert_eq!(f.metadata()?.len(), 8192);
    f.write_at(&[7u8; 8192], 0)?;
    f.punch_hole(100, 5000)?;
    let mut buf = vec![0u8; 8192];
    f.read_at(&mut buf, 0)?;
    assert!(buf[..100].iter().all(|&b| b == 7));
    assert!(buf[100..5100].iter().all(|&b| b == 0));
    assert!(buf[5100..].iter().all(|&b| b == 7));
    assert_eq!(f.metadata()?.len(), 8192);
    // Linux's argument checks.
    assert_eq!(errno(f.fallocate(0, -1, 10)), Errno::EINVAL);
    assert_eq!(errno(f.fallocate(0, 0, 0)), Errno::EINVAL);
    assert_eq!(
        errno(f.fallocate(FALLOC_FL_PUNCH_HOLE, 0, 10)),
        Errno::EOPNOTSUPP
    );
    assert_eq!(errno(f.fallocate(0, i64::MAX - 10, 100)), Errno::EFBIG);
    Ok(())
}

#[test]
fn divergence_zero_range_is_supported() -> io::Result<()> {
    // tmpfs answers FALLOC_FL_ZERO_RANGE with EOPNOTSUPP; lanefs implements
    // it (docs/SEMANTICS.md).
    let fs = fs();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/z")?;
    f.write_at(&[5u8; 100], 0)?;
    f.fallocate(FALLOC_FL_ZERO_RANGE, 10, 20)?;
    let mut buf = [0u8; 100];
    f.read_at(&mut buf, 0)?;
    assert!(buf[..10].iter().all(|&b| b == 5));
    assert!(buf[10..30].iter().all(|&b| b == 0));
    assert!(buf[30..].iter().all(|&b| b == 5));
    f.fallocate(FALLOC_FL_ZERO_RANGE, 90, 100)?;
    assert_eq!(
        f.metadata()?.len(),
        190,
        "zero range without KEEP_SIZE grows the file"
    );
    Ok(())
}

#[test]
fn efbig_and_offset_limits() -> io::Result<()> {
    let fs = fs();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/big")?;
    // rw_verify_area: an end past i64::MAX is EINVAL.
    assert_eq!(errno(f.write_at(b"xy", i64::MAX as u64 - 1)), Errno::EINVAL);
    assert_eq!(
        errno(f.read_at(&mut [0u8; 2], i64::MAX as u64)),
        Errno::EINVAL
    );
    // The last byte of the largest file can be written.
    assert_eq!(f.write_at(b"z", i64::MAX as u64 - 1)?, 1);
    assert_eq!(f.metadata()?.len(), FILE_SIZE_MAX);
    assert_eq!(
        errno(fs.truncate("/big", i64::MAX as u64 + 1)),
        Errno::EINVAL
    );
    // At the core, past the limit is EFBIG.
    let core = fs.core();
    let h = core.open(&Cred::root(), f.ino(), libc::O_RDWR)?;
    assert_eq!(
        core.write(&h, FILE_SIZE_MAX, b"x").unwrap_err(),
        Errno::EFBIG
    );
    let grow = lanefs::SetAttr {
        size: Some(FILE_SIZE_MAX + 1),
        ..Default::default()
    };
    assert_eq!(
        core.setattr(&Cred::root(), f.ino(), &grow, None)
            .unwrap_err(),
        Errno::EFBIG
    );
    Ok(())
}

#[test]
fn unlinked_open_file_lives_until_close_then_space_is_freed() -> io::Result<()> {
    let fs = fs();
    let before = fs.statfs()?;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/tmp")?;
    f.write_at(&vec![3u8; 10 * PAGE_SIZE], 0)?;
    fs.remove_file("/tmp")?;
    assert_eq!(errno(fs.metadata("/tmp")), Errno::ENOENT);
    assert_eq!(f.metadata()?.nlink(), 0);
    // Still readable and writable through the open file.
    f.write_at(b"more", 10 * PAGE_SIZE as u64)?;
    let mut buf = vec![0u8; 4];
    f.read_at(&mut buf, 10 * PAGE_SIZE as u64)?;
    assert_eq!(buf, b"more");
    let during = fs.statfs()?;
    assert_eq!(before.blocks_free - during.blocks_free, 11);
    assert_eq!(before.files_free - during.files_free, 1);
    drop(f);
    let after = fs.statfs()?;
    assert_eq!(
        after.blocks_free, before.blocks_free,
        "space back at last close"
    );
    assert_eq!(after.files_free, before.files_free);
    fs.sync()?;
    fs.core().shrink();
    let store = fs.memory_store().expect("memory store");
    assert_eq!(store.page_records(), 0);
    assert_eq!(store.inode_records(), 1);
    fs.core().check().expect("consistent");
    Ok(())
}

#[test]
fn enospc_leaves_nothing_half_done() -> io::Result<()> {
    let store = MemoryStoreConfig {
        capacity_bytes: 16 * PAGE_SIZE as u64,
        max_inodes: 6,
    };
    let fs = Filesystem::in_memory(store, FsConfig::default())?;
    // Inodes: the root plus five.
    for i in 0..5 {
        fs.write(format!("/f{}", i), b"")?;
    }
    assert_eq!(errno(fs.write("/f5", b"")), Errno::ENOSPC);
    assert_eq!(errno(fs.create_dir("/d")), Errno::ENOSPC);
    assert_eq!(errno(fs.symlink("x", "/l")), Errno::ENOSPC);
    assert_eq!(
        errno(fs.mknod("/p", libc::S_IFIFO | 0o644, 0)),
        Errno::ENOSPC
    );
    assert_eq!(names(&fs, "/").len(), 5, "no entry left behind");
    assert_eq!(fs.metadata("/")?.len(), 2 * 20 + 5 * 20);
    assert_eq!(fs.statfs()?.files_free, 0);
    // Hard links need no inode.
    fs.hard_link("/f0", "/f0-link")?;
    // Blocks: 16 pages in all.
    let f = OpenOptions::new().read(true).write(true).open(&fs, "/f1")?;
    f.write_at(&vec![1u8; 16 * PAGE_SIZE], 0)?;
    assert_eq!(fs.statfs()?.blocks_free, 0);
    let r = f.write_at(b"x", 16 * PAGE_SIZE as u64);
    assert_eq!(errno(r), Errno::ENOSPC);
    assert_eq!(
        f.metadata()?.len(),
        16 * PAGE_SIZE as u64,
        "size unchanged by the failed write"
    );
    assert_eq!(errno(f.allocate(16 * PAGE_SIZE as u64, 1)), Errno::ENOSPC);
    assert_eq!(f.metadata()?.len(), 16 * PAGE_SIZE as u64);
    // Overwriting allocated space still works.
    f.write_at(b"y", 0)?;
    fs.core().check().expect("consistent at ENOSPC");
    // Freeing space makes room again.
    f.set_len(0)?;
    assert_eq!(fs.statfs()?.blocks_free, 16);
    fs.remove_file("/f2")?;
    fs.create_dir("/d")?;
    fs.core().check().expect("consistent after freeing");
    Ok(())
}

// ---- permissions -------------------------------------------------------

#[test]
fn sticky_directory_restricts_deletion() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/tmp")?;
    fs.set_permissions("/tmp", 0o1777)?;
    let (a, b) = (alice(&fs), bob(&fs));
    a.write("/tmp/alices", b"")?;
    b.write("/tmp/bobs", b"")?;
    assert_eq!(errno(b.remove_file("/tmp/alices")), Errno::EPERM);
    assert_eq!(errno(b.rename("/tmp/alices", "/tmp/stolen")), Errno::EPERM);
    assert_eq!(
        errno(b.rename("/tmp/bobs", "/tmp/alices")),
        Errno::EPERM,
        "replacing counts too"
    );
    a.remove_file("/tmp/alices")?;
    fs.remove_file("/tmp/bobs")?;
    // The directory's owner may delete anything in it.
    fs.chown("/tmp", Some(1000), None)?;
    b.write("/tmp/bobs", b"")?;
    a.remove_file("/tmp/bobs")?;
    Ok(())
}

#[test]
fn permission_checks_for_unprivileged_users() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/home")?;
    fs.create_dir("/home/alice")?;
    fs.chown("/home/alice", Some(1000), Some(1000))?;
    fs.set_permissions("/home/alice", 0o750)?;
    let (a, b) = (alice(&fs), bob(&fs));
    a.write("/home/alice/f", b"secret")?;
    a.set_permissions("/home/alice/f", 0o640)?;
    // Bob is in Alice's group: may read, not write; may list, not create.
    assert_eq!(b.read("/home/alice/f")?, b"secret");
    assert_eq!(errno(b.write("/home/alice/f", b"x")), Errno::EACCES);
    assert_eq!(errno(b.create_dir("/home/alice/x")), Errno::EACCES);
    assert_eq!(names(&b, "/home/alice"), ["f"]);
    let stranger = fs.with_cred(Cred::user(2000, 2000));
    assert_eq!(errno(stranger.metadata("/home/alice/f")), Errno::EACCES);
    assert_eq!(
        errno(stranger.access("/home/alice", libc::R_OK as u32)),
        Errno::EACCES
    );
    assert_eq!(
        errno(b.set_permissions("/home/alice/f", 0o777)),
        Errno::EPERM
    );
    assert_eq!(
        errno(a.chown("/home/alice/f", Some(1001), None)),
        Errno::EPERM
    );
    assert_eq!(
        errno(a.chown("/home/alice/f", None, Some(1001))),
        Errno::EPERM,
        "not her group"
    );
    assert_eq!(
        errno(a.mknod("/home/alice/dev", libc::S_IFCHR | 0o600, 0x0103)),
        Errno::EPERM
    );
    a.mknod("/home/alice/fifo", libc::S_IFIFO | 0o600, 0)?;
    b.access("/home/alice/f", lanefs::MAY_READ)?;
    assert_eq!(
        errno(b.access("/home/alice/f", lanefs::MAY_WRITE)),
        Errno::EACCES
    );
    // Root may do all of it, but not execute a file with no x bit.
    fs.access("/home/alice/f", lanefs::MAY_READ | lanefs::MAY_WRITE)?;
    assert_eq!(
        errno(fs.access("/home/alice/f", lanefs::MAY_EXEC)),
        Errno::EACCES
    );
    Ok(())
}

#[test]
fn protected_hardlinks() -> io::Result<()> {
    let fs = fs();
    fs.write("/rootfile", b"")?;
    fs.set_permissions("/rootfile", 0o600)?;
    fs.create_dir("/pub")?;
    fs.set_permissions("/pub", 0o777)?;
    let a = alice(&fs);
    assert_eq!(errno(a.hard_link("/rootfile", "/pub/mine")), Errno::EPERM);
    fs.set_permissions("/rootfile", 0o666)?;
    a.hard_link("/rootfile", "/pub/mine")?;
    Ok(())
}

#[test]
fn setgid_directory_inheritance() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/shared")?;
    fs.chown("/shared", None, Some(50))?;
    fs.set_permissions("/shared", 0o2777)?;
    let a = alice(&fs).with_umask(0);
    a.write("/shared/f", b"")?;
    a.create_dir("/shared/sub")?;
    let f = fs.metadata("/shared/f")?;
    assert_eq!((f.uid(), f.gid()), (1000, 50), "group from the directory");
    let d = fs.metadata("/shared/sub")?;
    assert_eq!(d.gid(), 50);
    assert_eq!(
        d.permissions() & 0o2000,
        0o2000,
        "subdirectories inherit setgid"
    );
    // A non-member cannot create a setgid file there: the bit is dropped.
    a.open_flags("/shared/g", libc::O_CREAT | libc::O_WRONLY, 0o2755)?;
    assert_eq!(fs.metadata("/shared/g")?.permissions(), 0o755);
    // chmod by a non-member drops setgid silently too.
    a.set_permissions("/shared/f", 0o2644)?;
    assert_eq!(fs.metadata("/shared/f")?.permissions(), 0o644);
    Ok(())
}

#[test]
fn suid_sgid_cleared_on_write_and_chown() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    fs.set_permissions("/d", 0o777)?;
    let a = alice(&fs);
    a.write("/d/prog", b"#!")?;
    a.set_permissions("/d/prog", 0o6777)?;
    assert_eq!(fs.metadata("/d/prog")?.permissions(), 0o6777);
    // A write by someone else (without CAP_FSETID) clears both.
    let b = bob(&fs);
    OpenOptions::new()
        .write(true)
        .open(&b, "/d/prog")?
        .write_at(b"x", 0)?;
    assert_eq!(fs.metadata("/d/prog")?.permissions(), 0o777);
    // A write by root keeps them.
    a.set_permissions("/d/prog", 0o6777)?;
    OpenOptions::new()
        .write(true)
        .open(&fs, "/d/prog")?
        .write_at(b"y", 0)?;
    assert_eq!(fs.metadata("/d/prog")?.permissions(), 0o6777);
    // chown by the owner to her own group clears them.
    a.chown("/d/prog", None, Some(1000))?;
    assert_eq!(fs.metadata("/d/prog")?.permissions(), 0o777);
    // chown by root clears them too (Linux since 2.2.13).
    a.set_permissions("/d/prog", 0o6755)?;
    fs.chown("/d/prog", Some(1001), None)?;
    assert_eq!(fs.metadata("/d/prog")?.permissions(), 0o755);
    // setgid without group execute is mandatory-locking: kept on chown.
    fs.set_permissions("/d/prog", 0o2745)?;
    fs.chown("/d/prog", Some(1000), None)?;
    assert_eq!(fs.metadata("/d/prog")?.permissions(), 0o2745);
    // Directories keep them.
    fs.create_dir("/d/sub")?;
    fs.set_permissions("/d/sub", 0o2775)?;
    fs.chown("/d/sub", Some(1000), Some(1000))?;
    assert_eq!(fs.metadata("/d/sub")?.permissions(), 0o2775);
    Ok(())
}

#[test]
fn chown_minus_one_leaves_the_ids() -> io::Result<()> {
    // chown(f, (uid_t)-1, (gid_t)-1) on tmpfs: the owner stays, ctime moves
    // and setuid goes (as for any chown of a non-directory). Until 2026-11
    // the path API made u32::MAX the file's owner and group.
    let fs = fs();
    fs.write("/f", b"x")?;
    fs.chown("/f", Some(1000), Some(1000))?;
    fs.set_permissions("/f", 0o4755)?;
    fs.chown("/f", Some(u32::MAX), Some(u32::MAX))?;
    let m = fs.metadata("/f")?;
    assert_eq!((m.uid(), m.gid(), m.permissions()), (1000, 1000, 0o755));
    fs.lchown("/f", Some(u32::MAX), Some(0))?;
    let m = fs.metadata("/f")?;
    assert_eq!((m.uid(), m.gid()), (1000, 0));
    Ok(())
}

#[test]
fn utime_now_and_omit_rules() -> io::Result<()> {
    let fs = fs();
    fs.write("/f", b"")?;
    fs.set_permissions("/f", 0o666)?;
    let b = bob(&fs);
    let t = |sec, nsec| TimeSet::At(Timespec { sec, nsec });
    // Both omitted: success without even looking at the path.
    fs.set_times("/does/not/exist", None, None)?;
    // Explicit times: owner (or root) only.
    assert_eq!(errno(b.set_times("/f", Some(t(1, 0)), None)), Errno::EPERM);
    // A mix of NOW and OMIT counts as explicit.
    assert_eq!(
        errno(b.set_times("/f", Some(TimeSet::Now), None)),
        Errno::EPERM
    );
    // Both NOW: write permission is enough.
    b.set_times("/f", Some(TimeSet::Now), Some(TimeSet::Now))?;
    fs.set_permissions("/f", 0o644)?;
    assert_eq!(
        errno(b.set_times("/f", Some(TimeSet::Now), Some(TimeSet::Now))),
        Errno::EACCES
    );
    // Nanoseconds are kept; OMIT leaves a time alone; ctime moves.
    let before = fs.metadata("/f")?;
    fs.set_times("/f", Some(t(1_000, 123_456_789)), None)?;
    let m = fs.metadata("/f")?;
    assert_eq!(
        m.atime(),
        Timespec {
            sec: 1_000,
            nsec: 123_456_789
        }
    );
    assert_eq!(m.mtime(), before.mtime());
    assert!(m.ctime() >= before.ctime());
    fs.set_times("/f", None, Some(t(-5, 1)))?;
    assert_eq!(fs.metadata("/f")?.mtime(), Timespec { sec: -5, nsec: 1 });
    assert_eq!(
        errno(fs.set_times("/f", Some(t(1, 1_000_000_000)), None)),
        Errno::EINVAL
    );
    Ok(())
}

// ---- directories -------------------------------------------------------

/// An engine handle of directory `path`, for listings by offset.
fn dir_handle(fs: &Filesystem, path: &str) -> io::Result<lanefs::OpenFile> {
    let dir = fs.metadata(path)?.ino();
    Ok(fs.core().open(&Cred::root(), dir, libc::O_RDONLY)?)
}

/// The next up to `n` names of `handle`'s listing from `*offset` (one
/// engine readdir call), advancing `*offset` past them.
fn next_names(
    fs: &Filesystem,
    handle: &lanefs::OpenFile,
    offset: &mut u64,
    n: usize,
) -> io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    fs.core().readdir(handle, *offset, &mut |e| {
        names.push(e.name.to_vec());
        *offset = e.next_offset;
        names.len() >= n
    })?;
    Ok(names)
}

#[test]
fn readdir_cookies_stable_under_concurrent_change() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    for i in 0..600 {
        fs.write(format!("/d/stable{}", i), b"")?;
        fs.write(format!("/d/churn{}", i), b"")?;
    }
    let handle = dir_handle(&fs, "/d")?;
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut offset = 0;
    let mut round = 0;
    loop {
        let batch = next_names(&fs, &handle, &mut offset, 50)?;
        if batch.is_empty() {
            break;
        }
        for name in batch {
            *seen.entry(name).or_default() += 1;
        }
        round += 1;
        if round > 20 {
            continue;
        }
        // Between batches: remove some churn entries, add new ones, rename.
        for k in 0..10 {
            let i = round * 10 + k;
            let _ = fs.remove_file(format!("/d/churn{}", i));
            fs.write(format!("/d/new{}-{}", round, k), b"")?;
        }
        let _ = fs.rename(
            format!("/d/churn{}", 599 - round),
            format!("/d/moved{}", round),
        );
    }
    assert_eq!(seen.get(b".".as_slice()), Some(&1));
    assert_eq!(seen.get(b"..".as_slice()), Some(&1));
    for i in 0..600 {
        let n = format!("stable{}", i).into_bytes();
        assert_eq!(
            seen.get(&n),
            Some(&1),
            "stable{} must be listed exactly once",
            i
        );
    }
    assert!(seen.values().all(|&c| c == 1), "no entry is listed twice");
    Ok(())
}

/// stress-ng's `dir` stressor: read a directory and rename every entry it
/// returns away and back. Each such entry gets a new cookie at the end of
/// its partition; without a bound taken at the start the listing met them
/// again and never ended. Now it ends, lists every name once, and a
/// listing from the start again (`rewinddir`) sees names made since.
#[test]
fn renaming_each_listed_entry_away_and_back_ends_the_listing() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    for i in 0..300 {
        fs.create_dir(format!("/d/n{i}"))?;
    }
    let handle = dir_handle(&fs, "/d")?;
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut offset = 0;
    let mut calls = 0;
    loop {
        let batch = next_names(&fs, &handle, &mut offset, 16)?;
        if batch.is_empty() {
            break;
        }
        calls += 1;
        assert!(calls < 1000, "the listing does not end");
        for name in batch {
            *seen.entry(name.clone()).or_default() += 1;
            if name.starts_with(b"n") {
                let old = format!("/d/{}", String::from_utf8_lossy(&name));
                fs.rename(&old, "/d/away")?;
                fs.rename("/d/away", &old)?;
            }
        }
    }
    for i in 0..300 {
        assert_eq!(seen.get(format!("n{i}").as_bytes()), Some(&1), "n{i}");
    }
    assert!(seen.values().all(|&c| c == 1), "no entry is listed twice");
    // A new listing from the start sees what was made since.
    fs.write("/d/late", b"")?;
    let from_start = next_names(&fs, &handle, &mut 0, usize::MAX)?;
    assert!(
        from_start.iter().any(|n| n == b"late"),
        "a listing from the start lists a name made since"
    );
    Ok(())
}

#[test]
fn directory_sizes_and_link_counts_follow_tmpfs() -> io::Result<()> {
    let fs = fs();
    assert_eq!(fs.metadata("/")?.len(), 40);
    fs.create_dir("/d")?;
    fs.write("/d/a", b"")?;
    fs.create_dir("/d/s")?;
    assert_eq!(fs.metadata("/d")?.len(), 80);
    assert_eq!(fs.metadata("/d")?.nlink(), 3);
    assert_eq!(fs.metadata("/")?.nlink(), 3);
    fs.remove_dir_all("/d")?;
    assert_eq!(fs.metadata("/")?.len(), 40);
    assert_eq!(fs.metadata("/")?.nlink(), 2);
    Ok(())
}

#[test]
fn create_dir_all_and_remove_dir_all() -> io::Result<()> {
    let fs = fs();
    fs.create_dir_all("/x/y/z")?;
    fs.create_dir_all("/x/y/z/")?;
    fs.write("/x/y/file", b"1")?;
    assert_eq!(errno(fs.create_dir_all("/x/y/file/sub")), Errno::ENOTDIR);
    assert_eq!(errno(fs.create_dir_all("/x/y/file")), Errno::EEXIST);
    fs.symlink("/x", "/lnk")?;
    fs.remove_dir_all("/lnk")?;
    assert!(
        fs.metadata("/x/y/z")?.is_dir(),
        "a symlink is removed, not followed"
    );
    fs.remove_dir_all("/x")?;
    assert_eq!(names(&fs, "/").len(), 0);
    assert_eq!(errno(fs.remove_dir_all("/x")), Errno::ENOENT);
    fs.core().check().expect("consistent");
    Ok(())
}

// ---- xattrs --------------------------------------------------------------

#[test]
fn xattr_flags_errors_and_limits() -> io::Result<()> {
    let fs = fs();
    fs.write("/f", b"")?;
    assert_eq!(errno(fs.get_xattr("/f", b"user.a")), Errno::ENODATA);
    assert_eq!(
        errno(fs.set_xattr("/f", b"user.a", b"1", XATTR_REPLACE)),
        Errno::ENODATA
    );
    fs.set_xattr("/f", b"user.a", b"1", XATTR_CREATE)?;
    assert_eq!(
        errno(fs.set_xattr("/f", b"user.a", b"2", XATTR_CREATE)),
        Errno::EEXIST
    );
    fs.set_xattr("/f", b"user.a", b"22", XATTR_REPLACE)?;
    assert_eq!(fs.get_xattr("/f", b"user.a")?, b"22");
    fs.set_xattr("/f", b"user.empty", b"", 0)?;
    assert_eq!(fs.get_xattr("/f", b"user.empty")?, b"");
    let mut list = fs.list_xattr("/f")?;
    list.sort();
    assert_eq!(list, [b"user.a".to_vec(), b"user.empty".to_vec()]);
    fs.remove_xattr("/f", b"user.a")?;
    assert_eq!(errno(fs.remove_xattr("/f", b"user.a")), Errno::ENODATA);
    // Limits: name 255 bytes, value 64 KiB.
    let mut long = b"user.".to_vec();
    long.resize(255, b'n');
    fs.set_xattr("/f", &long, b"v", 0)?;
    long.push(b'n');
    assert_eq!(errno(fs.set_xattr("/f", &long, b"v", 0)), Errno::ERANGE);
    assert_eq!(errno(fs.set_xattr("/f", b"", b"v", 0)), Errno::ERANGE);
    fs.set_xattr("/f", b"user.big", &vec![1u8; XATTR_SIZE_MAX], 0)?;
    assert_eq!(
        errno(fs.set_xattr("/f", b"user.big", &vec![1u8; XATTR_SIZE_MAX + 1], 0)),
        Errno::E2BIG
    );
    assert_eq!(errno(fs.set_xattr("/f", b"user.x", b"", 4)), Errno::EINVAL);
    // Total per inode: ENOSPC beyond XATTR_TOTAL_MAX.
    let mut total_err = None;
    for i in 0..8 {
        if let Err(e) = fs.set_xattr(
            "/f",
            format!("user.fill{}", i).as_bytes(),
            &vec![2u8; XATTR_SIZE_MAX],
            0,
        ) {
            total_err = Some(e.raw_os_error());
            break;
        }
    }
    assert_eq!(total_err, Some(Some(libc::ENOSPC)));
    // user.* only on regular files and directories; others: EPERM.
    fs.mknod("/fifo", libc::S_IFIFO | 0o666, 0)?;
    assert_eq!(
        errno(fs.set_xattr("/fifo", b"user.a", b"1", 0)),
        Errno::EPERM
    );
    assert_eq!(errno(fs.get_xattr("/fifo", b"user.a")), Errno::ENODATA);
    // Permission: write access needed to set.
    fs.set_permissions("/f", 0o644)?;
    assert_eq!(
        errno(bob(&fs).set_xattr("/f", b"user.b", b"1", 0)),
        Errno::EACCES
    );
    assert_eq!(bob(&fs).get_xattr("/f", b"user.empty")?, b"");
    Ok(())
}

// ---- misc --------------------------------------------------------------------

#[test]
fn mknod_kinds() -> io::Result<()> {
    let fs = fs();
    fs.mknod("/fifo", libc::S_IFIFO | 0o644, 0)?;
    fs.mknod("/sock", libc::S_IFSOCK | 0o644, 0)?;
    fs.mknod("/chr", libc::S_IFCHR | 0o644, libc::makedev(1, 3))?;
    fs.mknod("/blk", libc::S_IFBLK | 0o644, libc::makedev(7, 0))?;
    fs.mknod("/reg", 0o644, 0)?;
    let kinds: Vec<FileKind> = ["/fifo", "/sock", "/chr", "/blk", "/reg"]
        .iter()
        .map(|p| fs.metadata(p).map(|m| m.kind()))
        .collect::<io::Result<_>>()?;
    assert_eq!(
        kinds,
        [
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDevice,
            FileKind::BlockDevice,
            FileKind::Regular
        ]
    );
    assert_eq!(fs.metadata("/chr")?.rdev(), libc::makedev(1, 3));
    assert_eq!(
        errno(fs.mknod("/dir", libc::S_IFDIR | 0o755, 0)),
        Errno::EPERM
    );
    assert_eq!(errno(fs.mknod("/bad", 0o170000 | 0o755, 0)), Errno::EINVAL);
    // The kernel's device number is 32 bits (major < 4096, minor < 2^20):
    // glibc answers EINVAL for a larger one, whatever the type; the
    // largest one round-trips. Until 2026-11 lanefs stored any u64.
    let big = libc::makedev(5000, 1);
    assert_eq!(
        errno(fs.mknod("/big", libc::S_IFCHR | 0o644, big)),
        Errno::EINVAL
    );
    assert_eq!(
        errno(fs.mknod("/big", libc::S_IFIFO | 0o644, big)),
        Errno::EINVAL
    );
    assert_eq!(
        errno(fs.mknod("/chr", libc::S_IFCHR | 0o644, libc::makedev(1, 1 << 20))),
        Errno::EINVAL,
        "EINVAL before EEXIST"
    );
    let max = libc::makedev(4095, (1 << 20) - 1);
    assert_eq!(max, 0xffff_ffff);
    fs.mknod("/max", libc::S_IFBLK | 0o600, max)?;
    assert_eq!(fs.metadata("/max")?.rdev(), max);
    assert_eq!(
        errno(fs.mknod("/fifo", libc::S_IFIFO | 0o644, 0)),
        Errno::EEXIST
    );
    Ok(())
}

#[test]
fn statfs_counts_files_and_blocks() -> io::Result<()> {
    let fs = fs();
    let s0 = fs.statfs()?;
    assert_eq!(s0.files - s0.files_free, 1, "the root");
    fs.write("/f", vec![0u8; 3 * PAGE_SIZE])?;
    fs.create_dir("/d")?;
    let s1 = fs.statfs()?;
    assert_eq!(s1.files - s1.files_free, 3);
    assert_eq!(s0.blocks_free - s1.blocks_free, 3);
    assert_eq!(s1.name_max, 255);
    fs.remove_file("/f")?;
    fs.remove_dir("/d")?;
    assert_eq!(fs.statfs()?, s0);
    Ok(())
}

#[test]
fn file_read_write_seek() -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let fs = fs();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/rw")?;
    f.write_all(b"0123456789")?;
    assert_eq!(f.seek(SeekFrom::End(-3))?, 7);
    let mut b = [0u8; 3];
    f.read_exact(&mut b)?;
    assert_eq!(&b, b"789");
    assert_eq!(f.seek(SeekFrom::Current(-10))?, 0);
    assert_eq!(errno(f.seek(SeekFrom::Current(-1))), Errno::EINVAL);
    f.seek(SeekFrom::Start(20))?;
    f.write_all(b"x")?;
    assert_eq!(f.metadata()?.len(), 21);
    f.sync_all()?;
    f.sync_data()?;
    assert_eq!(fs.read("/rw")?[10..20], [0u8; 10]);
    Ok(())
}

// ---- accepted divergences (docs/SEMANTICS.md) ------------------------------

#[test]
fn divergence_write_at_enospc_is_all_or_nothing() -> io::Result<()> {
    // tmpfs writes what fits and returns a short count; lanefs reserves the
    // whole write first and fails it with nothing written.
    let store = MemoryStoreConfig {
        capacity_bytes: 16 * PAGE_SIZE as u64,
        max_inodes: 8,
    };
    let fs = Filesystem::in_memory(store, FsConfig::default())?;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/f")?;
    assert_eq!(
        errno(f.write_at(&vec![1u8; 20 * PAGE_SIZE], 0)),
        Errno::ENOSPC
    );
    assert_eq!(f.metadata()?.len(), 0);
    assert_eq!(fs.statfs()?.blocks_free, 16);
    assert_eq!(f.write_at(&vec![1u8; 16 * PAGE_SIZE], 0)?, 16 * PAGE_SIZE);
    Ok(())
}

#[test]
fn divergence_opening_a_fifo_is_enxio() -> io::Result<()> {
    // The kernel opens a fifo (blocking until the other end opens); lanefs
    // has no pipe behind the node and answers ENXIO, as for a socket.
    let fs = fs();
    fs.mknod("/fifo", libc::S_IFIFO | 0o644, 0)?;
    fs.mknod("/sock", libc::S_IFSOCK | 0o644, 0)?;
    assert_eq!(errno(fs.open("/fifo")), Errno::ENXIO);
    assert_eq!(errno(fs.open("/sock")), Errno::ENXIO);
    Ok(())
}

#[test]
fn divergence_atime_is_relatime_without_the_daily_refresh() -> io::Result<()> {
    // Like a relatime mount: a read moves atime only when it is not newer
    // than mtime or ctime. Linux's relatime also refreshes an atime older
    // than a day; lanefs does not.
    let fs = fs();
    fs.write("/f", b"data")?;
    let t0 = fs.metadata("/f")?.atime();
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.read("/f")?;
    let t1 = fs.metadata("/f")?.atime();
    assert!(t1 > t0, "first read after a write moves atime");
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.read("/f")?;
    assert_eq!(fs.metadata("/f")?.atime(), t1, "a second read does not");
    // An atime in the future (set explicitly) is left alone by reads.
    let future = Timespec {
        sec: t1.sec + 3600,
        nsec: 0,
    };
    fs.set_times("/f", Some(TimeSet::At(future)), None)?;
    fs.read("/f")?;
    assert_eq!(fs.metadata("/f")?.atime(), future);
    Ok(())
}

#[test]
fn readlink_moves_a_symlinks_atime_as_relatime() -> io::Result<()> {
    // Linux's readlinkat (and a path walk following the link) calls
    // touch_atime: on a relatime mount a link's atime moves while it is
    // not newer than its mtime or ctime; lanefs left it alone (found by
    // comparing a mount with tmpfs).
    let fs = fs();
    fs.write("/f", b"data")?;
    fs.symlink("f", "/l")?;
    let old = Timespec { sec: 1000, nsec: 0 };
    fs.set_symlink_times("/l", Some(TimeSet::At(old)), None)?;
    fs.read_link("/l")?;
    let t1 = fs.symlink_metadata("/l")?.atime();
    assert!(t1 > old, "a readlink moves an atime older than ctime");
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.read_link("/l")?;
    assert_eq!(
        fs.symlink_metadata("/l")?.atime(),
        t1,
        "a second one does not"
    );
    // An atime in the future is left alone.
    let future = Timespec {
        sec: t1.sec + 3600,
        nsec: 0,
    };
    fs.set_symlink_times("/l", Some(TimeSet::At(future)), None)?;
    fs.read("/l")?;
    assert_eq!(fs.symlink_metadata("/l")?.atime(), future);
    Ok(())
}

#[test]
fn o_creat_on_a_foreign_symlink_in_a_sticky_dir_is_eacces() -> io::Result<()> {
    // Linux's may_create_in_sticky (independent of the protected_* sysctls
    // for symlinks, sockets and devices); found by the differential test.
    let fs = fs();
    fs.create_dir("/tmp")?;
    fs.set_permissions("/tmp", 0o1777)?;
    alice(&fs).symlink("target", "/tmp/link")?;
    let open = |v: &Filesystem| {
        v.open_flags(
            "/tmp/link",
            libc::O_CREAT | libc::O_NOFOLLOW | libc::O_WRONLY,
            0o644,
        )
    };
    assert_eq!(errno(open(&bob(&fs))), Errno::EACCES);
    assert_eq!(errno(open(&fs)), Errno::EACCES, "root too");
    assert_eq!(
        errno(open(&alice(&fs))),
        Errno::ELOOP,
        "the link's owner gets ELOOP"
    );
    fs.set_permissions("/tmp", 0o777)?;
    assert_eq!(errno(open(&bob(&fs))), Errno::ELOOP, "not sticky: ELOOP");
    Ok(())
}

/// File capabilities through the path API, as on tmpfs: a write of data
/// (by root too), truncate and chown — also `chown(f, -1, -1)` by a user
/// who does not own the file — remove `security.capability`; a zero-length
/// write and chmod keep it.
#[test]
fn file_capabilities_go_on_write_truncate_and_chown() -> io::Result<()> {
    const CAPS: &[u8] = b"security.capability";
    let blob: Vec<u8> = [0x0200_0001u32, 1 << 10, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let fs = fs();
    let capable = |p: &str| -> io::Result<()> {
        fs.write(p, [7u8; 20])?;
        fs.set_permissions(p, 0o777)?;
        fs.set_xattr(p, CAPS, &blob, 0)?;
        assert_eq!(fs.get_xattr(p, CAPS)?, blob);
        Ok(())
    };
    let gone = |p: &str| match fs.get_xattr(p, CAPS) {
        Ok(v) => {
            assert_eq!(v, blob, "{p}: the value is intact while present");
            false
        }
        Err(_) => errno(fs.get_xattr(p, CAPS)) == Errno::ENODATA,
    };

    capable("/w")?;
    let mut f = fs.open_with("/w", OpenOptions::new().write(true))?;
    assert_eq!(f.write(b"")?, 0);
    assert!(!gone("/w"), "a zero-length write keeps it");
    f.write_all(b"x")?;
    assert!(gone("/w"), "root's write removes it");
    drop(f);

    capable("/t")?;
    fs.truncate("/t", 20)?;
    assert!(gone("/t"), "truncate to the same size removes it");

    capable("/c")?;
    fs.set_permissions("/c", 0o755)?;
    assert!(!gone("/c"), "chmod keeps it");
    alice(&fs).chown("/c", None, None)?;
    assert!(gone("/c"), "anyone's chown(f, -1, -1) removes it");

    capable("/g")?;
    fs.chown("/g", None, Some(1000))?;
    assert!(gone("/g"), "chgrp removes it");
    Ok(())
}

/// `open(dir, O_TMPFILE)` through the path API: an unnamed file, listed
/// nowhere, freed at its last close; `link_file` names it unless it was
/// opened `O_EXCL`; read-only is `EINVAL`, a non-directory `ENOTDIR`.
#[test]
fn o_tmpfile_is_unnamed_until_linked_and_freed_at_close() -> io::Result<()> {
    let fs = fs();
    fs.create_dir("/d")?;
    fs.write("/d/plain", b"x")?;
    let free = fs.statfs()?.files_free;
    let rw = libc::O_TMPFILE | libc::O_RDWR;
    let mut f = fs.open_flags("/d", rw, 0o640)?;
    f.write_all(b"scratch")?;
    fs.open_flags("/d", rw, 0o600)
        .map(drop)
        .expect("a second one");
    assert_eq!(names(&fs, "/d"), ["plain"], "listed nowhere");
    assert_eq!(fs.statfs()?.files_free, free - 1, "in use while open");
    let mut buf = [0u8; 16];
    let n = f.read_at(&mut buf, 0)?;
    assert_eq!(&buf[..n], b"scratch");
    drop(f);
    assert_eq!(fs.statfs()?.files_free, free, "freed at the last close");

    let mut named = fs.open_flags("/d", rw, 0o640)?;
    named.write_all(b"kept")?;
    fs.link_file(&named, "/d/kept")?;
    drop(named);
    assert_eq!(fs.read("/d/kept")?, b"kept");
    let meta = fs.metadata("/d/kept")?;
    assert_eq!(meta.nlink(), 1);
    assert_eq!(meta.mode() & 0o7777, 0o640 & !0o022);

    let excl = fs.open_flags("/d", rw | libc::O_EXCL, 0o600)?;
    assert_eq!(errno(fs.link_file(&excl, "/d/never")), Errno::ENOENT);
    drop(excl);
    assert_eq!(
        errno(fs.open_flags("/d", libc::O_TMPFILE | libc::O_RDONLY, 0o600)),
        Errno::EINVAL
    );
    assert_eq!(errno(fs.open_flags("/d/plain", rw, 0o600)), Errno::ENOTDIR);
    assert_eq!(names(&fs, "/d"), ["kept", "plain"]);
    Ok(())
}
