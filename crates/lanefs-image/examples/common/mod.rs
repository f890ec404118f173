//! What the image examples share (a module, not an example: Cargo builds
//! only `examples/*.rs` and `examples/*/main.rs` as examples).

use lanefs_store::{FileKind, Ino, InodeRecord, Timespec, ROOT_INO};

/// A record as the examples write it straight into a store: a fixed time,
/// mode 0644, a directory under the root with its two links, a file with
/// one link and no parent (as the engine keeps a non-directory's).
pub fn rec(ino: Ino, kind: FileKind) -> InodeRecord {
    let t = Timespec {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let dir = kind == FileKind::Directory;
    InodeRecord {
        ino,
        generation: 1,
        kind,
        perm: 0o644,
        nlink: if dir { 2 } else { 1 },
        atime: t,
        mtime: t,
        ctime: t,
        btime: t,
        parent: if dir { ROOT_INO } else { 0 },
        next_cookie: 3,
        ..InodeRecord::default()
    }
}
