//! `OpenOptions` and `open` flags against std's: the matrix of options
//! over what the name is before (missing, a file, a dangling link, a link
//! to a file, a directory), modes and custom flags, `O_TMPFILE` and
//! `O_PATH`.
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::fmt::Debug;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

mod common;
use common::parity::{build, pair, unit};

/// What the existing name is before an open.
#[derive(Clone, Copy, Debug)]
enum Before {
    Missing,
    File,
    DanglingLink,
    LinkToFile,
    Dir,
}

#[test]
fn open_options_matrix() {
    let Some(mut p) = pair() else { return };
    let befores = [
        Before::Missing,
        Before::File,
        Before::DanglingLink,
        Before::LinkToFile,
        Before::Dir,
    ];
    let mut n = 0;
    for before in befores {
        for bits in 0u32..64 {
            n += 1;
            let name = format!("/o{n}");
            let target = format!("/t{n}");
            match before {
                Before::Missing => {}
                Before::File => {
                    p.write_both(&name, b"old content");
                }
                Before::DanglingLink | Before::LinkToFile => {
                    let t = format!("t{n}");
                    p.symlink_both(&t, &name);
                    if let Before::LinkToFile = before {
                        p.write_both(&target, b"old content");
                    }
                }
                Before::Dir => {
                    p.create_dir_both(&name);
                }
            }
            let on = |i: u32| bits & (1 << i) != 0;
            let (read, write, append, truncate, create, create_new) =
                (on(0), on(1), on(2), on(3), on(4), on(5));
            let what = format!(
                "open {before:?} read={read} write={write} append={append} \
                 truncate={truncate} create={create} create_new={create_new}"
            );
            let l = lanefs::OpenOptions::new()
                .read(read)
                .write(write)
                .append(append)
                .truncate(truncate)
                .create(create)
                .create_new(create_new)
                .open(&p.fs, &name);
            let s = std::fs::OpenOptions::new()
                .read(read)
                .write(write)
                .append(append)
                .truncate(truncate)
                .create(create)
                .create_new(create_new)
                .open(p.k(&name));
            let (mut lf, mut sf) = match (l, s) {
                (Ok(l), Ok(s)) => (l, s),
                (l, s) => {
                    let (l, s) = (unit(l), unit(s));
                    p.same(&what, &l, &s);
                    continue;
                }
            };
            let mut lb = [0u8; 3];
            let mut sb = [0u8; 3];
            let l = lf.read(&mut lb).map(|n| lb[..n].to_vec());
            let s = sf.read(&mut sb).map(|n| sb[..n].to_vec());
            p.same(&format!("{what}: read"), &l, &s);
            let l = lf.write(b"XY");
            let s = sf.write(b"XY");
            p.same(&format!("{what}: write"), &l, &s);
            let l = lf.stream_position();
            let s = sf.stream_position();
            p.same(&format!("{what}: position"), &l, &s);
            let l = lf.metadata().map(|m| (m.len(), m.permissions()));
            let s = sf
                .metadata()
                .map(|m| (m.len(), m.permissions().mode() & 0o7777));
            p.same(&format!("{what}: fstat"), &l, &s);
        }
    }
    p.trees("after the open matrix");
    p.finish();
}

/// Linux's `__O_TMPFILE`: `O_TMPFILE` less `O_DIRECTORY`.
const O_TMPFILE_BIT: i32 = libc::O_TMPFILE & !libc::O_DIRECTORY;

#[test]
fn open_options_mode_and_custom_flags() {
    let Some(mut p) = pair() else { return };
    p.write_both("/f", b"data");
    p.create_dir_both("/d");
    p.symlink_both("f", "/lf");
    p.symlink_both("d", "/ld");

    // (path, read, write, create, create_new, mode, custom flags)
    let cases: &[(&str, bool, bool, bool, bool, u32, i32)] = &[
        ("/m1", false, true, true, false, 0o640, 0),
        ("/m2", false, true, true, false, 0o4755, 0),
        ("/m3", true, true, false, true, 0o7777, 0),
        ("/m4", false, true, true, false, 0, 0),
        ("/f", false, true, true, false, 0o600, 0), // mode ignored: exists
        ("/lf", true, false, false, false, 0o666, libc::O_NOFOLLOW),
        ("/lf", false, true, true, false, 0o666, libc::O_NOFOLLOW),
        ("/ld", true, false, false, false, 0o666, libc::O_DIRECTORY),
        (
            "/ld",
            true,
            false,
            false,
            false,
            0o666,
            libc::O_DIRECTORY | libc::O_NOFOLLOW,
        ),
        ("/f", true, false, false, false, 0o666, libc::O_DIRECTORY),
        ("/d", true, false, false, false, 0o666, libc::O_DIRECTORY),
        ("/d", false, true, false, false, 0o666, libc::O_DIRECTORY),
        ("/m5", false, true, true, false, 0o666, libc::O_DIRECTORY),
        ("/f", true, false, false, false, 0o666, libc::O_EXCL),
        ("/f", true, false, false, false, 0o666, libc::O_NOATIME),
        (
            "/f",
            true,
            false,
            false,
            false,
            0o666,
            libc::O_SYNC | libc::O_DSYNC,
        ),
        ("/f", true, false, false, false, 0o666, libc::O_WRONLY), // ignored
        ("/f/", true, false, false, false, 0o666, 0),
        ("/d/", true, false, false, false, 0o666, 0),
        ("/m6/", false, true, true, false, 0o666, 0),
        ("/missing/x", false, true, true, false, 0o666, 0),
        ("/f/x", false, true, true, false, 0o666, 0),
        ("/ld/x", false, true, true, false, 0o644, 0),
        ("/ld/x", false, true, false, true, 0o644, 0),
        // Creation and truncation through the raw flags alone.
        ("/c1", true, false, false, false, 0o600, libc::O_CREAT),
        (
            "/c1",
            true,
            false,
            false,
            false,
            0o600,
            libc::O_CREAT | libc::O_EXCL,
        ),
        (
            "/lf",
            true,
            false,
            false,
            false,
            0o600,
            libc::O_CREAT | libc::O_EXCL,
        ),
        ("/f", true, false, false, false, 0o666, libc::O_TRUNC),
        ("/d", true, false, false, false, 0o666, libc::O_TRUNC),
        ("/f", true, false, false, false, 0o666, libc::O_APPEND),
        ("/c2/", true, false, false, false, 0o600, libc::O_CREAT),
        ("/d/", false, true, false, true, 0o600, 0),
        ("/c3/", false, true, false, true, 0o600, 0),
        ("/f/", false, true, false, true, 0o600, 0),
        ("/lf/", false, true, true, false, 0o600, 0),
        ("/ld/", false, true, true, false, 0o600, 0),
        // (The root itself is not compared: on the std side "/" is the
        // case directory, an ordinary one.)
        ("/d/.", false, true, true, false, 0o600, 0),
        ("/d/.", false, true, false, true, 0o600, 0),
        ("/d/..", true, false, false, false, 0o600, libc::O_DIRECTORY),
        // O_DIRECT: regular files open with it (tmpfs's rule: any
        // alignment), a directory does not (EINVAL once the open passed
        // its checks: do_dentry_open without FMODE_CAN_ODIRECT).
        ("/f", true, true, false, false, 0o666, libc::O_DIRECT),
        ("/m7", false, true, true, false, 0o600, libc::O_DIRECT),
        ("/d", true, false, false, false, 0o666, libc::O_DIRECT),
        (
            "/d",
            true,
            false,
            false,
            false,
            0o666,
            libc::O_DIRECT | libc::O_DIRECTORY,
        ),
        ("/ld", true, false, false, false, 0o666, libc::O_DIRECT),
        ("/d", false, true, false, false, 0o666, libc::O_DIRECT),
        ("/d/", true, false, false, false, 0o666, libc::O_DIRECT),
        // __O_TMPFILE without O_DIRECTORY is not O_TMPFILE: EINVAL
        // (build_open_flags), whatever the path names.
        ("/d", false, true, false, false, 0o600, O_TMPFILE_BIT),
        ("/f", false, true, false, false, 0o600, O_TMPFILE_BIT),
        ("/f", true, true, false, false, 0o600, O_TMPFILE_BIT),
        ("/m8", false, true, false, false, 0o600, O_TMPFILE_BIT),
    ];
    for &(path, read, write, create, create_new, mode, flags) in cases {
        let what = format!(
            "open {path} read={read} write={write} create={create} \
             create_new={create_new} mode={mode:o} flags={flags:#x}"
        );
        let l = lanefs::OpenOptions::new()
            .read(read)
            .write(write)
            .create(create)
            .create_new(create_new)
            .mode(mode)
            .custom_flags(flags)
            .open(&p.fs, path)
            .and_then(|f| f.metadata().map(|m| (m.is_dir(), m.permissions())));
        let s = std::fs::OpenOptions::new()
            .read(read)
            .write(write)
            .create(create)
            .create_new(create_new)
            .mode(mode)
            .custom_flags(flags)
            .open(p.k(path))
            .and_then(|f| {
                f.metadata()
                    .map(|m| (m.is_dir(), m.permissions().mode() & 0o7777))
            });
        p.same(&what, &l, &s);
    }
    for path in ["/new1", "/f", "/lf", "/ld/new2", "/d/", "/missing/x"] {
        let l = p.fs.create_new(path).and_then(|mut f| {
            f.write_all(b"rw")?;
            f.seek(SeekFrom::Start(0))?;
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            Ok(s)
        });
        let r = std::fs::File::create_new(p.k(path)).and_then(|mut f| {
            f.write_all(b"rw")?;
            f.seek(SeekFrom::Start(0))?;
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            Ok(s)
        });
        p.same(&format!("create_new {path}"), &l, &r);
    }
    let l = lanefs::File::options()
        .read(true)
        .open(&p.fs, "/f")
        .and_then(|f| f.metadata())
        .map(|m| m.len());
    let r = std::fs::File::options()
        .read(true)
        .open(p.k("/f"))
        .and_then(|f| f.metadata())
        .map(|m| m.len());
    p.same("File::options", &l, &r);
    p.trees("after the opens");
    p.finish();
}

#[test]
fn tmpfile_and_path_flags() {
    use std::os::fd::AsRawFd;
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/d"], &[("/f", b"data")], &[]);
    for (write, read, flags) in [
        (true, false, libc::O_TMPFILE),
        (true, true, libc::O_TMPFILE),
        (false, true, libc::O_TMPFILE),
        (true, false, libc::O_TMPFILE | libc::O_EXCL),
    ] {
        let what = format!("tmpfile write={write} read={read} flags={flags:#x}");
        let l = lanefs::OpenOptions::new()
            .write(write)
            .read(read)
            .mode(0o640)
            .custom_flags(flags)
            .open(&p.fs, "/d");
        let s = std::fs::OpenOptions::new()
            .write(write)
            .read(read)
            .mode(0o640)
            .custom_flags(flags)
            .open(p.k("/d"));
        let (mut lf, mut sf) = match (l, s) {
            (Ok(l), Ok(s)) => (l, s),
            (l, s) => {
                p.same(&what, &unit(l), &unit(s));
                continue;
            }
        };
        let l = lf
            .write(b"anon")
            .and_then(|_| lf.metadata())
            .map(|m| (m.nlink(), m.len(), m.permissions()));
        let r = sf
            .write(b"anon")
            .and_then(|_| sf.metadata())
            .map(|m| (m.nlink() as u32, m.len(), m.permissions().mode() & 0o7777));
        p.same(&format!("{what}: write, fstat"), &l, &r);
        let l = p.fs.link_file(&lf, "/d/named");
        let target = std::ffi::CString::new(p.k("/d/named").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid descriptor and NUL-terminated paths.
        let rc = unsafe {
            libc::linkat(
                sf.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        let r = if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
        p.same(&format!("{what}: link"), &l, &r);
        let _ = p.fs.remove_file("/d/named");
        let _ = std::fs::remove_file(p.k("/d/named"));
    }
    p.trees("after tmpfiles");
    p.finish();
}
