//! The calls about the root itself and absolute symlinks against std's,
//! std's side run on a thread `chroot`ed into the tmpfs directory
//! (`common::std_thread::in_chroot`).
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

mod common;
use common::parity::{build, pair};
use common::std_thread::in_chroot;

type Outcome = io::Result<String>;

/// The calls about the root and absolute links, through any file system.
fn root_calls(
    canonicalize: &dyn Fn(&str) -> io::Result<PathBuf>,
    open: &dyn Fn(&str, bool, bool, bool, i32) -> Outcome,
    other: &dyn Fn(&str) -> Outcome,
) -> Vec<(String, Outcome)> {
    let mut v = Vec::new();
    for path in [
        "/",
        "/..",
        "/../..",
        "/abs",
        "/abs/..",
        "/abs/../abs2",
        "/d/rel_root/d",
        "/d/../../d",
        "/loop_abs",
        "/abs2/file",
        "/d/rel_root/abs/../..",
    ] {
        v.push((
            format!("canonicalize {path}"),
            canonicalize(path).map(|p| p.display().to_string()),
        ));
    }
    for (path, write, create, create_new, flags) in [
        ("/", false, false, false, 0),
        ("/", false, false, false, libc::O_DIRECTORY),
        ("/", true, false, false, 0),
        ("/", true, true, false, 0),
        ("/", true, false, true, 0),
        ("/..", true, true, false, 0),
        ("/..", true, false, true, 0),
        ("/abs", false, false, false, libc::O_NOFOLLOW),
        ("/abs/", false, false, false, libc::O_NOFOLLOW),
        ("/dangling_abs", true, true, false, 0),
        ("/dangling_abs", true, false, true, 0),
    ] {
        v.push((
            format!("open {path} w={write} c={create} cn={create_new} {flags:#x}"),
            open(path, write, create, create_new, flags),
        ));
    }
    for op in [
        "rename / /x",
        "rename /d /",
        "rename /d /..",
        "remove_dir /",
        "remove_dir /..",
        "remove_file /",
        "create_dir /",
        "create_dir /..",
        "hard_link /d/f /",
        "symlink /",
        "read_link /",
        "read_link /abs",
        "metadata /..",
        "read_dir /..",
        "remove_dir_all /",
    ] {
        v.push((op.to_string(), other(op)));
    }
    v
}

fn names_sorted(it: impl Iterator<Item = io::Result<std::ffi::OsString>>) -> Outcome {
    let mut v = it.collect::<io::Result<Vec<_>>>()?;
    v.sort();
    Ok(format!("{v:?}"))
}

#[test]
fn the_root_and_absolute_symlinks() {
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/d/sub"],
        &[("/d/f", b"f")],
        &[
            ("/d", "/abs"),
            ("/abs/sub", "/abs2"),
            ("/", "/d/rel_root"),
            ("/loop_abs", "/loop_abs"),
            ("/made_abs", "/dangling_abs"),
        ],
    );
    let fs = p.fs.clone();
    let lane = {
        let canonicalize = |path: &str| fs.canonicalize(path);
        let open = |path: &str, write: bool, create: bool, create_new: bool, flags: i32| {
            lanefs::OpenOptions::new()
                .read(!write)
                .write(write)
                .create(create)
                .create_new(create_new)
                .custom_flags(flags)
                .open(&fs, path)
                .and_then(|f| f.metadata())
                .map(|m| format!("{:?} {}", m.kind(), m.nlink()))
        };
        let other = |op: &str| -> Outcome {
            let w: Vec<&str> = op.split(' ').collect();
            let done = |r: io::Result<()>| r.map(|_| String::new());
            match w[0] {
                "rename" => done(fs.rename(w[1], w[2])),
                "remove_dir" => done(fs.remove_dir(w[1])),
                "remove_file" => done(fs.remove_file(w[1])),
                "create_dir" => done(fs.create_dir(w[1])),
                "hard_link" => done(fs.hard_link(w[1], w[2])),
                "symlink" => done(fs.symlink("x", w[1])),
                "read_link" => fs.read_link(w[1]).map(|p| p.display().to_string()),
                "metadata" => fs.metadata(w[1]).map(|m| format!("{:?}", m.kind())),
                "read_dir" => names_sorted(fs.read_dir(w[1])?.map(|e| e.map(|e| e.file_name()))),
                _ => done(fs.remove_dir_all(w[1])),
            }
        };
        root_calls(&canonicalize, &open, &other)
    };
    let kernel = in_chroot(&p.root, || {
        let canonicalize = |path: &str| std::fs::canonicalize(path);
        let open = |path: &str, write: bool, create: bool, create_new: bool, flags: i32| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .create(create)
                .create_new(create_new)
                .custom_flags(flags)
                .open(path)
                .and_then(|f| f.metadata())
                .map(|m| {
                    let kind = if m.is_dir() {
                        "Directory"
                    } else if m.file_type().is_symlink() {
                        "Symlink"
                    } else {
                        "Regular"
                    };
                    format!("{kind} {}", m.nlink())
                })
        };
        let other = |op: &str| -> Outcome {
            let w: Vec<&str> = op.split(' ').collect();
            let done = |r: io::Result<()>| r.map(|_| String::new());
            match w[0] {
                "rename" => done(std::fs::rename(w[1], w[2])),
                "remove_dir" => done(std::fs::remove_dir(w[1])),
                "remove_file" => done(std::fs::remove_file(w[1])),
                "create_dir" => done(std::fs::create_dir(w[1])),
                "hard_link" => done(std::fs::hard_link(w[1], w[2])),
                "symlink" => done(std::os::unix::fs::symlink("x", w[1])),
                "read_link" => std::fs::read_link(w[1]).map(|p| p.display().to_string()),
                "metadata" => std::fs::metadata(w[1])
                    .map(|m| if m.is_dir() { "Directory" } else { "Regular" }.to_string()),
                "read_dir" => {
                    names_sorted(std::fs::read_dir(w[1])?.map(|e| e.map(|e| e.file_name())))
                }
                _ => done(std::fs::remove_dir_all(w[1])),
            }
        };
        root_calls(&canonicalize, &open, &other)
    });
    for ((what, l), (_, r)) in lane.iter().zip(&kernel) {
        p.same(what, l, r);
    }
    p.trees("after the calls on the root");
    p.finish();
}
