//! Who holds an image: the exclusive `flock` of every open, the mark of a
//! holder that is finishing, and waiting for a holder to let go.
//!
//! Every [`FileDevice`](crate::FileDevice) open (a mount's store, `fsck`,
//! `mkfs`) holds an exclusive `flock` on the image for as long as the
//! device lives (the kernel's lock on the open file description: kept
//! across the daemon's fork, dropped when the last descriptor closes, also
//! on a crash). Another open waits for it:
//! * up to [`LOCK_WAIT`] (5 s), then `EBUSY`, while the holder is working:
//!   a live mount, an `fsck`, a program with the store open. A second mount
//!   of a live image fails promptly.
//! * up to [`FINISH_WAIT`] (120 s) while the holder has set its
//!   [`FinishingMark`]: a daemon whose mount has ended (unmounted by
//!   `umount(8)`, `fusermount -u`, a signal) writing its last changes back
//!   before it exits. The kernel lets go of a FUSE mount before its daemon
//!   has finished, so `umount; mount` and `umount; fsck` met a daemon still
//!   writing; with a large write-back that took longer than 5 s and the
//!   second command failed "in use" (xfstests generic/650).
//!
//! The mark is an open-file-description (`F_OFD_SETLK`) write lock on the
//! image's first byte, taken through a descriptor of its own: `flock` and
//! record locks are independent in Linux, and nothing else takes record
//! locks on an image, so the mark conflicts only with the test of another
//! opener ([`is_finishing`], `F_OFD_GETLK`). It goes when its descriptor
//! closes: at the daemon's exit, also on a crash.
//!
//! [`wait_for_release`] is what `lanefs umount` does after the kernel let
//! go: wait until the daemon has finished and closed the image, so that
//! the image is whole and free when the command returns (a copy, an
//! `fsck`, the next mount see the last changes).
//!
//! No shared state of this process: every call works on descriptors it
//! owns; the locks are the kernel's.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use lanefs_store::{Errno, Result};

/// How long an open waits for a working holder of an image (a live mount,
/// an `fsck`) before it answers `EBUSY`.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How long an open waits for a holder that set its [`FinishingMark`] (a
/// daemon writing back after its unmount) before it answers `EBUSY`: long
/// enough for the write-back of a large cache to a slow disk.
pub const FINISH_WAIT: Duration = Duration::from_secs(120);

/// Pause between two tries of a lock.
const POLL: Duration = Duration::from_millis(20);

/// Take the exclusive `flock` of an open image, waiting for another open
/// file description to drop it ([`LOCK_WAIT`], or [`FINISH_WAIT`] while
/// the holder is finishing): `EBUSY` when it does not (the image is in
/// use).
pub(crate) fn lock_exclusive(file: &File) -> Result<()> {
    if take_waiting(file, libc::LOCK_EX, LOCK_WAIT)? {
        Ok(())
    } else {
        Err(Errno(libc::EBUSY))
    }
}

/// Take `flock(how)` on `file`, trying again while another open file
/// description holds a conflicting lock: for up to [`FINISH_WAIT`] while
/// that holder shows its [`FinishingMark`], else up to `other`. Whether
/// the lock was taken.
fn take_waiting(file: &File, how: libc::c_int, other: Duration) -> Result<bool> {
    let start = Instant::now();
    loop {
        if try_flock(file, how)? {
            return Ok(true);
        }
        let limit = if is_finishing(file) {
            FINISH_WAIT
        } else {
            other
        };
        if start.elapsed() >= limit {
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

/// One non-blocking `flock(how)`: `Ok(false)` if another open file
/// description holds a conflicting lock.
fn try_flock(file: &File, how: libc::c_int) -> Result<bool> {
    loop {
        // SAFETY: `flock` on a descriptor `file` owns and keeps open for
        // the duration of the call; it touches no memory of ours.
        let r = unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) };
        if r == 0 {
            return Ok(true);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(e) => return Err(Errno(e)),
            None => return Err(Errno::EIO),
        }
    }
}

/// The record lock that is the mark: a write lock on byte 0.
fn mark_lock(kind: libc::c_int) -> libc::flock {
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value
    // (and `l_pid` must be 0 for open-file-description locks).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = 0;
    l.l_len = 1;
    l
}

/// Whether another open file description of the image behind `file` holds
/// the [`FinishingMark`]. An error of the test counts as "no" (the shorter
/// wait).
pub fn is_finishing(file: &File) -> bool {
    let mut l = mark_lock(libc::F_WRLCK);
    // SAFETY: `fcntl(F_OFD_GETLK)` reads and writes the `flock` struct we
    // pass by pointer, which lives for the call.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) };
    r == 0 && l.l_type != libc::F_UNLCK as libc::c_short
}

/// The mark of a holder that is finishing: opened while the holder works
/// ([`FinishingMark::open`]), set when its mount has ended
/// ([`FinishingMark::set`]); it lasts until dropped (the descriptor
/// closes), at the latest when the process exits.
pub struct FinishingMark {
    file: File,
}

impl FinishingMark {
    /// Open `image` for the mark (read-write: a write lock needs it), ahead
    /// of time, so that setting it later needs no path (the daemon may
    /// have changed directory; the image may have been renamed).
    pub fn open(image: &Path) -> std::io::Result<FinishingMark> {
        let file = OpenOptions::new().read(true).write(true).open(image)?;
        Ok(FinishingMark { file })
    }

    /// Set the mark: openers now wait up to [`FINISH_WAIT`].
    pub fn set(&self) -> std::io::Result<()> {
        let l = mark_lock(libc::F_WRLCK);
        // SAFETY: `fcntl(F_OFD_SETLK)` reads the `flock` struct we pass by
        // pointer, which lives for the call; the descriptor is ours.
        let r = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &l) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// After a holder of `image` was told to stop (its mount unmounted): wait
/// until nobody holds the image, for as long as the holder shows it is
/// finishing (its [`FinishingMark`], up to [`FINISH_WAIT`]), and at most
/// `notice` for a holder without the mark (time to notice its end and set
/// it; after that the holder is someone else: a new mount, an `fsck`).
/// `Ok(true)` when the image is free, `Ok(false)` when it is still held.
pub fn wait_for_release(image: &Path, notice: Duration) -> std::io::Result<bool> {
    let file = File::open(image)?;
    let free = take_waiting(&file, libc::LOCK_SH, notice)
        .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
    // The shared lock just taken goes with `file`, closed on return.
    Ok(free)
}
