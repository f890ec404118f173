//! POSIX ACLs on an image: an access ACL, a default ACL and what a create
//! inherited from it are kept in the inode records' extended attributes,
//! so they, and the modes kept in step with them, are there after the
//! image is opened again, and still decide who gets in (through the path
//! layer's walk and opens); the engine's check and fsck agree.

use std::io;

use lanefs::{Cred, Filesystem};

mod common;
use common::check_then_fsck;

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";
const U: u32 = u32::MAX;

#[test]
fn acls_survive_reopen_and_fsck() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    let fs = Filesystem::create_image(&img, 64 << 20)?;
    fs.create_dir("/d")?;
    // /d: user 1000 may search and write, nobody else but root.
    let d_acl = lanefs::posix_acl_xattr(&[
        (1, 7, U),
        (2, 7, 1000),
        (4, 0, U),
        (0x10, 7, U),
        (0x20, 0, U),
    ]);
    fs.set_xattr("/d", ACCESS, &d_acl, 0)?;
    let dflt = lanefs::posix_acl_xattr(&[
        (1, 7, U),
        (2, 6, 1000),
        (4, 4, U),
        (0x10, 6, U),
        (0x20, 0, U),
    ]);
    fs.set_xattr("/d", DEFAULT, &dflt, 0)?;
    // Inherited (umask 022 not applied): 0666 masked by the default ACL.
    fs.write("/d/f", b"data")?;
    fs.create_dir("/d/sub")?;
    fs.set_permissions("/d/f", 0o640)?;
    let f_acl = fs.get_xattr("/d/f", ACCESS)?;
    assert_eq!(
        f_acl,
        lanefs::posix_acl_xattr(&[
            (1, 6, U),
            (2, 6, 1000),
            (4, 4, U),
            (0x10, 4, U),
            (0x20, 0, U)
        ])
    );
    fs.sync()?;
    drop(fs);

    let fs = Filesystem::open_image(&img)?;
    assert_eq!(fs.get_xattr("/d", ACCESS)?, d_acl);
    assert_eq!(fs.get_xattr("/d", DEFAULT)?, dflt);
    assert_eq!(fs.get_xattr("/d/f", ACCESS)?, f_acl);
    assert_eq!(fs.get_xattr("/d/sub", DEFAULT)?, dflt);
    assert_eq!(fs.metadata("/d")?.permissions(), 0o770);
    assert_eq!(fs.metadata("/d/f")?.permissions(), 0o640);
    assert_eq!(
        fs.metadata("/d/sub")?.permissions(),
        0o760,
        "the mask is rw-"
    );
    // Who gets in is still the ACLs' answer.
    let named = fs.with_cred(Cred::user(1000, 1000));
    let group = fs.with_cred(Cred::user(1001, 0));
    assert_eq!(named.read("/d/f")?, b"data");
    assert_eq!(
        group.read("/d/f").unwrap_err().raw_os_error(),
        Some(libc::EACCES),
        "the owning group's entry of /d has nothing"
    );
    named.write("/d/g", b"x")?;
    assert_eq!(named.get_xattr("/d/g", ACCESS)?.len(), 4 + 5 * 8);
    drop((named, group));
    check_then_fsck(fs, &img)
}
