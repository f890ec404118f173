//! `lanefs umount MNT`: `umount2(MNT)`, retrying `EBUSY` for a moment
//! while nothing holds the mount for long.
//!
//! `umount2` answers `EBUSY` while anything references the mount: an open
//! file, a working or root directory, a file mapping, a mount under it.
//! Some references are only passing, and a caller that has closed every
//! file of its own can still meet them: a process between fork and exec
//! holds a copy of its parent's file table, close-on-exec files included,
//! until its exec (in a multithreaded program — a test harness running
//! tests in parallel, a server — the file one thread just closed can
//! still be open in the child another thread is starting, for as long as
//! a loaded machine takes to run that child); a reader of
//! `/proc/PID/fd/N` or `/proc/PID/fdinfo/N` (`lsof`, a test waiting for a
//! daemon to let go of its image) holds that file for a moment. FUSE's
//! own RELEASE, sent after close(2) returns, is not among them: the kernel
//! keeps the inode, not the mount, until the daemon answers it.
//!
//! So on `EBUSY` (not with `-z`, which detaches whatever holds it) this
//! looks for the holders it can see: every process's open files
//! (`/proc/PID/fdinfo/N`'s `mnt_id`), working and root directories
//! (`/proc/PID/cwd`, `/proc/PID/root`), file mappings (`/proc/PID/maps`),
//! and mounts under the mount point. A mount under it, or a process
//! still holding the mount [`GRACE`] after it was first seen holding it
//! (by any of those, not necessarily the same file: a program busy on
//! the mount opens and closes), is a real holder: `EBUSY` then, as
//! `umount(8)` would answer (after about a second). Else it
//! tries again, at growing intervals, for up to [`RETRY_FOR`]; a holder
//! it cannot see (another mount namespace, the kernel's own: a loop
//! device over a file on the mount) thus costs that long before the
//! `EBUSY`. (This scan, like `lsof`'s, reads /proc/PID/maps, which waits
//! for a process's memory map lock: a process stuck in a page fault on a
//! hung mount can stall it, killably.)
//!
//! After the unmount (not `-z`), `cmd_umount` waits for the daemon of an
//! image mount to let go of the image ([`image_of`] finds it from the
//! mount's source; `lanefs_image::wait_for_release`): the kernel lets go
//! of a FUSE mount before its daemon has written everything back.
//!
//! No shared state: one thread.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest time `EBUSY` is retried while no holder has lasted [`GRACE`].
pub const RETRY_FOR: Duration = Duration::from_secs(3);
/// A process seen holding the mount this long is a real holder (an open
/// file, a shell's working directory), not a child between fork and exec
/// or a reader of /proc. A second: on a loaded machine a child can take
/// a few hundred milliseconds from fork to exec (200 ms failed one round
/// in 50 of `umount_right_after_close` under the full test suite).
pub const GRACE: Duration = Duration::from_secs(1);
/// First pause between tries; it doubles up to [`PAUSE_MAX`].
const PAUSE_FIRST: Duration = Duration::from_millis(5);
const PAUSE_MAX: Duration = Duration::from_millis(100);

/// Unmount `mnt` (canonical; a FUSE mount point) as
/// [`lanefs_fuse::unmount`] does, retrying a passing `EBUSY` (see the
/// module doc).
pub fn unmount(mnt: &Path, lazy: bool) -> io::Result<()> {
    let started = Instant::now();
    let mut pause = PAUSE_FIRST;
    // Each process that held the mount in the last scan, with when it
    // was first seen holding it (in that scan and every one since).
    let mut seen: HashMap<u32, Instant> = HashMap::new();
    loop {
        let e = match lanefs_fuse::unmount(mnt, lazy) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if lazy || e.raw_os_error() != Some(libc::EBUSY) || started.elapsed() >= RETRY_FOR {
            return Err(e);
        }
        // Not in mountinfo any more (unmounted meanwhile): the next try
        // says so.
        if let Some(m) = Mount::at(mnt) {
            if m.has_submounts {
                return Err(e);
            }
            let now = Instant::now();
            let holders = holders(&m);
            seen.retain(|pid, _| holders.contains(pid));
            for pid in holders {
                seen.entry(pid).or_insert(now);
            }
            if seen
                .values()
                .any(|&first| now.duration_since(first) >= GRACE)
            {
                return Err(e);
            }
        }
        let left = RETRY_FOR.saturating_sub(started.elapsed());
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(PAUSE_MAX);
    }
}

/// The image a lanefs mount at `mnt` serves, by its source (`lanefs
/// mount` makes it the image's canonical path unless `-o fsname=` says
/// otherwise): an absolute path naming a regular file or block device.
pub fn image_of(mnt: &Path) -> Option<PathBuf> {
    let m = Mount::at(mnt)?;
    let p = PathBuf::from(&m.source);
    let ft = std::fs::metadata(&p).ok()?.file_type();
    use std::os::unix::fs::FileTypeExt;
    (p.is_absolute() && (ft.is_file() || ft.is_block_device())).then_some(p)
}

/// The mountinfo facts about the mount at `mnt` that [`holders`] needs.
struct Mount {
    path: PathBuf,
    id: u64,
    /// Device (major, minor) of its files.
    dev: (u32, u32),
    /// Whether another mount sits under it (its parent ID is this one's).
    has_submounts: bool,
    /// Its source (`fsname=`): an image mount's image path by default.
    source: String,
}

impl Mount {
    /// The FUSE mount on top at `mnt`, from /proc/self/mountinfo.
    fn at(mnt: &Path) -> Option<Mount> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        Self::parse(&info, mnt)
    }

    fn parse(info: &str, mnt: &Path) -> Option<Mount> {
        let lines: Vec<InfoLine<'_>> = info.lines().filter_map(InfoLine::parse).collect();
        let want = mnt.to_string_lossy();
        let top = lines
            .iter()
            .rev()
            .find(|l| l.path == want && l.fstype.starts_with("fuse"))?;
        Some(Mount {
            path: mnt.to_path_buf(),
            id: top.id,
            dev: top.dev,
            has_submounts: lines.iter().any(|l| l.parent == top.id && l.id != top.id),
            source: top.source.clone(),
        })
    }
}

/// The fields of one mountinfo line that [`Mount::parse`] reads.
struct InfoLine<'a> {
    id: u64,
    parent: u64,
    dev: (u32, u32),
    path: String,
    fstype: &'a str,
    source: String,
}

impl<'a> InfoLine<'a> {
    fn parse(l: &'a str) -> Option<InfoLine<'a>> {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        let (maj, min) = f.get(2)?.split_once(':')?;
        Some(InfoLine {
            id: f.first()?.parse().ok()?,
            parent: f.get(1)?.parse().ok()?,
            dev: (maj.parse().ok()?, min.parse().ok()?),
            path: crate::watch::unescape_mountinfo(f.get(4)?),
            fstype: f.get(sep + 1)?,
            source: crate::watch::unescape_mountinfo(f.get(sep + 2)?),
        })
    }
}

/// The processes that /proc shows holding `m` now, by an open file, a
/// working or root directory or a file mapping (of the processes this one
/// may inspect: all of them as root).
fn holders(m: &Mount) -> HashSet<u32> {
    let mut found = HashSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    let mnt_id = format!("{}", m.id);
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let dir = p.path();
        let file_open = || {
            std::fs::read_dir(dir.join("fdinfo")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_to_string(fd.path()).is_ok_and(|t| {
                        t.lines()
                            .any(|l| l.strip_prefix("mnt_id:").map(str::trim) == Some(&mnt_id))
                    })
                })
            })
        };
        // readlink only: following the link would ask the daemon.
        let inside =
            |link: &str| std::fs::read_link(dir.join(link)).is_ok_and(|t| t.starts_with(&m.path));
        let mapped = || {
            std::fs::read_to_string(dir.join("maps"))
                .is_ok_and(|maps| maps.lines().any(|l| maps_dev(l) == Some(m.dev)))
        };
        if file_open() || inside("cwd") || inside("root") || mapped() {
            found.insert(pid);
        }
    }
    found
}

/// The device of a /proc/PID/maps line (`major:minor` in hex, the fourth
/// field); `None` for anonymous mappings (device 0:0) and bad lines.
fn maps_dev(line: &str) -> Option<(u32, u32)> {
    let (maj, min) = line.split_ascii_whitespace().nth(3)?.split_once(':')?;
    let dev = (
        u32::from_str_radix(maj, 16).ok()?,
        u32::from_str_radix(min, 16).ok()?,
    );
    (dev != (0, 0)).then_some(dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_and_maps() {
        let info = "22 1 0:21 / /proc rw - proc proc rw\n\
                    40 1 0:45 / /tmp/a\\040b rw - fuse.lanefs lanefs rw\n\
                    41 40 0:46 / /tmp/a\\040b/sub rw - tmpfs none rw\n\
                    42 1 0:47 / /tmp/c rw - fuse.lanefs lanefs rw\n";
        let m = Mount::parse(info, Path::new("/tmp/a b")).unwrap();
        assert_eq!((m.id, m.dev, m.has_submounts), (40, (0, 45), true));
        assert_eq!(m.source, "lanefs");
        let m = Mount::parse(info, Path::new("/tmp/c")).unwrap();
        assert_eq!((m.id, m.dev, m.has_submounts), (42, (0, 47), false));
        assert!(Mount::parse(info, Path::new("/proc")).is_none(), "not FUSE");
        assert_eq!(
            maps_dev("7f00-7f01 r--p 00000000 00:2d 12  /tmp/a b/f (deleted)"),
            Some((0, 45))
        );
        assert_eq!(maps_dev("7f00-7f01 rw-p 00000000 00:00 0 "), None);
        assert_eq!(maps_dev("garbage"), None);
    }
}
