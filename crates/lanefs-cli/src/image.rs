//! The image commands: `lanefs mkfs`, `lanefs fsck`, and opening an image
//! for `lanefs mount`. Every failure is one line for the user; none panics.
//! No locks or atomics of its own: each command runs on one thread before
//! (or without) any file system being served.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use lanefs_core::Errno;
use lanefs_image::{
    describe_open_error, Device, FileDevice, FsckReport, Geometry, ImageConfig, ImageStore,
    RecoveryReport, BLOCK,
};

/// `lanefs fsck` exit status: no problem.
pub const FSCK_CLEAN: u8 = 0;
/// `lanefs fsck` exit status: problems found, all repaired (e2fsck's 1).
pub const FSCK_REPAIRED: u8 = 1;
/// `lanefs fsck` exit status: problems left in the image (e2fsck's 4).
pub const FSCK_UNCORRECTED: u8 = 4;
/// `lanefs fsck` exit status: could not check (e2fsck's 8).
pub const FSCK_OPERATIONAL_ERROR: u8 = 8;

/// Largest image size searched for the smallest one mkfs accepts.
const SIZE_SEARCH_MAX: u64 = 1 << 40;

#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Image file (created, or resized to --size) or block device.
    pub image: PathBuf,
    /// Image size (e.g. 64M, 2G); a block device defaults to all of it.
    #[arg(long, value_parser = crate::parse_size)]
    pub size: Option<u64>,
    /// Overwrite an existing lanefs image.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Image file or block device (not mounted).
    pub image: PathBuf,
    /// Fix what can be fixed: recover, drop unreadable inodes and the
    /// entries that name nothing; report what was dropped.
    #[arg(long)]
    pub repair: bool,
}

/// Parse `--commit-interval`: seconds, fractions allowed (`0.5`), `0` off.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim().strip_suffix('s').unwrap_or(s.trim());
    t.parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("bad interval '{s}' (seconds, e.g. 5 or 0.5; 0 turns it off)"))
}

/// Whether `dev` holds a lanefs superblock (either copy, by its magic).
fn holds_image(dev: &dyn Device) -> bool {
    let magic = b"LANEFSIM";
    let mut b = [0u8; 8];
    (0..2u64).any(|copy| {
        let off = copy * BLOCK as u64;
        off + 8 <= dev.len() && dev.read_at(&mut b, off).is_ok() && &b == magic
    })
}

/// The smallest size mkfs accepts, in bytes (the geometry needs room for
/// the superblocks, the smallest journal and one allocation group).
fn smallest_image() -> u64 {
    let (mut lo, mut hi) = (2u64, SIZE_SEARCH_MAX / BLOCK as u64);
    debug_assert!(Geometry::for_size(hi).is_ok());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if Geometry::for_size(mid).is_ok() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo * BLOCK as u64
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

pub fn cmd_mkfs(a: &MkfsArgs) -> Result<(), String> {
    let shown = a.image.display();
    let meta = std::fs::metadata(&a.image).ok();
    let is_blockdev = meta.as_ref().is_some_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_block_device()
    });
    if let Some(m) = &meta {
        if !m.is_file() && !is_blockdev {
            return Err(format!("{shown}: not a regular file or block device"));
        }
        let dev =
            FileDevice::open(&a.image).map_err(|e| format!("{shown}: {}", why_not_opened(e)))?;
        if holds_image(&dev) && !a.force {
            return Err(format!(
                "{shown} already holds a lanefs image; use --force to overwrite it"
            ));
        }
        if is_blockdev && a.size.is_some_and(|s| s > dev.len()) {
            return Err(format!(
                "{shown}: --size is larger than the device ({} bytes)",
                dev.len()
            ));
        }
    }
    let size = match (a.size, is_blockdev) {
        (Some(s), _) => s,
        (None, true) => FileDevice::open(&a.image)
            .map_err(|e| format!("{shown}: {}", io(e)))?
            .len(),
        (None, false) => return Err("give --size SIZE (e.g. 64M) for an image file".into()),
    };
    let size = size / BLOCK as u64 * BLOCK as u64;
    let geo = Geometry::for_size(size / BLOCK as u64).map_err(|_| {
        format!(
            "{} ({size} bytes) is too small for a lanefs image (at least {} bytes, {})",
            shown,
            smallest_image(),
            mib(smallest_image())
        )
    })?;
    lanefs_image::mkfs(&a.image, size).map_err(|e| format!("{shown}: {}", io(e)))?;
    tell!(
        "{shown}: lanefs image of {} ({} blocks of {BLOCK} bytes): {} allocation groups, \
         {} inodes, {} journal",
        mib(size),
        geo.total_blocks,
        geo.groups,
        geo.groups * geo.inodes_per_group,
        mib(geo.journal_blocks * BLOCK as u64),
    );
    Ok(())
}

/// An errno as the user reads it ("No such file or directory (os error 2)").
fn io(e: Errno) -> std::io::Error {
    e.into()
}

/// Why the image at `path` cannot be opened, as one line.
fn open_failure(path: &Path, e: Errno) -> String {
    let shown = path.display();
    match e {
        Errno::EUCLEAN | Errno::EIO | Errno::EINVAL => match FileDevice::open(path) {
            Ok(dev) => format!("{shown}: {}", describe_open_error(&dev)),
            Err(e) => format!("{shown}: {}", io(e)),
        },
        e => format!("{shown}: {}", why_not_opened(e)),
    }
}

/// An open error as one line; `EBUSY` (another process holds the image's
/// lock: `lanefs_image::FileDevice`) says who.
fn why_not_opened(e: Errno) -> String {
    if e == Errno(libc::EBUSY) {
        format!(
            "in use by another lanefs process (mounted, or being checked): {}",
            io(e)
        )
    } else {
        io(e).to_string()
    }
}

/// Check, without recovering, that `path` opens as a device and holds a
/// lanefs superblock: what `lanefs mount` can refuse before it forks.
pub fn check_openable(path: &Path) -> Result<(), String> {
    let dev =
        FileDevice::open(path).map_err(|e| format!("{}: {}", path.display(), why_not_opened(e)))?;
    if !holds_image(&dev) {
        return Err(format!("{}: {}", path.display(), describe_open_error(&dev)));
    }
    Ok(())
}

/// The store's share of `lanefs mount --cache-size`: a quarter (pages get
/// half, the engine's inodes a quarter). The store's objects (record, page
/// map, directory entries: about 200 bytes for a small file) sit behind the
/// engine's inode cache (about 1 KiB an inode), so a quarter holds several
/// times the inodes the engine's quarter does: a stat that misses the
/// engine's cache usually finds the object without reading the disk, and
/// directories' entries are kept here only.
pub fn store_cache_bytes(cache_size: u64) -> u64 {
    cache_size / 4
}

/// Open (and recover) the image at `path` for serving, its inode objects
/// under `cache_bytes`.
pub fn open_store(
    path: &Path,
    every: Option<Duration>,
    cache_bytes: u64,
) -> Result<Arc<ImageStore>, String> {
    let cfg = ImageConfig {
        commit_interval: every,
        cache_bytes: Some(cache_bytes),
    };
    ImageStore::open_with(path, &cfg)
        .map(Arc::new)
        .map_err(|e| open_failure(path, e))
}

/// The recovery report of a mount, as one line.
pub fn recovery_line(path: &Path, r: &RecoveryReport) -> String {
    let mut line = format!(
        "{}: recovered in {:.3} s: {} journal records replayed ({} dropped, \
         {} unlanded, at most {} held at once), {} orphans freed",
        path.display(),
        r.duration.as_secs_f64(),
        r.records_replayed,
        r.records_dropped,
        r.records_unlanded,
        r.records_held_max,
        r.orphans_freed,
    );
    if !r.bad_objects.is_empty() || !r.problems.is_empty() {
        line.push_str(&format!(
            "; {} unreadable inodes, {} problems (run lanefs fsck)",
            r.bad_objects.len(),
            r.problems.len()
        ));
    }
    line
}

fn print_report(path: &Path, r: &FsckReport) {
    tell!(
        "{}: {}: {} inodes ({} directories), {} entries, {} data pages; \
         journal: {} records replayed, {} dropped, {} unlanded, at most {} held at once; \
         {} orphans pending",
        path.display(),
        if r.clean { "clean" } else { "PROBLEMS" },
        r.inodes,
        r.directories,
        r.entries,
        r.data_pages,
        r.records_replayed,
        r.records_dropped,
        r.records_unlanded,
        r.records_held_max,
        r.orphans_pending,
    );
    for p in &r.repaired {
        tell!("repaired: {p}");
    }
    for p in r.problems.iter().chain(&r.links) {
        tell!("problem: {p}");
    }
    for n in &r.notes {
        tell!("note: {n}");
    }
}

/// The exit status for a finished check (see [`FSCK_CLEAN`] and siblings).
fn fsck_status(r: &FsckReport) -> u8 {
    match (r.clean, r.repaired.is_empty()) {
        (true, true) => FSCK_CLEAN,
        (true, false) => FSCK_REPAIRED,
        (false, _) => FSCK_UNCORRECTED,
    }
}

/// `lanefs fsck IMAGE [--repair]`. Not under a memory budget: the check
/// holds every object at once (it matches every entry against every inode),
/// as does the repair's open.
pub fn cmd_fsck(a: &FsckArgs) -> ExitCode {
    if let Err(msg) = check_openable(&a.image) {
        say!("lanefs fsck: {msg}");
        return ExitCode::from(FSCK_OPERATIONAL_ERROR);
    }
    match lanefs_image::fsck(&a.image, a.repair) {
        Ok(r) => {
            print_report(&a.image, &r);
            ExitCode::from(fsck_status(&r))
        }
        Err(e) => {
            say!("lanefs fsck: {}", open_failure(&a.image, e));
            ExitCode::from(FSCK_OPERATIONAL_ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_interval("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        assert!(parse_interval("-1").is_err());
        assert!(parse_interval("soon").is_err());
    }

    #[test]
    fn smallest_image_is_the_boundary() {
        let min = smallest_image() / BLOCK as u64;
        assert!(Geometry::for_size(min).is_ok());
        assert!(Geometry::for_size(min - 1).is_err());
    }

    #[test]
    fn fsck_status_follows_e2fsck() {
        let mut r = FsckReport {
            clean: true,
            ..FsckReport::default()
        };
        assert_eq!(fsck_status(&r), FSCK_CLEAN);
        r.repaired.push("dropped inode 9".into());
        assert_eq!(fsck_status(&r), FSCK_REPAIRED);
        r.clean = false;
        assert_eq!(fsck_status(&r), FSCK_UNCORRECTED);
    }
}
