//! The open of an `execve` ([`O_EXEC_OPEN`], the kernel's `__FMODE_EXEC`
//! in a FUSE OPEN's flags) asks for execute permission, not read
//! permission, as Linux's `may_open` with `MAY_EXEC`: a `--x` program
//! runs, a readable program without the caller's execute bit does not,
//! root needs some execute bit, and only a regular file opens so. Until
//! 2026-11 the engine checked read permission: through a mount a `0711`
//! program failed with `EACCES` for everyone but its owner, and without
//! `default_permissions` (where the kernel asks only for *some* execute
//! bit) a `0744` one ran for anyone.

use lanefs_core::*;

const EXEC: i32 = libc::O_RDONLY | O_EXEC_OPEN;

/// A root-owned file `name` with 16 bytes and permission bits `perm`.
fn program(fs: &Fs, name: &[u8], perm: u32) -> Ino {
    let root = Cred::root();
    let (a, f, _) = fs
        .open_at(
            &root,
            ROOT_INO,
            name,
            libc::O_CREAT | libc::O_RDWR,
            perm,
            0,
            false,
        )
        .unwrap();
    fs.write(&f, 0, &[9u8; 16]).unwrap();
    a.ino
}

fn err(r: Result<OpenFile>) -> Errno {
    r.map(|_| ()).unwrap_err()
}

#[test]
fn exec_open_checks_execute_not_read() {
    let fs = Fs::new_in_memory();
    let user = Cred::user(1000, 1000);
    let root = Cred::root();
    let x_only = program(&fs, b"x_only", 0o711);
    let readable = program(&fs, b"readable", 0o744);
    let private = program(&fs, b"private", 0o700);
    let no_x = program(&fs, b"no_x", 0o644);

    // Execute-only: runs, and the kernel reads the program through it.
    let f = fs.open(&user, x_only, EXEC).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), 16);
    assert_eq!(buf, [9u8; 16]);
    // A plain read-only open of it stays refused.
    assert_eq!(err(fs.open(&user, x_only, libc::O_RDONLY)), Errno::EACCES);

    // Readable but not executable for others: refused.
    assert_eq!(err(fs.open(&user, readable, EXEC)), Errno::EACCES);
    assert!(fs.open(&user, readable, libc::O_RDONLY).is_ok());
    assert_eq!(err(fs.open(&user, private, EXEC)), Errno::EACCES);

    // Root: any execute bit will do, none is EACCES.
    assert!(fs.open(&root, private, EXEC).is_ok());
    assert_eq!(err(fs.open(&root, no_x, EXEC)), Errno::EACCES);

    // Only a regular file (`may_open`: a directory with MAY_EXEC).
    assert_eq!(err(fs.open(&root, ROOT_INO, EXEC)), Errno::EACCES);
}
