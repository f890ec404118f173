//! The memory of a removed file's extended attributes comes back when the
//! file is freed: a loop that gives files large xattrs and removes them
//! stays flat. Alone in its test binary, so that the process's resident
//! size is this test's alone.
//!
//! Before: a freed inode kept its record's xattrs until its memory went,
//! and that waits — the LRU entry of a freed inode stays among the dead
//! until they outnumber the cached inodes (at least 1024) — so up to 1024
//! removed files' values stayed allocated (here 1024 × 128 KiB).

mod common;

use common::resident_kib;
use lanefs::Filesystem;

const FILES: usize = 100;
const ROUNDS: usize = 12;
const VALUE: usize = 64 * 1024;

#[test]
fn giving_files_large_xattrs_and_removing_them_stays_flat() {
    let fs = Filesystem::new_in_memory().unwrap();
    let value = vec![0xa5u8; VALUE];
    let mut start = None;
    for round in 0..ROUNDS {
        for i in 0..FILES {
            let p = format!("/f{i}");
            fs.write(&p, b"").unwrap();
            fs.set_xattr(&p, b"user.a", &value, 0).unwrap();
            fs.set_xattr(&p, b"user.b", &value, 0).unwrap();
        }
        for i in 0..FILES {
            fs.remove_file(format!("/f{i}")).unwrap();
        }
        // The first round's resident size is the baseline: one round's
        // values, which the allocator keeps for the next.
        if round == 0 {
            start = Some(resident_kib());
        }
    }
    let grown_mib = resident_kib().saturating_sub(start.unwrap()) / 1024;
    let round_mib = (FILES * 2 * VALUE) as u64 >> 20;
    // A round's worth more at most (an epoch's deferred frees), never one
    // per round.
    assert!(
        grown_mib <= 2 * round_mib,
        "resident size grew by {grown_mib} MiB over {ROUNDS} rounds of {round_mib} MiB of xattrs"
    );
}
