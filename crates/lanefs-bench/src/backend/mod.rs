//! The operations a workload needs, one trait for every target.
//!
//! A workload is written once, generic over [`Backend`], and monomorphised
//! for each target, so the Rust API, syscalls and the peer libraries run
//! exactly the same operation mix with no dynamic dispatch in the timed loop.
//!
//! Paths are `/`-separated, relative to the backend's root (no leading `/`),
//! at most [`PATH_BYTES_MAX`] bytes. Each backend resolves them the way its
//! normal API does: the kernel walks them from a directory fd, the in-process
//! engine walks them component by component with `lookup`, the peers get
//! their own path types.
//!
//! There is no shared state in this module: each backend documents its own.

pub mod inproc;
#[cfg(feature = "peers")]
pub mod peers;
pub mod sys;

use std::fmt;

/// Longest relative path a workload passes to a backend, in bytes.
pub const PATH_BYTES_MAX: usize = 240;

/// An operation failed: what and why (an errno name or a library message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpError(pub String);

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl OpError {
    /// An error naming the operation and the path.
    pub fn new(op: &str, path: &str, why: impl fmt::Display) -> OpError {
        OpError(format!("{op} {path}: {why}"))
    }
}

/// Result of one backend operation.
pub type OpResult<T> = Result<T, OpError>;

/// What `stat` returns that the workloads check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub size: u64,
    pub is_dir: bool,
}

/// How [`Backend::open`] opens an existing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only.
    Read,
    /// Read and write, no truncation.
    ReadWrite,
    /// Write only, every write at end of file (`O_APPEND`).
    Append,
    /// Write only, truncate to zero on open (`O_TRUNC`); creates if absent.
    Truncate,
}

/// The operations of the workloads. One instance is one fresh file-system
/// namespace (a fresh engine, a fresh directory, a fresh peer instance);
/// worker threads share it by reference.
pub trait Backend: Sync {
    /// An open file.
    type File: Send;

    /// Short name of the backend kind, for messages.
    fn kind(&self) -> &'static str;

    /// Why this backend cannot express `workload`'s operations through its
    /// public API, or `None` if it can.
    fn unsupported(&self, workload: crate::workload::Workload) -> Option<&'static str> {
        let _ = workload;
        None
    }

    /// Make a directory (its parent exists).
    fn mkdir(&self, path: &str) -> OpResult<()>;
    /// `stat`: walk the path and read the attributes of its last component.
    fn stat(&self, path: &str) -> OpResult<Meta>;
    /// Open a directory, list every entry, close it. Returns the number of
    /// entries other than `.` and `..`.
    fn readdir(&self, path: &str) -> OpResult<usize>;
    /// Create a new empty regular file (fails if it exists) and close it.
    fn create(&self, path: &str) -> OpResult<()>;
    /// Create a new file, write `data`, `fsync` it if asked, close it.
    fn create_write(&self, path: &str, data: &[u8], fsync: bool) -> OpResult<()>;
    /// Remove a file.
    fn unlink(&self, path: &str) -> OpResult<()>;
    /// Rename `from` to `to` (`to` does not exist).
    fn rename(&self, from: &str, to: &str) -> OpResult<()>;
    /// Open a regular file.
    fn open(&self, path: &str, mode: OpenMode) -> OpResult<Self::File>;
    /// Read at `offset`; returns the bytes read.
    fn pread(&self, file: &mut Self::File, offset: u64, buf: &mut [u8]) -> OpResult<usize>;
    /// Write at `offset`; returns the bytes written.
    fn pwrite(&self, file: &mut Self::File, offset: u64, data: &[u8]) -> OpResult<usize>;
    /// Write at end of file (the file was opened with [`OpenMode::Append`]).
    fn append(&self, file: &mut Self::File, data: &[u8]) -> OpResult<usize>;
    /// `ftruncate`.
    fn truncate(&self, file: &mut Self::File, size: u64) -> OpResult<()>;
    /// Size of the file at `path`, for post-conditions (default: `stat`).
    fn file_size(&self, path: &str) -> OpResult<u64> {
        self.stat(path).map(|m| m.size)
    }
    /// Truncate the file at `path` to size 0 (untimed maintenance): open
    /// it read-write, `ftruncate`, close.
    fn reset(&self, path: &str) -> OpResult<()> {
        let mut f = self.open(path, OpenMode::ReadWrite)?;
        let r = self.truncate(&mut f, 0);
        self.close(f);
        r
    }
    /// Close a file.
    fn close(&self, file: Self::File) {
        drop(file);
    }
}
