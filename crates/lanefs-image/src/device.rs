//! Devices: where an image's bytes live.
//!
//! [`FileDevice`] is an image file or a block device opened read-write;
//! positioned reads and writes (`pread`/`pwrite`) need no lock, and `flush`
//! is `fdatasync`. Each open holds an exclusive `flock` on the file for as
//! long as the device lives, so that a second opener (another `lanefs
//! mount` of the same image, `fsck` or `mkfs --force` of a mounted one)
//! waits for it and then gets `EBUSY` (how long: [`crate::holder`])
//! instead of writing beside the first. [`MemDevice`] keeps an image in memory (tests, fuzzing):
//! its one mutex protects the byte vector and is held only for a copy.
//! The crash-testing device lives in [`crate::crash`].

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use lanefs_store::{Errno, Result};
use parking_lot::Mutex;

/// A byte-addressed device with a durability barrier.
pub trait Device: Send + Sync + 'static {
    /// Size in bytes.
    fn len(&self) -> u64;
    /// Fill `buf` from offset `off`; `EIO` past the end.
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()>;
    /// Write `buf` at `off`; `EIO` past the end. Not durable until `flush`.
    fn write_at(&self, buf: &[u8], off: u64) -> Result<()>;
    /// Make every write that returned before this call durable.
    fn flush(&self) -> Result<()>;
    /// Whether the device holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An image file or block device.
pub struct FileDevice {
    file: File,
    len: u64,
    /// Made by `create` as a regular file truncated to its length: every
    /// byte reads as zero (and is a hole) until written.
    zeroed: bool,
}

impl FileDevice {
    /// Open `path` read-write. A block device's size is found by seeking.
    pub fn open(path: &Path) -> Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        crate::holder::lock_exclusive(&file)?;
        let len = device_len(&file)?;
        Ok(FileDevice {
            file,
            len,
            zeroed: false,
        })
    }

    /// Create (or truncate) a regular file of `len` bytes.
    pub fn create(path: &Path, len: u64) -> Result<FileDevice> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // Before anything is truncated: never under a live mount.
        crate::holder::lock_exclusive(&file)?;
        let meta = file.metadata()?;
        if meta.file_type().is_file() {
            file.set_len(0)?;
            file.set_len(len)?;
            return Ok(FileDevice {
                file,
                len,
                zeroed: true,
            });
        }
        let have = device_len(&file)?;
        if have < len {
            return Err(Errno::ENOSPC);
        }
        Ok(FileDevice {
            file,
            len,
            zeroed: false,
        })
    }

    /// Whether every byte is known to read as zero: a regular file
    /// `create` has just truncated, and nothing written since (mkfs).
    pub(crate) fn zeroed(&self) -> bool {
        self.zeroed
    }
}

fn device_len(file: &File) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.file_type().is_file() {
        return Ok(meta.len());
    }
    let mut f = file;
    let len = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    Ok(len)
}

fn in_bounds(len: u64, off: u64, n: usize) -> Result<()> {
    match off.checked_add(n as u64) {
        Some(end) if end <= len => Ok(()),
        _ => Err(Errno::EIO),
    }
}

impl Device for FileDevice {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        in_bounds(self.len, off, buf.len())?;
        self.file.read_exact_at(buf, off)?;
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<()> {
        in_bounds(self.len, off, buf.len())?;
        self.file.write_all_at(buf, off)?;
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.file.sync_data()?;
        Ok(())
    }
}

/// An image in memory; every write is durable at once.
pub struct MemDevice {
    bytes: Mutex<Vec<u8>>,
}

impl MemDevice {
    pub fn new(len: usize) -> MemDevice {
        MemDevice::from_bytes(vec![0; len])
    }
    pub fn from_bytes(bytes: Vec<u8>) -> MemDevice {
        MemDevice {
            bytes: Mutex::new(bytes),
        }
    }
    /// A copy of the image.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().clone()
    }
}

impl Device for MemDevice {
    fn len(&self) -> u64 {
        self.bytes.lock().len() as u64
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        let b = self.bytes.lock();
        in_bounds(b.len() as u64, off, buf.len())?;
        buf.copy_from_slice(&b[off as usize..off as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<()> {
        let mut b = self.bytes.lock();
        in_bounds(b.len() as u64, off, buf.len())?;
        b[off as usize..off as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
