//! Directories against std's: `create_dir_all` (racing, and recursive
//! with a mode), `remove_dir_all` (beside another remover, and of trees
//! deeper than a path can name), and `read_dir` (also while the directory
//! changes).
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use lanefs::Filesystem;

mod common;
use common::parity::{build, pair};

#[test]
fn create_dir_all_and_remove_dir_all() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/keep/inner", "/victim/sub/deeper", "/a"],
        &[
            ("/keep/precious", b"do not remove"),
            ("/keep/inner/also", b"also precious"),
            ("/victim/file", b"x"),
            ("/victim/sub/deeper/f", b"y"),
            ("/a/file", b"z"),
        ],
        &[
            ("../keep", "/victim/to_keep_dir"),
            ("../keep/precious", "/victim/sub/to_keep_file"),
            ("nowhere", "/victim/dangling"),
            ("keep", "/link_to_keep"),
        ],
    );
    for path in [
        "/a/file/b/c",
        "/a/file",
        "/a/file/",
        "/a/new/deeper/",
        "/a//new2///x",
        "/link_to_keep/made_through_link",
        "/victim/dangling/x",
        "/a/../a/./x",
        "/",
        "",
    ] {
        let l = p.fs.create_dir_all(path);
        let r = std::fs::create_dir_all(if path.is_empty() {
            PathBuf::new()
        } else {
            p.k(path)
        });
        p.same(&format!("create_dir_all {path:?}"), &l, &r);
    }
    p.trees("after create_dir_all");
    for path in [
        "/link_to_keep",
        "/a/file",
        "/nothing",
        "/victim/sub/to_keep_file",
        "/victim",
    ] {
        let l = p.fs.remove_dir_all(path);
        let r = std::fs::remove_dir_all(p.k(path));
        p.same(&format!("remove_dir_all {path}"), &l, &r);
        p.trees(&format!("after remove_dir_all {path}"));
    }
    p.finish();
}

#[test]
fn read_dir_entries() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d/sub"],
        &[("/d/file", b"1")],
        &[
            ("file", "/d/lfile"),
            ("sub", "/d/lsub"),
            ("gone", "/d/ldangling"),
            ("d", "/ld"),
        ],
    );
    let name_bytes = OsStr::from_bytes(b"/d/caf\xe9\xff");
    p.write_both(name_bytes, b"latin1");
    for dir in ["/d", "/ld", "/ld/", "/d/file", "/missing", "/d/ldangling"] {
        let l = p.fs.read_dir(dir).and_then(|rd| {
            let mut v = rd
                .map(|e| {
                    e.map(|e| {
                        let m = p.fs.symlink_metadata(Path::new(dir).join(e.file_name()));
                        (
                            e.file_name(),
                            format!("{:?}", e.kind()),
                            e.ino() == m.as_ref().map(|m| m.ino()).unwrap_or(0),
                            e.path(),
                        )
                    })
                })
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        let r = std::fs::read_dir(p.k(dir)).and_then(|rd| {
            let mut v = rd
                .map(|e| {
                    let e = e?;
                    let t = e.file_type()?;
                    let kind = if t.is_symlink() {
                        "Symlink"
                    } else if t.is_dir() {
                        "Directory"
                    } else {
                        "Regular"
                    };
                    let ino = std::os::unix::fs::DirEntryExt::ino(&e);
                    let path = Path::new("/").join(e.path().strip_prefix(&p.root).unwrap());
                    Ok((
                        e.file_name(),
                        kind.to_string(),
                        ino == e.metadata()?.ino(),
                        path,
                    ))
                })
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        p.same(&format!("read_dir {dir}"), &l, &r);
    }
    // A listing of a directory removed after it was opened.
    p.create_dir_both("/dying");
    let lrd = p.fs.read_dir("/dying").unwrap();
    let srd = std::fs::read_dir(p.k("/dying")).unwrap();
    p.fs.remove_dir("/dying").unwrap();
    std::fs::remove_dir(p.k("/dying")).unwrap();
    let l = lrd
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>();
    let r = srd
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>();
    p.same("read_dir of a removed directory", &l, &r);
    p.finish();
}

/// A tree deeper than any path can name (built by renames), removed and
/// canonicalized without exhausting the stack.
#[test]
fn deep_trees() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/deep").unwrap();
    let depth = 3000;
    for _ in 0..depth {
        fs.create_dir("/t").unwrap();
        fs.rename("/deep", "/t/deep").unwrap();
        fs.rename("/t", "/deep").unwrap();
    }
    // 851 levels named through a symlink: the path given fits PATH_MAX,
    // the answer (4255 bytes) not: realpath says ENAMETOOLONG.
    fs.symlink(format!("/deep{}", "/deep".repeat(400)), "/half")
        .unwrap();
    let err = fs
        .canonicalize(format!("/half{}", "/deep".repeat(450)))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    let shallow = format!("/deep{}", "/deep".repeat(100));
    assert_eq!(fs.canonicalize(&shallow).unwrap(), Path::new(&shallow));
    let r = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            fs.remove_dir_all("/deep")?;
            fs.core()
                .check()
                .map_err(|p| io::Error::other(p.join("; ")))?;
            let left = fs.read_dir("/")?.map(|e| e.map(|e| e.file_name()));
            left.collect::<io::Result<Vec<_>>>()
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(r.unwrap(), ["half"]);
}

/// `remove_dir_all` beside another thread removing entries of the same
/// tree: entries that vanish are no error (std ignores `ENOENT` below the
/// top), and the tree is gone after.
#[test]
fn remove_dir_all_beside_another_remover() {
    for round in 0..6 {
        let fs = Filesystem::new_in_memory().unwrap();
        let (dirs, files) = (40, 60);
        for d in 0..dirs {
            fs.create_dir_all(format!("/tree/d{d}/sub")).unwrap();
            for f in 0..files {
                fs.write(format!("/tree/d{d}/f{f}"), b"x").unwrap();
            }
        }
        let other = fs.clone();
        let remover = std::thread::spawn(move || {
            for d in (0..dirs).rev() {
                let _ = other.remove_dir_all(format!("/tree/d{d}/sub"));
                for f in 0..files {
                    let _ = other.remove_file(format!("/tree/d{d}/f{f}"));
                }
            }
        });
        let r = fs.remove_dir_all("/tree");
        remover.join().unwrap();
        assert!(r.is_ok(), "round {round}: {r:?}");
        assert!(!fs.try_exists("/tree").unwrap());
        fs.core().check().unwrap();
    }
}

/// The usual std loop: remove (or rename) each entry while the listing
/// goes on. Every entry there before is seen exactly once (no removal
/// finds its name gone), and the directory ends as the loop left it.
#[test]
fn changing_a_directory_while_listing_it() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/d").unwrap();
    let n = 1000;
    for i in 0..n {
        fs.write(format!("/d/f{i}"), b"x").unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    for (k, e) in fs.read_dir("/d").unwrap().enumerate() {
        let e = e.unwrap();
        assert!(
            seen.insert(e.file_name()),
            "{:?} listed twice",
            e.file_name()
        );
        fs.remove_file(e.path()).unwrap();
        // New names while listing: may be listed or not (POSIX), but
        // must not disturb the rest.
        if k % 3 == 0 {
            fs.write(format!("/d/new{k}"), b"y").unwrap();
        }
    }
    for i in 0..n {
        assert!(
            seen.contains(std::ffi::OsStr::new(&format!("f{i}"))),
            "f{i} never listed"
        );
    }
    let left: Vec<_> = fs
        .read_dir("/d")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(left.iter().all(|n| n.starts_with("new")), "{left:?}");
    // Renaming each entry within the directory while listing.
    fs.remove_dir_all("/d").unwrap();
    fs.create_dir("/d").unwrap();
    for i in 0..n {
        fs.write(format!("/d/a{i}"), b"x").unwrap();
    }
    let mut renamed = 0;
    for e in fs.read_dir("/d").unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(i) = name.strip_prefix('a') {
            fs.rename(format!("/d/{name}"), format!("/d/b{i}")).unwrap();
            renamed += 1;
        }
    }
    assert_eq!(renamed, n, "each old name listed exactly once");
}

/// Threads creating overlapping trees at once all succeed (std's
/// `create_dir_all` takes an `EEXIST` on a directory for success).
#[test]
fn racing_create_dir_all() {
    for _ in 0..20 {
        let fs = Filesystem::new_in_memory().unwrap();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || fs.create_dir_all(format!("/r/s/t/u/v/w{}", t % 2)))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        assert!(fs.metadata("/r/s/t/u/v/w1").unwrap().is_dir());
    }
}

#[test]
fn recursive_dir_builder_modes() {
    use std::os::unix::fs::DirBuilderExt;
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/exists"], &[("/file", b"")], &[]);
    for (path, mode) in [
        ("/a/b/c", 0o750u32),
        ("/exists/x/y", 0o700),
        ("/exists", 0o700),
        ("/file/x", 0o755),
        ("/s/t", 0o1777),
    ] {
        let l = p.fs.create_dir_all_mode(path, mode);
        let r = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(p.k(path));
        p.same(&format!("DirBuilder {path} {mode:o}"), &l, &r);
    }
    p.trees("after the recursive builders");
    p.finish();
}
