//! The memory of removed files' inodes comes back for the next files: with
//! many files cached under the default inode budget (a million), removing
//! just under half of them and creating as many again stays flat. Alone in
//! its test binary, so that the process's resident size is this test's
//! alone.
//!
//! Before: the LRU entry of a freed inode kept its whole inode (about
//! 1 KiB) until the freed outnumbered the cached inodes, so removing 49,000
//! of 100,000 cached files kept all 49,000 inodes and the new files' inodes
//! took fresh memory (about 50 MiB more). Now each free takes its entry
//! out where it sits, in batches of 32 per LRU shard.

mod common;

use common::resident_kib;
use lanefs::Filesystem;

const FILES: usize = 100_000;
/// Just under half: the purge by count alone would not have run yet.
const REMOVED: usize = FILES / 2 - 1_000;

#[test]
fn removing_cached_files_and_creating_as_many_stays_flat() {
    let fs = Filesystem::new_in_memory().unwrap();
    fs.create_dir("/d").unwrap();
    for i in 0..FILES {
        fs.write(format!("/d/f{i}"), b"").unwrap();
    }
    let start = resident_kib();
    for i in 0..REMOVED {
        fs.remove_file(format!("/d/f{i}")).unwrap();
    }
    for i in 0..REMOVED {
        fs.write(format!("/d/g{i}"), b"").unwrap();
    }
    let grown_mib = resident_kib().saturating_sub(start) / 1024;
    assert!(
        grown_mib <= 16,
        "resident size grew by {grown_mib} MiB removing {REMOVED} of {FILES} cached files \
         and creating as many"
    );
}
