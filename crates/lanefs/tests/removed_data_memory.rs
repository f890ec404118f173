//! The memory of a removed file's pages comes back for the next file: a
//! loop that writes a file and removes it stays flat. Alone in its test
//! binary, so that the process's resident size is this test's alone.
//!
//! Before: the file's whole page tree was one deferred free, counted as
//! one towards the next collection (every 256 frees a thread defers), so it
//! waited in the thread's bag while the thread went on writing — each round
//! kept its file's pages (here 10 × 32 MiB).

mod common;

use common::resident_kib;
use lanefs::{Filesystem, OpenOptions};

const FILE_MIB: u64 = 32;
const ROUNDS: usize = 10;

#[test]
fn writing_and_removing_a_file_in_a_loop_stays_flat() {
    let fs = Filesystem::new_in_memory().unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    let mut start = None;
    for round in 0..ROUNDS {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .open(&fs, "/big")
            .unwrap();
        for mib in 0..FILE_MIB {
            f.write_all_at(&chunk, mib << 20).unwrap();
        }
        drop(f);
        fs.remove_file("/big").unwrap();
        // The first round's resident size is the baseline: one file's
        // pages, which the allocator keeps for the next.
        if round == 0 {
            start = Some(resident_kib());
        }
    }
    let grown_mib = resident_kib().saturating_sub(start.unwrap()) / 1024;
    // Freed pages are reused: at most a couple of files' worth more (a
    // removed file is freed an epoch later, so the next one may be written
    // before it), never one per round.
    assert!(
        grown_mib <= 3 * FILE_MIB,
        "resident size grew by {grown_mib} MiB over {ROUNDS} rounds of a {FILE_MIB} MiB file"
    );
}
