//! The handler's IOCTL: the inode flags (`chattr`/`lsattr`), the only
//! ioctls a lanefs file answers. The kernel sends them from
//! `fuse_fileattr_get/set` (fs/fuse/ioctl.c), for `FS_IOC_GETFLAGS`,
//! `FS_IOC_SETFLAGS`, `FS_IOC_FSGETXATTR` and `FS_IOC_FSSETXATTR` on a
//! regular file or a directory: on a handle it opens read-only for the
//! call (OPEN or OPENDIR, then RELEASE), as the caller, with the caller's
//! credentials in the header; restricted (no `FUSE_IOCTL_UNRESTRICTED`,
//! so no retry dance), `FUSE_IOCTL_DIR` for a directory. The flag word
//! travels as an `int` (4 bytes in and out), although the command's
//! number says `long`; `struct fsxattr` as its 28 bytes. The kernel checks
//! ownership and `CAP_LINUX_IMMUTABLE` only on its own inode's flags (it
//! has none of ours), so the engine's checks decide ([`Fs::set_flags`]).
//! Every other command (a user's ioctl on a lanefs file) is `ENOTTY`, as
//! tmpfs answers one it does not know. A set moves the ctime, which the
//! kernel learns only from an invalidation of the inode's attributes
//! (sent before the reply). A child module of `handler`; same
//! locking rules (none held across engine calls).
//!
//! [`Fs::set_flags`]: lanefs_core::Fs::set_flags

use lanefs_core::iflags::{FlagsSet, FsxAttr};
use lanefs_core::{Errno, Ino, Result};

use super::Handler;
use crate::cred::{cred_for, Caller};

/// `FS_IOC_GETFLAGS`: `_IOR('f', 1, long)`.
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS`: `_IOW('f', 2, long)`.
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC32_GETFLAGS`: `_IOR('f', 1, int)` (a 32-bit caller's).
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
/// `FS_IOC32_SETFLAGS`: `_IOW('f', 2, int)`.
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `FS_IOC_FSGETXATTR`: `_IOR('X', 31, struct fsxattr)`.
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR`: `_IOW('X', 32, struct fsxattr)`.
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

impl Handler {
    /// IOCTL `cmd` on `ino` with `input` (the kernel's `in_size` bytes):
    /// the bytes to answer after `fuse_ioctl_out` (at most `out_size`).
    pub fn ioctl(
        &self,
        caller: &Caller,
        ino: Ino,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<Vec<u8>> {
        let answer = |b: &[u8]| {
            if (out_size as usize) < b.len() {
                return Err(Errno::EINVAL);
            }
            Ok(b.to_vec())
        };
        let set = |what: FlagsSet| {
            let r = self.fs.set_flags(&cred_for(caller), ino, what);
            let r = self.durable(self.config.sync_writes, r, |_| None);
            if r.is_ok() {
                // The ctime moved, and the kernel, which sent no SETATTR,
                // would go on answering `stat` with the one it cached.
                self.attrs_changed(ino);
            }
            r.map(|_| Vec::new())
        };
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => answer(&self.fs.get_flags(ino)?.to_ne_bytes()),
            FS_IOC_FSGETXATTR => answer(&FsxAttr::of_flags(self.fs.get_flags(ino)?).to_bytes()),
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                let word = input.get(..4).ok_or(Errno::EINVAL)?;
                let flags = u32::from_ne_bytes(word.try_into().map_err(|_| Errno::EINVAL)?);
                set(FlagsSet::Flags(flags))
            }
            FS_IOC_FSSETXATTR => set(FlagsSet::Fsx(
                FsxAttr::from_bytes(input).ok_or(Errno::EINVAL)?,
            )),
            _ => Err(Errno::ENOTTY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command numbers as the kernel's `_IOR`/`_IOW` make them.
    #[test]
    fn command_numbers() {
        let ioc =
            |dir: u32, ty: u8, nr: u32, size: u32| dir << 30 | size << 16 | (ty as u32) << 8 | nr;
        assert_eq!(FS_IOC_GETFLAGS, ioc(2, b'f', 1, 8));
        assert_eq!(FS_IOC_SETFLAGS, ioc(1, b'f', 2, 8));
        assert_eq!(FS_IOC32_GETFLAGS, ioc(2, b'f', 1, 4));
        assert_eq!(FS_IOC32_SETFLAGS, ioc(1, b'f', 2, 4));
        assert_eq!(FS_IOC_FSGETXATTR, ioc(2, b'X', 31, FsxAttr::SIZE as u32));
        assert_eq!(FS_IOC_FSSETXATTR, ioc(1, b'X', 32, FsxAttr::SIZE as u32));
    }
}
