//! The memory of a removed symlink's target comes back when the link is
//! freed: symlinks made and removed next to many cached files stay flat.
//! Alone in its test binary, so that the process's resident size is this
//! test's alone.
//!
//! Before: a freed inode kept its target until its memory went, and that
//! waits — the LRU entry of a freed inode stays among the dead until they
//! outnumber the cached inodes — so with 20,000 files cached, 20,000
//! removed links' targets (4,000 bytes each here) stayed allocated.

mod common;

use common::resident_kib;
use lanefs::Filesystem;

const CACHED: usize = 20_000;
const LINKS: usize = 5_000;
const ROUNDS: usize = 8;
const TARGET: usize = 4_000;

#[test]
fn making_and_removing_symlinks_among_cached_files_stays_flat() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/cached").unwrap();
    for i in 0..CACHED {
        fs.write(format!("/cached/f{i}"), b"").unwrap();
    }
    let target = "t".repeat(TARGET);
    let mut start = None;
    for round in 0..ROUNDS {
        for i in 0..LINKS {
            fs.symlink(&target, format!("/s{i}")).unwrap();
        }
        for i in 0..LINKS {
            fs.remove_file(format!("/s{i}")).unwrap();
        }
        // The first round's resident size is the baseline: one round's
        // links, which the allocator keeps for the next.
        if round == 0 {
            start = Some(resident_kib());
        }
    }
    let grown_mib = resident_kib().saturating_sub(start.unwrap()) / 1024;
    let round_mib = (LINKS * TARGET) as u64 >> 20;
    // A round's targets more at most, and the freed links' own memory
    // waiting on the LRU (about 1 KiB each: a few hundred since frees take
    // their entries out, `InodeLru::note_freed`; up to as many as the
    // cached files, 20 MiB here, before); never one round's targets per
    // round.
    assert!(
        grown_mib <= 2 * round_mib,
        "resident size grew by {grown_mib} MiB over {ROUNDS} rounds of {round_mib} MiB of targets"
    );
}
