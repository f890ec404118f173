//! Helpers shared by the path layer's integration tests:
//! [`check_then_fsck`] for the image tests, and the harness of the
//! `std_parity_*` tests ([`parity`]: a tmpfs directory beside a lanefs and
//! the comparisons; [`std_thread`]: std's side on a thread with a user's
//! ids or chrooted). Each test binary uses a part, hence the `dead_code`
//! allowances.

use std::io;
use std::path::Path;

use lanefs::Filesystem;

#[allow(dead_code)] // only the std_parity_* binaries, each with a part of it
pub mod parity;
#[allow(dead_code)] // only the std_parity_* binaries that run std on a thread
pub mod std_thread;

/// A seeded xorshift64 (seed not 0) for the random-operation tests, so a
/// failing seed replays.
#[allow(dead_code)] // only the binaries that draw
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// In `0..n` (`n > 0`): offsets and lengths.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// In `0..n` (`n > 0`): an index into a slice of length `n`.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

/// The engine's own check of `fs`, then, once `fs` is dropped (the caller
/// has dropped its other handles of the image), `lanefs fsck` of the image
/// at `img`, which must be clean.
#[allow(dead_code)] // the std_parity_* binaries check no image
pub fn check_then_fsck(fs: Filesystem, img: &Path) -> io::Result<()> {
    fs.core()
        .check()
        .map_err(|p| io::Error::other(format!("{p:?}")))?;
    drop(fs);
    let report = lanefs_image::fsck(img, false).map_err(io::Error::from)?;
    assert!(report.clean, "{:?} {:?}", report.problems, report.links);
    Ok(())
}

/// This process's resident size in KiB (`VmRSS`), for the tests that check
/// memory comes back (each alone in its binary, so the number is its own).
#[allow(dead_code)] // only the removed_*_memory binaries
pub fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of KiB")
}
