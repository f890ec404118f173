//! Names against std's: links, renames and `read_link`, odd inputs (NUL
//! bytes, empty and overlong paths), `canonicalize` as `realpath`, each
//! name call by file type and trailing slash, and `..` after symlinks.
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

mod common;
use common::parity::{build, pair, unit, Pair};

#[test]
fn links_renames_and_read_link() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d1/sub", "/d2", "/full/x", "/empty"],
        &[("/f", b"f"), ("/g", b"g"), ("/d1/in", b"in")],
        &[("f", "/lf"), ("nowhere", "/dangling"), ("d1", "/ld1")],
    );
    let hard = [
        ("/f", "/hf"),
        ("/lf", "/hlf"),
        ("/dangling", "/hdangling"),
        ("/d1", "/hd1"),
        ("/f", "/g"),
        ("/missing", "/x"),
        ("/f", "/missing_dir/x"),
        ("/f", "/hf2/"),
        ("/ld1/", "/hd"),
    ];
    for (from, to) in hard {
        let l = p.fs.hard_link(from, to);
        let r = std::fs::hard_link(p.k(from), p.k(to));
        p.same(&format!("hard_link {from} {to}"), &l, &r);
    }
    for name in ["/f", "/hf", "/lf"] {
        let l = p.fs.symlink_metadata(name).map(|m| m.nlink());
        let r = std::fs::symlink_metadata(p.k(name)).map(|m| m.nlink() as u32);
        p.same(&format!("nlink {name}"), &l, &r);
    }
    for name in [
        "/lf",
        "/dangling",
        "/f",
        "/lf/",
        "/ld1/",
        "/missing",
        "/ld1",
    ] {
        let l = p.fs.read_link(name);
        let r = std::fs::read_link(p.k(name));
        p.same(&format!("read_link {name}"), &l, &r);
    }
    let renames = [
        ("/f", "/hf"), // same inode: nothing happens
        ("/g", "/d2"),
        ("/d2", "/g"),
        ("/d1", "/full"),
        ("/d1", "/d1/sub/x"),
        ("/d1", "/empty"),
        ("/empty", "/moved"),
        ("/missing", "/x"),
        ("/g", "/g2/"),
        ("/moved/", "/moved2/"),
        ("/lf", "/lf2"),
        ("/g", "/full/.."),
        ("/hf", "/full/x/hf"),
        ("/moved", "/ld1"),
        ("/ld1", "/moved"),
        ("/full/x/hf", "/dangling"),
        ("/dangling", "/dangling"),
        ("/moved", "/moved/"),
        ("/moved", "/d1/sub/../.."),
        ("/lf2", "/moved/lf3"),
    ];
    for (from, to) in renames {
        let l = p.fs.rename(from, to);
        let r = std::fs::rename(p.k(from), p.k(to));
        p.same(&format!("rename {from} {to}"), &l, &r);
        p.trees(&format!("after rename {from} {to}"));
    }
    p.finish();
}

#[test]
fn odd_inputs() {
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/d"], &[("/f", b"f")], &[]);
    let long_name = "n".repeat(256);
    let ok_name = "n".repeat(255);
    let long_path = format!("/{}", "d/".repeat(2100));
    let nul: &OsStr = OsStr::from_bytes(b"/a\0b");
    let paths: Vec<PathBuf> = vec![
        PathBuf::from(format!("/{long_name}")),
        PathBuf::from(format!("/{ok_name}")),
        PathBuf::from(&long_path),
        PathBuf::from(OsStr::from_bytes(b"/\xff\xfe")),
        PathBuf::from("/d/./../d//"),
    ];
    for path in &paths {
        let l = p.fs.write(path, b"x");
        let r = std::fs::write(p.k(path), b"x");
        p.same(&format!("write {}", path.display()), &l, &r);
        let l = p.fs.create_dir(path);
        let r = std::fs::create_dir(p.k(path));
        p.same(&format!("create_dir {}", path.display()), &l, &r);
        let l = p.fs.metadata(path).map(|m| m.len());
        let r = std::fs::metadata(p.k(path)).map(|m| m.len());
        p.same(&format!("metadata {}", path.display()), &l, &r);
    }
    // The root prefix of the std side makes a 4096-byte path there a
    // longer one; the limit itself is covered in posix_edge_cases.rs.
    let nul_long = {
        let mut v = b"/".to_vec();
        v.extend(vec![b'a'; 5000]);
        v.push(0);
        PathBuf::from(OsStr::from_bytes(&v))
    };
    for path in [Path::new(nul), nul_long.as_path()] {
        let what = |op: &str| format!("{op} {:?}", path.as_os_str().len());
        let l = p.fs.write(path, b"x");
        let r = std::fs::write(p.k(path), b"x");
        p.same(&what("write"), &l, &r);
        let l = unit(p.fs.open(path));
        let r = unit(std::fs::File::open(p.k(path)));
        p.same(&what("open"), &l, &r);
        let l = p.fs.create_dir_all(path);
        let r = std::fs::create_dir_all(p.k(path));
        p.same(&what("create_dir_all"), &l, &r);
        let l = p.fs.symlink(path, "/s");
        let r = std::os::unix::fs::symlink(path, p.k("/s"));
        p.same(&what("symlink target"), &l, &r);
        let l = p.fs.rename("/f", path);
        let r = std::fs::rename(p.k("/f"), p.k(path));
        p.same(&what("rename to"), &l, &r);
        let l = p.fs.remove_dir_all(path);
        let r = std::fs::remove_dir_all(p.k(path));
        p.same(&what("remove_dir_all"), &l, &r);
    }
    for path in ["/f", "/f/", "/f/x", "/nope", "/d/../f", &long_path] {
        let l = p.fs.exists(path);
        let r = std::fs::metadata(p.k(path)).map(|_| true).or_else(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Ok(false)
            } else {
                Err(e)
            }
        });
        p.same(&format!("exists {path}"), &l, &r);
    }
    // A name too long in the middle of a path, in each call.
    let mid = format!("/d/{long_name}/x");
    let l = p.fs.create_dir_all(&mid);
    let r = std::fs::create_dir_all(p.k(&mid));
    p.same("create_dir_all with a long name inside", &l, &r);
    let l = p.fs.canonicalize(&mid);
    let r = std::fs::canonicalize(p.k(&mid)).map(|_| PathBuf::new());
    p.same("canonicalize with a long name inside", &l, &r);
    let l = p.fs.remove_dir_all(&mid);
    let r = std::fs::remove_dir_all(p.k(&mid));
    p.same("remove_dir_all with a long name inside", &l, &r);
    let l = p.fs.copy("/f", &mid);
    let r = std::fs::copy(p.k("/f"), p.k(&mid));
    p.same("copy to a long name inside", &l, &r);
    let l = p.fs.read_link(&mid);
    let r = std::fs::read_link(p.k(&mid));
    p.same("read_link with a long name inside", &l, &r);
    // Empty paths (std's are relative to the current directory, so only
    // the error cases compare).
    let l = unit(p.fs.open(""));
    let r = unit(std::fs::File::open(""));
    p.same("open empty", &l, &r);
    let l = unit(p.fs.metadata(""));
    let r = unit(std::fs::metadata(""));
    p.same("metadata empty", &l, &r);
    let l = p.fs.remove_file("");
    let r = std::fs::remove_file("");
    p.same("remove_file empty", &l, &r);
    let l = p.fs.symlink("", "/s");
    let r = std::os::unix::fs::symlink("", p.k("/s"));
    p.same("symlink to empty", &l, &r);
    // Invalid UTF-8 content.
    p.write_both("/bin", b"\xff\xfe");
    let l = p.fs.read_to_string("/bin");
    let r = std::fs::read_to_string(p.k("/bin"));
    p.same("read_to_string of invalid UTF-8", &l, &r);
    p.trees("after odd inputs");
    p.finish();
}

#[test]
fn canonicalize_as_realpath() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d/sub/deep", "/a/b/c"],
        &[("/f", b"f"), ("/d/sub/file", b"x")],
        &[
            ("d", "/ld"),
            ("f", "/lf"),
            ("sub/deep", "/d/ldeep"),
            ("../..", "/a/b/c/up2"),
            ("../d/sub/", "/a/lslash"),
            ("nowhere", "/dangling"),
            ("loop2", "/loop1"),
            ("loop1", "/loop2"),
            ("lf", "/chain0"),
        ],
    );
    for i in 1..=41 {
        let (t, l) = (format!("chain{}", i - 1), format!("/chain{i}"));
        p.symlink_both(&t, &l);
    }
    let cases = [
        "/",
        "//",
        "/.",
        "/d",
        "/d/",
        "/d/.",
        "/d/..",
        "/d/../d/sub",
        "/./d//sub/./",
        "/f",
        "/f/",
        "/f/.",
        "/f/..",
        "/f/./x",
        "/f/x",
        "/f//",
        "/missing",
        "/missing/..",
        "/ld",
        "/ld/",
        "/ld/..",
        "/ld/../f",
        "/ld/sub/../..",
        "/lf",
        "/lf/",
        "/lf/.",
        "/lf/..",
        "/d/ldeep/..",
        "/d/ldeep/../file",
        "/a/b/c/up2",
        "/a/b/c/up2/b/c/up2/..",
        "/a/lslash",
        "/a/lslash/file",
        "/a/lslash/file/",
        "/dangling",
        "/dangling/..",
        "/loop1",
        "/loop1/x",
        "/chain38",
        "/chain39",
        "/chain40",
        "/chain41",
        "d/sub",
        "/d/sub/file/..",
    ];
    for path in cases {
        let l = p.fs.canonicalize(path);
        let r = std::fs::canonicalize(p.k(path)).map(|c| {
            let rel = c.strip_prefix(&p.root).expect("inside the case root");
            Path::new("/").join(rel)
        });
        p.same(&format!("canonicalize {path}"), &l, &r);
    }
    // Absolute targets (lanefs only: on the tmpfs they would leave the
    // case directory): the resolution restarts at the root.
    p.fs.symlink("/d/sub", "/abs").unwrap();
    p.fs.symlink("/abs/../ldeep", "/d/sub/deep/abs2").unwrap();
    assert_eq!(
        p.fs.canonicalize("/abs/deep/abs2").unwrap(),
        Path::new("/d/sub/deep")
    );
    let nul = p.fs.canonicalize(OsStr::from_bytes(b"/d\0")).unwrap_err();
    let snul = std::fs::canonicalize(OsStr::from_bytes(b"/d\0")).unwrap_err();
    assert_eq!(nul.kind(), snul.kind());
    p.finish();
}

#[test]
fn name_operations_by_type_and_slashes() {
    let Some(mut p) = pair() else { return };
    let setup = |p: &mut Pair| {
        build(
            p,
            &["/d/sub", "/e", "/t/inner"],
            &[("/f", b"f"), ("/d/x", b"x"), ("/t/inner/y", b"y")],
            &[
                ("f", "/lf"),
                ("d", "/ld"),
                ("e", "/le"),
                ("nowhere", "/dangling"),
                ("t", "/lt"),
            ],
        );
    };
    setup(&mut p);
    let paths = [
        "/f",
        "/f/",
        "/d",
        "/d/",
        "/e",
        "/e/",
        "/e/.",
        "/e/..",
        "/lf",
        "/lf/",
        "/ld",
        "/ld/",
        "/le",
        "/le/",
        "/dangling",
        "/dangling/",
        "/missing",
        "/missing/",
        "/f/x",
    ];
    for path in paths {
        let l = p.fs.remove_file(path);
        let r = std::fs::remove_file(p.k(path));
        p.same(&format!("remove_file {path}"), &l, &r);
        let l = p.fs.remove_dir(path);
        let r = std::fs::remove_dir(p.k(path));
        p.same(&format!("remove_dir {path}"), &l, &r);
        let l = p.fs.create_dir(path);
        let r = std::fs::create_dir(p.k(path));
        p.same(&format!("create_dir {path}"), &l, &r);
        let l = p.fs.symlink("target", path);
        let r = std::os::unix::fs::symlink("target", p.k(path));
        p.same(&format!("symlink to {path}"), &l, &r);
        let l = p.fs.hard_link("/f", path);
        let r = std::fs::hard_link(p.k("/f"), p.k(path));
        p.same(&format!("hard_link to {path}"), &l, &r);
        p.trees(&format!("after the calls on {path}"));
        for side in [true, false] {
            if side {
                let _ = p.fs.remove_dir_all("/");
                for e in p.fs.read_dir("/").unwrap() {
                    let name = Path::new("/").join(e.unwrap().file_name());
                    p.fs.remove_dir_all(&name)
                        .or_else(|_| p.fs.remove_file(&name))
                        .unwrap();
                }
            } else {
                for e in std::fs::read_dir(&p.root).unwrap() {
                    let name = e.unwrap().path();
                    std::fs::remove_dir_all(&name)
                        .or_else(|_| std::fs::remove_file(&name))
                        .unwrap();
                }
            }
        }
        setup(&mut p);
    }
    for path in ["/lt/", "/d/.", "/d/..", "/lt/.", "/t/inner/.."] {
        let l = p.fs.remove_dir_all(path);
        let r = std::fs::remove_dir_all(p.k(path));
        p.same(&format!("remove_dir_all {path}"), &l, &r);
        p.trees(&format!("after remove_dir_all {path}"));
    }
    p.finish();
}

/// `..` after a symlink is the parent of the link's target (physical
/// resolution), in every call that takes a path.
#[test]
fn dotdot_after_symlinks() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/a/b/c", "/x/y"],
        &[("/a/b/in_b", b"b"), ("/x/in_x", b"x")],
        &[("../../a/b/c", "/x/y/lc"), ("a/b", "/lb")],
    );
    let names = |p: &Pair,
                 path: &str|
     -> (
        io::Result<Vec<std::ffi::OsString>>,
        io::Result<Vec<std::ffi::OsString>>,
    ) {
        let l = p.fs.read_dir(path).and_then(|rd| {
            let mut v = rd
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        let r = std::fs::read_dir(p.k(path)).and_then(|rd| {
            let mut v = rd
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()?;
            v.sort();
            Ok(v)
        });
        (l, r)
    };
    for path in [
        "/x/y/lc/..",
        "/x/y/lc/../..",
        "/lb/..",
        "/lb/../b/c/..",
        "/x/y/lc/../in_b/..",
    ] {
        let (l, r) = names(&p, path);
        p.same(&format!("read_dir {path}"), &l, &r);
    }
    for path in ["/x/y/lc/../in_b", "/lb/../../x/in_x", "/lb/in_b/.."] {
        let l = p.fs.read(path);
        let r = std::fs::read(p.k(path));
        p.same(&format!("read {path}"), &l, &r);
    }
    let l = p.fs.write("/x/y/lc/../new", b"n");
    let r = std::fs::write(p.k("/x/y/lc/../new"), b"n");
    p.same("write through lc/..", &l, &r);
    p.trees("after the writes through ..");
    p.finish();
}
