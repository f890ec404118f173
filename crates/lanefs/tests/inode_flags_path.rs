//! Inode flags through the path API (`Filesystem::flags`/`set_flags`,
//! the embedded `chattr`/`lsattr`): the open before the ioctl asks read
//! permission, special files are `ENOTTY`, and the path layer's own
//! checks leave the flags' `EPERM` where Linux has it (`fallocate`'s
//! before its `EFBIG`). The rules themselves: `lanefs-core/tests/inode_flags.rs`.

use std::io;

use lanefs::iflags::{FlagsSet, FsxAttr, FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NODUMP_FL};
use lanefs::{Cred, Filesystem, OpenOptions};

fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap()
}

#[test]
fn chattr_and_lsattr_by_path() -> io::Result<()> {
    let fs = Filesystem::new_in_memory()?;
    fs.write("/f", b"hello")?;
    fs.set_permissions("/f", 0o600)?;
    fs.symlink("f", "/link")?;
    assert_eq!(fs.flags("/f")?, 0);
    fs.set_flags("/link", FlagsSet::Flags(FS_IMMUTABLE_FL | FS_NODUMP_FL))?;
    assert_eq!(fs.flags("/f")?, FS_IMMUTABLE_FL | FS_NODUMP_FL, "followed");
    let fsx = FsxAttr::of_flags(fs.flags("/f")?);
    assert_eq!(fsx.xflags, 0x88);
    // The opens before the ioctl: read permission; a fifo has no flags.
    let user = fs.with_cred(Cred::user(1000, 1000));
    assert_eq!(errno(user.flags("/f")), libc::EACCES);
    fs.create_dir("/d")?;
    fs.mknod("/d/p", libc::S_IFIFO | 0o644, 0)?;
    assert_eq!(errno(fs.flags("/d/p")), libc::ENOTTY);
    // What the flag refuses through the path API.
    assert_eq!(errno(fs.write("/f", b"x")), libc::EPERM);
    assert_eq!(errno(fs.remove_file("/f")), libc::EPERM);
    assert_eq!(errno(fs.truncate("/f", 0)), libc::EPERM);
    assert_eq!(fs.read("/f")?, b"hello");
    fs.set_flags("/f", FlagsSet::Flags(0))?;
    // An append-only file: O_APPEND opens only, fallocate plain only;
    // EPERM before the EFBIG of a range past i64::MAX, as vfs_fallocate.
    fs.set_flags("/f", FlagsSet::Flags(FS_APPEND_FL))?;
    let f = OpenOptions::new().append(true).open(&fs, "/f")?;
    assert_eq!(errno(f.fallocate(0x2 | 0x1, 0, 1)), libc::EPERM);
    assert!(f.fallocate(0x1, 0, 4096).is_ok());
    assert_eq!(errno(f.fallocate(0x2 | 0x1, 1, i64::MAX)), libc::EPERM);
    assert_eq!(
        errno(OpenOptions::new().write(true).open(&fs, "/f")),
        libc::EPERM
    );
    drop(f);
    fs.set_flags("/f", FlagsSet::Flags(FS_IMMUTABLE_FL))?;
    let f = fs.open("/f")?;
    drop(f);
    fs.set_flags("/f", FlagsSet::Flags(0))?;
    fs.remove_file("/f")?;
    Ok(())
}

/// Accepted divergence (docs/SEMANTICS.md): `chown(f, -1, -1)` of a
/// flagged setuid file is refused, where tmpfs clears setuid; of one
/// without the bits it succeeds, as on tmpfs.
#[test]
fn divergence_chown_without_ids_of_a_flagged_setuid_file_is_eperm() -> io::Result<()> {
    let fs = Filesystem::new_in_memory()?;
    fs.write("/s", b"x")?;
    fs.set_permissions("/s", 0o4755)?;
    fs.set_flags("/s", FlagsSet::Flags(FS_IMMUTABLE_FL))?;
    assert_eq!(errno(fs.chown("/s", None, None)), libc::EPERM);
    assert_eq!(fs.metadata("/s")?.permissions(), 0o4755);
    fs.write("/p", b"x")?;
    fs.set_flags("/p", FlagsSet::Flags(FS_IMMUTABLE_FL))?;
    fs.chown("/p", None, None)?;
    Ok(())
}
