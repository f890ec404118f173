//! Metadata and times against std's: every `Metadata` field, an unlinked
//! file's metadata and permissions, `set_times`/`set_modified`, and which
//! of a file's times each call moves.
//!
//! Part of the std parity tests: the harness and what is compared are in
//! `common/parity.rs`. Needs root, else the differential tests say so and
//! pass; `LANEFS_PARITY_IMAGE=1` runs the library on an image file.

use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

use lanefs::Filesystem;

mod common;
use common::parity::{build, pair, std_futimens, unit};

#[test]
fn file_metadata_unlinked_and_permissions() {
    let Some(mut p) = pair() else { return };
    let lf = p.fs.create("/f").unwrap();
    let sf = std::fs::File::create(p.k("/f")).unwrap();
    lf.write_at(b"abc", 0).unwrap();
    sf.write_at(b"abc", 0).unwrap();
    p.fs.remove_file("/f").unwrap();
    std::fs::remove_file(p.k("/f")).unwrap();
    let l = lf.metadata().map(|m| (m.nlink(), m.len(), m.is_file()));
    let r = sf
        .metadata()
        .map(|m| (m.nlink() as u32, m.len(), m.is_file()));
    p.same("fstat of an unlinked file", &l, &r);
    let l = lf.set_len(1).and_then(|_| lf.metadata().map(|m| m.len()));
    let r = sf.set_len(1).and_then(|_| sf.metadata().map(|m| m.len()));
    p.same("set_len of an unlinked file", &l, &r);
    for mode in [0o4755u32, 0o2755, 0o1777, 0o7777, 0o0, 0o100644] {
        let l = lf
            .set_permissions(mode)
            .and_then(|_| lf.metadata().map(|m| m.permissions()));
        let r = sf
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|_| sf.metadata().map(|m| m.permissions().mode() & 0o7777));
        p.same(&format!("fchmod {mode:o}"), &l, &r);
    }
    // chmod by path, setuid bits included.
    p.write_both("/g", b"");
    p.symlink_both("g", "/lg");
    for (path, mode) in [("/g", 0o6755u32), ("/lg", 0o1700), ("/nope", 0o600)] {
        let l =
            p.fs.set_permissions(path, mode)
                .and_then(|_| p.fs.metadata(path).map(|m| m.permissions()));
        let r = std::fs::set_permissions(p.k(path), std::fs::Permissions::from_mode(mode))
            .and_then(|_| std::fs::metadata(p.k(path)))
            .map(|m| m.permissions().mode() & 0o7777);
        p.same(&format!("chmod {path} {mode:o}"), &l, &r);
    }
    drop((lf, sf));
    p.trees("after chmods");
    p.finish();
}

#[test]
fn metadata_fields() {
    let Some(mut p) = pair() else { return };
    for (name, size) in [
        ("/empty", 0usize),
        ("/one", 1),
        ("/page", 4096),
        ("/odd", 10_000),
    ] {
        p.write_both(name, vec![b'x'; size]);
    }
    p.write_both("/sparse", b"");
    {
        let lf = lanefs::OpenOptions::new()
            .write(true)
            .open(&p.fs, "/sparse")
            .unwrap();
        let sf = std::fs::OpenOptions::new()
            .write(true)
            .open(p.k("/sparse"))
            .unwrap();
        lf.write_at(b"end", 1 << 20).unwrap();
        sf.write_at(b"end", 1 << 20).unwrap();
    }
    p.create_dir_both("/d");
    p.symlink_both("one", "/link");
    p.fs.hard_link("/one", "/one2").unwrap();
    std::fs::hard_link(p.k("/one"), p.k("/one2")).unwrap();
    for name in [
        "/empty", "/one", "/page", "/odd", "/sparse", "/link", "/d", "/one2",
    ] {
        for follow in [true, false] {
            let l = if follow {
                p.fs.metadata(name)
            } else {
                p.fs.symlink_metadata(name)
            }
            .map(|m| {
                (
                    m.is_file(),
                    m.is_dir(),
                    m.is_symlink(),
                    m.len(),
                    m.mode(),
                    m.nlink(),
                    m.uid(),
                    m.gid(),
                    m.blocks(),
                    m.blksize(),
                )
            });
            let r = if follow {
                std::fs::metadata(p.k(name))
            } else {
                std::fs::symlink_metadata(p.k(name))
            }
            .map(|m| {
                (
                    m.is_file(),
                    m.is_dir(),
                    m.file_type().is_symlink(),
                    m.len(),
                    m.mode(),
                    m.nlink() as u32,
                    m.uid(),
                    m.gid(),
                    m.blocks(),
                    m.blksize() as u32,
                )
            });
            p.same(&format!("stat {name} follow={follow}"), &l, &r);
        }
    }
    // The times as SystemTimes, set alike on both sides.
    let (a, m) = (
        lanefs::Timespec {
            sec: 1_234_567_890,
            nsec: 42,
        },
        lanefs::Timespec {
            sec: -86_400,
            nsec: 7,
        },
    );
    p.fs.set_times(
        "/one",
        Some(lanefs::TimeSet::At(a)),
        Some(lanefs::TimeSet::At(m)),
    )
    .unwrap();
    let sf = std::fs::File::options()
        .write(true)
        .open(p.k("/one"))
        .unwrap();
    std_futimens(
        &sf,
        Some(lanefs::TimeSet::At(a)),
        Some(lanefs::TimeSet::At(m)),
    )
    .unwrap();
    let l = p.fs.metadata("/one").map(|m| {
        (
            m.accessed(),
            m.modified(),
            m.created() <= std::time::SystemTime::now(),
        )
    });
    let r = std::fs::metadata(p.k("/one")).and_then(|m| {
        Ok((
            m.accessed()?,
            m.modified()?,
            m.created()? <= std::time::SystemTime::now(),
        ))
    });
    p.same("accessed, modified, created", &l, &r);
    p.finish();
}

fn std_times(m: &std::fs::Metadata) -> (i64, i64, i64, i64) {
    (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())
}

fn lane_times(m: &lanefs::Metadata) -> (i64, i64, i64, i64) {
    let (a, t) = (m.atime(), m.mtime());
    (a.sec, a.nsec as i64, t.sec, t.nsec as i64)
}

#[test]
fn file_set_times_and_set_modified() {
    use lanefs::{TimeSet, Timespec};
    let Some(mut p) = pair() else { return };
    p.write_both("/f", b"x");
    let t1 = Timespec {
        sec: 1_000_000_000,
        nsec: 123,
    };
    let before = Timespec {
        sec: -5,
        nsec: 999_999_999,
    };
    let bad = Timespec {
        sec: 1,
        nsec: 1_000_000_000,
    };
    for write in [false, true] {
        let lf = lanefs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(&p.fs, "/f")
            .unwrap();
        let sf = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open(p.k("/f"))
            .unwrap();
        let cases = [
            (Some(TimeSet::At(t1)), None),
            (None, Some(TimeSet::At(t1))),
            (Some(TimeSet::At(before)), Some(TimeSet::At(before))),
            (Some(TimeSet::At(bad)), None),
            (None, Some(TimeSet::At(bad))),
            (None, None),
        ];
        let t0 = Some(TimeSet::At(Timespec {
            sec: 86_400,
            nsec: 5,
        }));
        for (a, m) in cases {
            // From the same times on both sides.
            lf.set_times(t0, t0).unwrap();
            std_futimens(&sf, t0, t0).unwrap();
            let l = lf
                .set_times(a, m)
                .and_then(|_| lf.metadata())
                .map(|m| lane_times(&m));
            let r = std_futimens(&sf, a, m)
                .and_then(|_| sf.metadata())
                .map(|m| std_times(&m));
            p.same(&format!("futimens write={write} {a:?} {m:?}"), &l, &r);
        }
        let when = std::time::UNIX_EPOCH - std::time::Duration::new(7, 250);
        let l = lf
            .set_modified(when)
            .and_then(|_| lf.metadata())
            .map(|m| lane_times(&m));
        let r = sf
            .set_modified(when)
            .and_then(|_| sf.metadata())
            .map(|m| std_times(&m));
        p.same(&format!("set_modified write={write}"), &l, &r);
    }
    p.finish();
}

/// Which of a file's times each call moves, on both sides: (atime, mtime,
/// ctime) changed, for a sequence of calls a std user makes.
#[test]
fn which_times_each_call_moves() {
    let Some(mut p) = pair() else { return };
    build(&mut p, &["/d"], &[("/d/f", b"0123456789")], &[]);
    type Step = (
        &'static str,
        &'static str,
        fn(&Filesystem) -> io::Result<()>,
        fn(&Path) -> io::Result<()>,
    );
    let steps: &[Step] = &[
        (
            "read",
            "/d/f",
            |fs| unit(fs.read("/d/f")),
            |r| unit(std::fs::read(r.join("d/f"))),
        ),
        (
            "read again",
            "/d/f",
            |fs| unit(fs.read("/d/f")),
            |r| unit(std::fs::read(r.join("d/f"))),
        ),
        (
            "write_at",
            "/d/f",
            |fs| {
                lanefs::OpenOptions::new()
                    .write(true)
                    .open(fs, "/d/f")?
                    .write_all_at(b"x", 3)
            },
            |r| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("d/f"))?
                    .write_all_at(b"x", 3)
            },
        ),
        (
            "set_len same size",
            "/d/f",
            |fs| {
                lanefs::OpenOptions::new()
                    .write(true)
                    .open(fs, "/d/f")?
                    .set_len(10)
            },
            |r| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("d/f"))?
                    .set_len(10)
            },
        ),
        (
            "set_len smaller",
            "/d/f",
            |fs| {
                lanefs::OpenOptions::new()
                    .write(true)
                    .open(fs, "/d/f")?
                    .set_len(8)
            },
            |r| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(r.join("d/f"))?
                    .set_len(8)
            },
        ),
        (
            "chmod",
            "/d/f",
            |fs| fs.set_permissions("/d/f", 0o600),
            |r| std::fs::set_permissions(r.join("d/f"), std::fs::Permissions::from_mode(0o600)),
        ),
        (
            "open read-only",
            "/d/f",
            |fs| unit(fs.open("/d/f")),
            |r| unit(std::fs::File::open(r.join("d/f"))),
        ),
        (
            "hard_link",
            "/d/f",
            |fs| fs.hard_link("/d/f", "/d/g"),
            |r| std::fs::hard_link(r.join("d/f"), r.join("d/g")),
        ),
        (
            "hard_link: the dir",
            "/d",
            |fs| fs.hard_link("/d/f", "/d/h"),
            |r| std::fs::hard_link(r.join("d/f"), r.join("d/h")),
        ),
        (
            "rename",
            "/d/f",
            |fs| fs.rename("/d/g", "/d/g2"),
            |r| std::fs::rename(r.join("d/g"), r.join("d/g2")),
        ),
        (
            "read_dir: the dir",
            "/d",
            |fs| fs.read_dir("/d")?.try_for_each(unit),
            |r| std::fs::read_dir(r.join("d"))?.try_for_each(unit),
        ),
        (
            "truncate to empty",
            "/d/f",
            |fs| unit(fs.create("/d/f")),
            |r| unit(std::fs::File::create(r.join("d/f"))),
        ),
        (
            "truncate empty again",
            "/d/f",
            |fs| unit(fs.create("/d/f")),
            |r| unit(std::fs::File::create(r.join("d/f"))),
        ),
        (
            "empty write",
            "/d/f",
            |fs| unit(fs.create("/d/f")?.write(b"")),
            |r| unit(std::fs::File::create(r.join("d/f"))?.write(b"")),
        ),
        (
            "remove a link: the dir",
            "/d",
            |fs| fs.remove_file("/d/h"),
            |r| std::fs::remove_file(r.join("d/h")),
        ),
        (
            "remove a link",
            "/d/f",
            |fs| fs.remove_file("/d/g2"),
            |r| std::fs::remove_file(r.join("d/g2")),
        ),
        (
            "copy onto it",
            "/d/f",
            |fs| unit(fs.copy("/d/f", "/d/c")),
            |r| unit(std::fs::copy(r.join("d/f"), r.join("d/c"))),
        ),
    ];
    let lane_t = |fs: &Filesystem, path: &str| {
        let m = fs.metadata(path).unwrap();
        (m.atime(), m.mtime(), m.ctime())
    };
    let std_t = |path: &Path| {
        let m = std::fs::metadata(path).unwrap();
        (
            (m.atime(), m.atime_nsec()),
            (m.mtime(), m.mtime_nsec()),
            (m.ctime(), m.ctime_nsec()),
        )
    };
    for (what, watched, lane_op, std_op) in steps {
        // Past the clock's granularity, so that a change shows.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (l0, s0) = (lane_t(&p.fs, watched), std_t(&p.k(watched)));
        let l = lane_op(&p.fs);
        let r = std_op(&p.root);
        p.same(&format!("{what}: result"), &l, &r);
        let (l1, s1) = (lane_t(&p.fs, watched), std_t(&p.k(watched)));
        let l = Ok::<_, io::Error>((l0.0 != l1.0, l0.1 != l1.1, l0.2 != l1.2));
        let r = Ok((s0.0 != s1.0, s0.1 != s1.1, s0.2 != s1.2));
        p.same(
            &format!("{what}: (atime, mtime, ctime) moved of {watched}"),
            &l,
            &r,
        );
    }
    p.finish();
}
