//! Unprivileged callers against std's: std's side runs on a thread with
//! the user's file-system ids (`common::std_thread::as_user`), beside a
//! lanefs view with that credential; handles and calls, and `fchown`.
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

mod common;
use common::parity::{build, pair, std_futimens};
use common::std_thread::as_user;

#[test]
fn unprivileged_handles_and_calls() {
    use lanefs::TimeSet;
    let Some(mut p) = pair() else { return };
    build(
        &mut p,
        &["/rootdir", "/locked", "/tmp"],
        &[
            ("/mine", b"mine"),
            ("/theirs", b"theirs"),
            ("/secret", b"secret"),
            ("/ro", b"read only"),
            ("/locked/f", b"f"),
        ],
        &[],
    );
    for (path, mode, owner) in [
        ("/mine", 0o644, 1000),
        ("/theirs", 0o666, 0),
        ("/secret", 0o600, 0),
        ("/ro", 0o644, 0),
        ("/rootdir", 0o755, 0),
        ("/locked", 0o700, 0),
        ("/tmp", 0o1777, 0),
    ] {
        p.fs.set_permissions(path, mode).unwrap();
        p.fs.chown(path, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(p.k(path), std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(p.k(path), Some(owner), Some(owner)).unwrap();
    }
    let user = p.fs.with_cred(lanefs::Cred::user(1000, 1000));
    let root = p.root.clone();
    let k = move |path: &str| root.join(path.trim_start_matches('/'));

    type Outcomes = Vec<(String, io::Result<String>)>;
    let lane: Outcomes = {
        let fs = user.clone();
        let mut v: Outcomes = Vec::new();
        let mut rec = |what: &str, r: io::Result<String>| v.push((what.to_string(), r));
        let theirs = lanefs::OpenOptions::new().write(true).open(&fs, "/theirs");
        rec(
            "open theirs",
            theirs.as_ref().map(|_| String::new()).map_err(clone_err),
        );
        if let Ok(f) = &theirs {
            rec(
                "theirs touch",
                f.set_times(Some(TimeSet::Now), Some(TimeSet::Now))
                    .map(|_| String::new()),
            );
            rec(
                "theirs set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            rec(
                "theirs fchmod",
                f.set_permissions(0o600).map(|_| String::new()),
            );
            rec("theirs set_len", f.set_len(2).map(|_| String::new()));
        }
        let ro = fs.open("/ro");
        if let Ok(f) = &ro {
            rec(
                "ro touch",
                f.set_times(Some(TimeSet::Now), Some(TimeSet::Now))
                    .map(|_| String::new()),
            );
        }
        let mine = fs.open("/mine");
        if let Ok(f) = &mine {
            rec(
                "mine set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            rec(
                "mine fchmod 4755",
                f.set_permissions(0o4755)
                    .and_then(|_| f.metadata())
                    .map(|m| format!("{:o}", m.permissions())),
            );
            rec(
                "mine fchmod 2755",
                f.set_permissions(0o2755)
                    .and_then(|_| f.metadata())
                    .map(|m| format!("{:o}", m.permissions())),
            );
        }
        rec("open secret", fs.open("/secret").map(|_| String::new()));
        rec(
            "create in rootdir",
            fs.write("/rootdir/x", b"x").map(|_| String::new()),
        );
        rec(
            "canonicalize locked",
            fs.canonicalize("/locked/f")
                .map(|p| p.display().to_string()),
        );
        rec(
            "copy ro to rootdir",
            fs.copy("/ro", "/rootdir/x").map(|n| n.to_string()),
        );
        rec(
            "copy ro to tmp",
            fs.copy("/ro", "/tmp/x")
                .and_then(|n| Ok(format!("{n} {:o}", fs.metadata("/tmp/x")?.permissions()))),
        );
        rec(
            "copy mine to tmp",
            fs.copy("/mine", "/tmp/y")
                .and_then(|n| Ok(format!("{n} {:o}", fs.metadata("/tmp/y")?.permissions()))),
        );
        rec(
            "remove_dir_all locked",
            fs.remove_dir_all("/locked").map(|_| String::new()),
        );
        rec(
            "read_dir locked",
            fs.read_dir("/locked").map(|_| String::new()),
        );
        let opens: [(&str, bool, bool, i32); 6] = [
            ("/theirs", true, false, libc::O_NOATIME),
            ("/mine", true, false, libc::O_NOATIME),
            ("/ro", true, false, libc::O_TRUNC),
            ("/theirs", true, false, libc::O_TRUNC),
            ("/ro", false, true, libc::O_APPEND),
            ("/rootdir", true, false, libc::O_DIRECTORY),
        ];
        for (path, read, write, flags) in opens {
            rec(
                &format!("open {path} {flags:#x}"),
                lanefs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .custom_flags(flags)
                    .open(&fs, path)
                    .and_then(|f| f.metadata())
                    .map(|m| m.len().to_string()),
            );
        }
        v
    };
    let kernel: Outcomes = as_user(1000, 1000, move || {
        let mut v: Outcomes = Vec::new();
        let mut rec = |what: &str, r: io::Result<String>| v.push((what.to_string(), r));
        let theirs = std::fs::OpenOptions::new().write(true).open(k("/theirs"));
        rec(
            "open theirs",
            theirs.as_ref().map(|_| String::new()).map_err(clone_err),
        );
        if let Ok(f) = &theirs {
            rec(
                "theirs touch",
                std_futimens(f, Some(TimeSet::Now), Some(TimeSet::Now)).map(|_| String::new()),
            );
            rec(
                "theirs set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            rec(
                "theirs fchmod",
                f.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map(|_| String::new()),
            );
            rec("theirs set_len", f.set_len(2).map(|_| String::new()));
        }
        let ro = std::fs::File::open(k("/ro"));
        if let Ok(f) = &ro {
            rec(
                "ro touch",
                std_futimens(f, Some(TimeSet::Now), Some(TimeSet::Now)).map(|_| String::new()),
            );
        }
        let mine = std::fs::File::open(k("/mine"));
        if let Ok(f) = &mine {
            rec(
                "mine set_modified",
                f.set_modified(std::time::UNIX_EPOCH).map(|_| String::new()),
            );
            let chmod = |mode: u32| {
                f.set_permissions(std::fs::Permissions::from_mode(mode))
                    .and_then(|_| f.metadata())
                    .map(|m| format!("{:o}", m.permissions().mode() & 0o7777))
            };
            rec("mine fchmod 4755", chmod(0o4755));
            rec("mine fchmod 2755", chmod(0o2755));
        }
        rec(
            "open secret",
            std::fs::File::open(k("/secret")).map(|_| String::new()),
        );
        rec(
            "create in rootdir",
            std::fs::write(k("/rootdir/x"), b"x").map(|_| String::new()),
        );
        rec(
            "canonicalize locked",
            std::fs::canonicalize(k("/locked/f")).map(|p| p.display().to_string()),
        );
        rec(
            "copy ro to rootdir",
            std::fs::copy(k("/ro"), k("/rootdir/x")).map(|n| n.to_string()),
        );
        let perm = |p: &str| -> io::Result<u32> {
            Ok(std::fs::metadata(k(p))?.permissions().mode() & 0o7777)
        };
        rec(
            "copy ro to tmp",
            std::fs::copy(k("/ro"), k("/tmp/x"))
                .and_then(|n| Ok(format!("{n} {:o}", perm("/tmp/x")?))),
        );
        rec(
            "copy mine to tmp",
            std::fs::copy(k("/mine"), k("/tmp/y"))
                .and_then(|n| Ok(format!("{n} {:o}", perm("/tmp/y")?))),
        );
        rec(
            "remove_dir_all locked",
            std::fs::remove_dir_all(k("/locked")).map(|_| String::new()),
        );
        rec(
            "read_dir locked",
            std::fs::read_dir(k("/locked")).map(|_| String::new()),
        );
        let opens: [(&str, bool, bool, i32); 6] = [
            ("/theirs", true, false, libc::O_NOATIME),
            ("/mine", true, false, libc::O_NOATIME),
            ("/ro", true, false, libc::O_TRUNC),
            ("/theirs", true, false, libc::O_TRUNC),
            ("/ro", false, true, libc::O_APPEND),
            ("/rootdir", true, false, libc::O_DIRECTORY),
        ];
        for (path, read, write, flags) in opens {
            rec(
                &format!("open {path} {flags:#x}"),
                std::fs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .custom_flags(flags)
                    .open(k(path))
                    .and_then(|f| f.metadata())
                    .map(|m| m.len().to_string()),
            );
        }
        v
    });
    assert_eq!(lane.len(), kernel.len(), "{lane:?} {kernel:?}");
    for ((what, l), (_, r)) in lane.iter().zip(&kernel) {
        p.same(what, l, r);
    }
    p.trees("after the unprivileged calls");
    p.finish();
}

fn clone_err(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

#[test]
fn fchown_as_std() {
    let Some(mut p) = pair() else { return };
    let cases: &[(&str, u32, Option<u32>, Option<u32>)] = &[
        ("/a", 0o6755, Some(1000), Some(1000)),
        ("/b", 0o6755, None, None),
        ("/c", 0o2644, None, None),
        ("/d", 0o4755, None, Some(5)),
        ("/e", 0o644, Some(7), None),
    ];
    for &(name, mode, uid, gid) in cases {
        p.write_both(name, b"x");
        p.fs.set_permissions(name, mode).unwrap();
        std::fs::set_permissions(p.k(name), std::fs::Permissions::from_mode(mode)).unwrap();
        let lf = p.fs.open(name).unwrap();
        let sf = std::fs::File::open(p.k(name)).unwrap();
        let l = lf
            .set_owner(uid, gid)
            .and_then(|_| lf.metadata())
            .map(|m| (m.uid(), m.gid(), m.permissions()));
        let r = std::os::unix::fs::fchown(&sf, uid, gid)
            .and_then(|_| sf.metadata())
            .map(|m| (m.uid(), m.gid(), m.permissions().mode() & 0o7777));
        p.same(&format!("fchown {name} {mode:o} {uid:?} {gid:?}"), &l, &r);
    }
    // Unprivileged: the owner may change the group to one of its own.
    for name in ["/mine", "/theirs"] {
        p.write_both(name, b"x");
    }
    p.fs.chown("/mine", Some(1000), Some(1000)).unwrap();
    std::os::unix::fs::chown(p.k("/mine"), Some(1000), Some(1000)).unwrap();
    let user = p.fs.with_cred(lanefs::Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![1001],
    });
    let ops: [(Option<u32>, Option<u32>); 5] = [
        (None, Some(1001)),
        (None, Some(0)),
        (Some(0), None),
        (Some(1000), None),
        (None, None),
    ];
    let lane: Vec<io::Result<()>> = ["/mine", "/theirs"]
        .iter()
        .flat_map(|name| {
            let f = user.open(name);
            ops.iter()
                .map(|&(u, g)| {
                    f.as_ref()
                        .map_err(clone_err)
                        .and_then(|f| f.set_owner(u, g))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let root = p.root.clone();
    let kernel: Vec<io::Result<()>> = as_user(1000, 1000, move || {
        // SAFETY: a per-thread raw setgroups with a valid one-element list.
        unsafe {
            let groups = [1001 as libc::gid_t];
            assert_eq!(libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()), 0);
        }
        ["/mine", "/theirs"]
            .iter()
            .flat_map(|name| {
                let f = std::fs::File::open(root.join(&name[1..]));
                ops.iter()
                    .map(|&(u, g)| {
                        f.as_ref()
                            .map_err(clone_err)
                            .and_then(|f| std::os::unix::fs::fchown(f, u, g))
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    for (i, (l, r)) in lane.iter().zip(&kernel).enumerate() {
        p.same(&format!("unprivileged fchown #{i}"), l, r);
    }
    p.finish();
}
