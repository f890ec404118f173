//! Peer libraries, in process, each through its normal public API:
//! `vfs` 0.13 (`MemoryFS` behind `VfsPath`) and `rsfs` 0.4 (`mem::FS`).
//!
//! What each peer does not do (read the comparison with this in mind; it is
//! repeated in docs/BENCHMARKS.md):
//!
//! * `vfs::MemoryFS` keeps one `HashMap` from full path string to file behind
//!   one `RwLock`. No inodes, permissions, owners, link counts, hard links or
//!   symlinks; no in-place overwrite (`create_file` truncates) and no
//!   truncate, so DWOL, DWOM and DWTL are n/a; no fsync (FSMARK_SYNC n/a).
//!   `open_file` hands out a snapshot of the contents, so reads through an
//!   open file never touch the lock (and never see later writes); a write
//!   handle buffers privately and publishes the whole file on `flush`, so an
//!   append costs a copy of the whole file. `read_dir` scans every path in
//!   the map. `move_file` is copy + remove (MemoryFS has no rename).
//! * `rsfs::mem::FS` keeps the whole tree behind one `Mutex`
//!   (`Arc<Mutex<FileSystem>>`); each file's data sits behind its own
//!   `RwLock`, so reads and writes through an open file skip the tree lock.
//!   Permission bits are kept but no owners, link counts or timestamps
//!   beyond what `Metadata` shows; `sync_all` does nothing (no store).
//!   Bug found by the post-conditions: `set_len` and `O_TRUNC` do not
//!   update the length `metadata` reports (rsfs 0.4.1), so the DWTL / DWAL
//!   checks read the size through the file instead.
//!
//! Shared state: the peer instance itself; its locks are the peer's own.

use super::{Backend, Meta, OpError, OpResult, OpenMode, PATH_BYTES_MAX};
use crate::workload::Workload;
use std::io::{Read, Seek, SeekFrom, Write};

/// `vfs` 0.13 `MemoryFS`.
pub struct VfsPeer {
    root: vfs::VfsPath,
}

impl VfsPeer {
    /// A fresh, empty `MemoryFS`.
    pub fn new() -> VfsPeer {
        VfsPeer {
            root: vfs::VfsPath::new(vfs::MemoryFS::new()),
        }
    }

    fn path(&self, op: &str, path: &str) -> OpResult<vfs::VfsPath> {
        self.root.join(path).map_err(|e| OpError::new(op, path, e))
    }
}

impl Default for VfsPeer {
    fn default() -> Self {
        VfsPeer::new()
    }
}

/// An open `vfs` file: a reader snapshot or a buffered writer.
pub enum VfsFile {
    Read(Box<dyn vfs::SeekAndRead + Send>),
    Write(Box<dyn vfs::SeekAndWrite + Send>),
}

impl Backend for VfsPeer {
    type File = VfsFile;

    fn kind(&self) -> &'static str {
        "vfs"
    }

    fn unsupported(&self, workload: Workload) -> Option<&'static str> {
        match workload {
            Workload::Dwol | Workload::Dwom => {
                Some("vfs has no in-place overwrite (create_file truncates)")
            }
            Workload::Dwtl => Some("vfs has no truncate"),
            Workload::FsmarkSync => Some("vfs has no fsync"),
            _ => None,
        }
    }

    fn mkdir(&self, path: &str) -> OpResult<()> {
        self.path("mkdir", path)?
            .create_dir()
            .map_err(|e| OpError::new("mkdir", path, e))
    }

    fn stat(&self, path: &str) -> OpResult<Meta> {
        let m = self
            .path("stat", path)?
            .metadata()
            .map_err(|e| OpError::new("stat", path, e))?;
        Ok(Meta {
            size: m.len,
            is_dir: m.file_type == vfs::VfsFileType::Directory,
        })
    }

    fn readdir(&self, path: &str) -> OpResult<usize> {
        Ok(self
            .path("readdir", path)?
            .read_dir()
            .map_err(|e| OpError::new("readdir", path, e))?
            .count())
    }

    fn create(&self, path: &str) -> OpResult<()> {
        let p = self.path("create", path)?;
        if p.exists().map_err(|e| OpError::new("create", path, e))? {
            return Err(OpError::new("create", path, "exists"));
        }
        let f = p
            .create_file()
            .map_err(|e| OpError::new("create", path, e))?;
        drop(f);
        Ok(())
    }

    fn create_write(&self, path: &str, data: &[u8], fsync: bool) -> OpResult<()> {
        if fsync {
            return Err(OpError::new("fsync", path, "not supported by vfs"));
        }
        let p = self.path("create", path)?;
        if p.exists().map_err(|e| OpError::new("create", path, e))? {
            return Err(OpError::new("create", path, "exists"));
        }
        let mut f = p
            .create_file()
            .map_err(|e| OpError::new("create", path, e))?;
        f.write_all(data)
            .and_then(|_| f.flush())
            .map_err(|e| OpError::new("write", path, e))
    }

    fn unlink(&self, path: &str) -> OpResult<()> {
        self.path("unlink", path)?
            .remove_file()
            .map_err(|e| OpError::new("unlink", path, e))
    }

    fn rename(&self, from: &str, to: &str) -> OpResult<()> {
        let a = self.path("rename", from)?;
        let b = self.path("rename", to)?;
        a.move_file(&b).map_err(|e| OpError::new("rename", from, e))
    }

    fn open(&self, path: &str, mode: OpenMode) -> OpResult<VfsFile> {
        let p = self.path("open", path)?;
        let r = match mode {
            OpenMode::Read => p.open_file().map(VfsFile::Read),
            OpenMode::Append => p.append_file().map(VfsFile::Write),
            OpenMode::Truncate => p.create_file().map(VfsFile::Write),
            OpenMode::ReadWrite => {
                return Err(OpError::new("open", path, "vfs has no read-write open"))
            }
        };
        r.map_err(|e| OpError::new("open", path, e))
    }

    fn pread(&self, file: &mut VfsFile, offset: u64, buf: &mut [u8]) -> OpResult<usize> {
        match file {
            VfsFile::Read(r) => {
                r.seek(SeekFrom::Start(offset))
                    .map_err(|e| OpError::new("seek", "(file)", e))?;
                let mut got = 0;
                while got < buf.len() {
                    let n = r
                        .read(&mut buf[got..])
                        .map_err(|e| OpError::new("read", "(file)", e))?;
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                Ok(got)
            }
            VfsFile::Write(_) => Err(OpError::new("read", "(file)", "opened for writing")),
        }
    }

    fn pwrite(&self, _file: &mut VfsFile, _offset: u64, _data: &[u8]) -> OpResult<usize> {
        Err(OpError::new("pwrite", "(file)", "not supported by vfs"))
    }

    fn append(&self, file: &mut VfsFile, data: &[u8]) -> OpResult<usize> {
        match file {
            // `flush` publishes the write to the file system, as a write(2)
            // is visible to other openers at once.
            VfsFile::Write(w) => w
                .write_all(data)
                .and_then(|_| w.flush())
                .map(|_| data.len())
                .map_err(|e| OpError::new("append", "(file)", e)),
            VfsFile::Read(_) => Err(OpError::new("append", "(file)", "opened for reading")),
        }
    }

    fn truncate(&self, _file: &mut VfsFile, _size: u64) -> OpResult<()> {
        Err(OpError::new("truncate", "(file)", "not supported by vfs"))
    }

    fn reset(&self, path: &str) -> OpResult<()> {
        // `create_file` replaces the file with an empty one.
        let f = self.open(path, OpenMode::Truncate)?;
        self.close(f);
        Ok(())
    }
}

/// `rsfs` 0.4 `mem::FS`.
pub struct RsfsPeer {
    fs: rsfs::mem::FS,
}

impl RsfsPeer {
    /// A fresh, empty `mem::FS`.
    pub fn new() -> RsfsPeer {
        RsfsPeer {
            fs: rsfs::mem::FS::new(),
        }
    }
}

impl Default for RsfsPeer {
    fn default() -> Self {
        RsfsPeer::new()
    }
}

/// `/` + `path` in a stack buffer: rsfs takes absolute `Path`s.
fn with_abs<R>(op: &str, path: &str, f: impl FnOnce(&std::path::Path) -> R) -> OpResult<R> {
    let bytes = path.as_bytes();
    if bytes.len() > PATH_BYTES_MAX {
        return Err(OpError::new(op, path, "path too long"));
    }
    let mut buf = [0u8; PATH_BYTES_MAX + 1];
    buf[0] = b'/';
    buf[1..=bytes.len()].copy_from_slice(bytes);
    // A '/' followed by valid UTF-8 is valid UTF-8.
    let s = std::str::from_utf8(&buf[..=bytes.len()]).expect("utf-8 path");
    Ok(f(std::path::Path::new(s)))
}

impl Backend for RsfsPeer {
    type File = rsfs::mem::File;

    fn kind(&self) -> &'static str {
        "rsfs"
    }

    fn mkdir(&self, path: &str) -> OpResult<()> {
        use rsfs::GenFS;
        with_abs("mkdir", path, |p| self.fs.create_dir(p))?
            .map_err(|e| OpError::new("mkdir", path, e))
    }

    fn stat(&self, path: &str) -> OpResult<Meta> {
        use rsfs::{GenFS, Metadata};
        let m = with_abs("stat", path, |p| self.fs.metadata(p))?
            .map_err(|e| OpError::new("stat", path, e))?;
        Ok(Meta {
            size: m.len(),
            is_dir: m.is_dir(),
        })
    }

    fn readdir(&self, path: &str) -> OpResult<usize> {
        use rsfs::GenFS;
        let rd = with_abs("readdir", path, |p| self.fs.read_dir(p))?
            .map_err(|e| OpError::new("readdir", path, e))?;
        let mut n = 0;
        for entry in rd {
            entry.map_err(|e| OpError::new("readdir", path, e))?;
            n += 1;
        }
        Ok(n)
    }

    fn create(&self, path: &str) -> OpResult<()> {
        use rsfs::{GenFS, OpenOptions};
        let f = with_abs("create", path, |p| {
            self.fs.new_openopts().write(true).create_new(true).open(p)
        })?
        .map_err(|e| OpError::new("create", path, e))?;
        drop(f);
        Ok(())
    }

    fn create_write(&self, path: &str, data: &[u8], fsync: bool) -> OpResult<()> {
        use rsfs::{File, GenFS, OpenOptions};
        let mut f = with_abs("create", path, |p| {
            self.fs.new_openopts().write(true).create_new(true).open(p)
        })?
        .map_err(|e| OpError::new("create", path, e))?;
        f.write_all(data)
            .map_err(|e| OpError::new("write", path, e))?;
        if fsync {
            f.sync_all().map_err(|e| OpError::new("fsync", path, e))?;
        }
        Ok(())
    }

    fn unlink(&self, path: &str) -> OpResult<()> {
        use rsfs::GenFS;
        with_abs("unlink", path, |p| self.fs.remove_file(p))?
            .map_err(|e| OpError::new("unlink", path, e))
    }

    fn rename(&self, from: &str, to: &str) -> OpResult<()> {
        use rsfs::GenFS;
        with_abs("rename", from, |a| {
            with_abs("rename", to, |b| self.fs.rename(a, b))
        })??
        .map_err(|e| OpError::new("rename", from, e))
    }

    fn open(&self, path: &str, mode: OpenMode) -> OpResult<rsfs::mem::File> {
        use rsfs::{GenFS, OpenOptions};
        with_abs("open", path, |p| {
            let mut o = self.fs.new_openopts();
            match mode {
                OpenMode::Read => o.read(true),
                OpenMode::ReadWrite => o.read(true).write(true),
                OpenMode::Append => o.append(true),
                OpenMode::Truncate => o.write(true).truncate(true).create(true),
            };
            o.open(p)
        })?
        .map_err(|e| OpError::new("open", path, e))
    }

    fn pread(&self, file: &mut rsfs::mem::File, offset: u64, buf: &mut [u8]) -> OpResult<usize> {
        use rsfs::unix_ext::FileExt;
        file.read_at(buf, offset)
            .map_err(|e| OpError::new("pread", "(file)", e))
    }

    fn pwrite(&self, file: &mut rsfs::mem::File, offset: u64, data: &[u8]) -> OpResult<usize> {
        use rsfs::unix_ext::FileExt;
        file.write_at(data, offset)
            .map_err(|e| OpError::new("pwrite", "(file)", e))
    }

    fn append(&self, file: &mut rsfs::mem::File, data: &[u8]) -> OpResult<usize> {
        file.write(data)
            .map_err(|e| OpError::new("append", "(file)", e))
    }

    fn file_size(&self, path: &str) -> OpResult<u64> {
        // rsfs 0.4.1's `set_len` and `O_TRUNC` leave the length that
        // `metadata` reports stale (the DWTL / DWAL post-conditions found
        // it), so read the size through the file: seeking to the end uses
        // the data's real length.
        let mut f = self.open(path, OpenMode::Read)?;
        f.seek(SeekFrom::End(0))
            .map_err(|e| OpError::new("seek", path, e))
    }

    fn truncate(&self, file: &mut rsfs::mem::File, size: u64) -> OpResult<()> {
        use rsfs::File;
        file.set_len(size)
            .map_err(|e| OpError::new("truncate", "(file)", e))
    }
}
