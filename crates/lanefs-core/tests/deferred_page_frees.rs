//! Pages a truncate frees are freed soon, even by a thread that pins the
//! epoch only for its truncates: writes under the data lock take no pin,
//! and the epoch collector used to run only every 128 pins, so a thread
//! that appended a megabyte between truncates held some 128 MiB of freed
//! pages waiting (`pcache::index`, `collect_now_and_then`). Its own test
//! binary: it watches the process's resident memory.

use std::sync::Arc;

use lanefs_core::*;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
/// Pages appended between two truncates (1 MiB).
const PAGES: usize = 256;
const CYCLES: usize = 200;

/// Resident memory of this process, in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn pages_freed_by_truncates_between_appends_do_not_pile_up() {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 1 << 30,
        max_inodes: 16,
    }));
    let fs = Fs::new(store, FsConfig::default()).unwrap();
    let (attr, f, _) = fs
        .open_at(&Cred::root(), ROOT_INO, b"f", CREAT, 0o644, 0, false)
        .unwrap();
    let to_zero = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    let page = vec![7u8; PAGE_SIZE];
    let cycle = |fs: &Fs| {
        for p in 0..PAGES {
            fs.write(&f, (p * PAGE_SIZE) as u64, &page).unwrap();
        }
        fs.setattr_no_attr(&Cred::root(), attr.ino, &to_zero, Some(&f))
            .unwrap();
    };
    // Warm up: the allocator's and the engine's own structures.
    for _ in 0..8 {
        cycle(&fs);
    }
    let before = resident();
    let mut peak = before;
    for _ in 0..CYCLES {
        cycle(&fs);
        peak = peak.max(resident());
    }
    let grown = peak.saturating_sub(before);
    // Waiting frees of 128 truncates would be 128 MiB; a few megabytes
    // are the allocator's slack and the collector's lag.
    assert!(
        grown < 48 << 20,
        "resident memory grew by {} MiB over {CYCLES} append/truncate cycles",
        grown >> 20
    );
}
