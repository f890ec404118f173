//! The in-process engine through the Rust API (`lanefs::Fs`).
//!
//! Every path operation walks the path the way the kernel's path walk
//! would: the engine's RCU-walk from the root (no lock, no reference, like
//! the kernel's `LOOKUP_RCU`), falling back to one uncounted `lookup` per
//! component where it cannot answer, then the operation on the last
//! component: `getattr` for stat, `open_at` for open and create, `unlink`,
//! `rename`, `open` + `readdir` for listing. File operations use the open
//! handle (`read`, `write`, `setattr` with the handle for ftruncate,
//! `fsync`). Nothing is cached by the benchmark between operations.
//!
//! The engine configuration is chosen per instance: `--variant` names a
//! [`Variants`] set (`default`, or `mechanism=design,…` as
//! [`Variants::parse`] reads it), passed through unchanged in
//! [`FsConfig::variants`].
//!
//! Shared state: the `Fs` (shared inside, by design) and a root credential
//! that is only read.

use super::{Backend, Meta, OpError, OpResult, OpenMode};
use lanefs::{
    Cred, DirAt, Errno, FileKind, Fs, FsConfig, MemoryStore, MemoryStoreConfig, OpenFile, SetAttr,
    Variants, ROOT_INO,
};
use lanefs::{ImageConfig, ImageStore};
use std::sync::Arc;

/// Format `path` as an empty lanefs image of `size` bytes.
fn lanefs_image_mkfs(path: &std::path::Path, size: u64) -> Result<(), String> {
    lanefs_image::mkfs(path, size).map_err(|e| format!("{}: mkfs: {e:?}", path.display()))
}

/// The variant sets `--variant all` names: the default, then every
/// single-mechanism baseline, each as its canonical string.
pub fn all_variants() -> Vec<String> {
    std::iter::once(Variants::default().to_string())
        .chain(Variants::baselines().into_iter().map(|(name, _)| name))
        .collect()
}

/// Read a `--variant` value into its canonical string (`default`,
/// `icache=global`, …), so that equal sets get equal names in results.
pub fn canonical_variant(spec: &str) -> Result<String, String> {
    Variants::parse(spec)
        .map(|v| v.to_string())
        .map_err(|e| format!("--variant {spec:?}: {e}"))
}

/// The engine, one fresh instance per run.
pub struct Inproc {
    fs: Fs,
    cred: Cred,
}

/// An open file and where the next `append` goes.
pub struct InprocFile {
    file: OpenFile,
}

fn err(op: &str, path: &str, e: Errno) -> OpError {
    OpError::new(op, path, format!("{e:?}"))
}

impl Inproc {
    /// A fresh in-memory engine of `variant` (as [`Variants::parse`]
    /// reads it) with the default limits.
    pub fn new(variant: &str) -> Result<Inproc, String> {
        let variants = Variants::parse(variant).map_err(|e| format!("variant {variant:?}: {e}"))?;
        Inproc::with_config(FsConfig {
            variants,
            ..FsConfig::default()
        })
    }

    /// A fresh engine on a fresh [`MemoryStore`] with `config`. The store
    /// may hold 2^32 inodes and 64 GiB, not the default million and 1 GiB
    /// (limits only: nothing is reserved): the create workloads' file
    /// budget (200,000 a second per thread) passes a million at 16 threads
    /// in a fraction of a second (MWCM answered ENOSPC there), and FSMARK's
    /// 4 KiB files passed 1 GiB.
    pub fn with_config(config: FsConfig) -> Result<Inproc, String> {
        let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
            max_inodes: 1 << 32,
            capacity_bytes: 64 << 30,
        }));
        let fs = Fs::new(store, config).map_err(|e| format!("Fs::new: {e:?}"))?;
        Ok(Inproc {
            fs,
            cred: Cred::root(),
        })
    }

    /// A fresh engine of `variant` on a fresh image file at `path` of
    /// `size` bytes (`lanefs mkfs`, then the image store with its default
    /// background commit), with the default limits. Dropping it
    /// checkpoints the image; the caller removes the file.
    pub fn on_image(variant: &str, path: &std::path::Path, size: u64) -> Result<Inproc, String> {
        let variants = Variants::parse(variant).map_err(|e| format!("variant {variant:?}: {e}"))?;
        lanefs_image_mkfs(path, size)?;
        let store = ImageStore::open_with(path, &ImageConfig::default())
            .map_err(|e| format!("{}: open image: {e:?}", path.display()))?;
        let config = FsConfig {
            variants,
            ..FsConfig::default()
        };
        let fs = Fs::new(Arc::new(store), config).map_err(|e| format!("Fs::new: {e:?}"))?;
        Ok(Inproc {
            fs,
            cred: Cred::root(),
        })
    }

    /// The engine, for checks.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// Walk every component of `path`; the last one's number, checked by
    /// generation (nothing is held). First the engine's RCU-walk (no lock,
    /// no reference, as the kernel's `LOOKUP_RCU`; number, kind and
    /// generation only, as `stat` asks `getattr` after); what it cannot
    /// answer (a cache miss, concurrent changes) with one uncounted
    /// `lookup` per component.
    /// `path`'s components for the lock-free walk; `None` when there are
    /// more than it takes.
    fn rcu_components(path: &str) -> Option<([&[u8]; lanefs::MAX_RCU_COMPONENTS], usize)> {
        let mut names: [&[u8]; lanefs::MAX_RCU_COMPONENTS] = [&[]; lanefs::MAX_RCU_COMPONENTS];
        let mut n = 0;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            *names.get_mut(n)? = comp.as_bytes();
            n += 1;
        }
        Some((names, n))
    }

    fn walk(&self, op: &str, path: &str) -> OpResult<DirAt> {
        if let Some((names, n)) = Self::rcu_components(path) {
            if let Some(r) = self.fs.resolve_rcu_ino(&self.cred, ROOT_INO, &names[..n]) {
                return r.map(|f| f.at()).map_err(|e| err(op, path, e));
            }
        }
        let mut at = DirAt::from(ROOT_INO);
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            let a = self
                .fs
                .lookup(&self.cred, at, comp.as_bytes())
                .map_err(|e| err(op, path, e))?;
            at = DirAt::checked(a.ino, a.generation);
        }
        Ok(at)
    }

    /// Walk to the parent of `path`; the directory and the last name.
    fn walk_parent<'p>(&self, op: &str, path: &'p str) -> OpResult<(DirAt, &'p str)> {
        match path.rsplit_once('/') {
            Some((dir, name)) => Ok((self.walk(op, dir)?, name)),
            None => Ok((ROOT_INO.into(), path)),
        }
    }

    fn open_at(&self, op: &str, path: &str, flags: i32) -> OpResult<OpenFile> {
        let (parent, name) = self.walk_parent(op, path)?;
        let (_, file, _) = self
            .fs
            .open_at(
                &self.cred,
                parent,
                name.as_bytes(),
                flags,
                0o644,
                0o022,
                false,
            )
            .map_err(|e| err(op, path, e))?;
        Ok(file)
    }
}

impl Backend for Inproc {
    type File = InprocFile;

    fn kind(&self) -> &'static str {
        "inproc"
    }

    fn mkdir(&self, path: &str) -> OpResult<()> {
        let (parent, name) = self.walk_parent("mkdir", path)?;
        let attr = self
            .fs
            .mkdir(&self.cred, parent, name.as_bytes(), 0o755, 0o022)
            .map_err(|e| err("mkdir", path, e))?;
        // mkdir returns a counted entry (as FUSE MKDIR); a syscall caller
        // holds no reference afterwards, so give it back.
        self.fs.forget(attr.ino, 1);
        Ok(())
    }

    fn stat(&self, path: &str) -> OpResult<Meta> {
        // As the path layer's `metadata`: one lock-free walk that returns
        // the final inode's attributes, else a walk and a getattr.
        let rcu = Self::rcu_components(path)
            .and_then(|(names, n)| self.fs.resolve_rcu(&self.cred, ROOT_INO, &names[..n]));
        let attr = match rcu {
            Some(r) => r.map_err(|e| err("stat", path, e))?,
            None => {
                let ino = self.walk("stat", path)?.ino;
                self.fs.getattr(ino).map_err(|e| err("stat", path, e))?
            }
        };
        Ok(Meta {
            size: attr.size,
            is_dir: attr.kind == FileKind::Directory,
        })
    }

    fn readdir(&self, path: &str) -> OpResult<usize> {
        let ino = self.walk("readdir", path)?.ino;
        let dir = self
            .fs
            .open(&self.cred, ino, libc::O_RDONLY)
            .map_err(|e| err("opendir", path, e))?;
        let mut count = 0usize;
        let mut offset = 0u64;
        loop {
            let mut got = 0usize;
            self.fs
                .readdir(&dir, offset, &mut |entry| {
                    got += 1;
                    offset = entry.next_offset;
                    if entry.name != b"." && entry.name != b".." {
                        count += 1;
                    }
                    false
                })
                .map_err(|e| err("readdir", path, e))?;
            if got == 0 {
                break;
            }
        }
        Ok(count)
    }

    fn create(&self, path: &str) -> OpResult<()> {
        let file = self.open_at(
            "create",
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        )?;
        drop(file);
        Ok(())
    }

    fn create_write(&self, path: &str, data: &[u8], fsync: bool) -> OpResult<()> {
        let file = self.open_at(
            "create",
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        )?;
        let (n, _) = self
            .fs
            .write(&file, 0, data)
            .map_err(|e| err("write", path, e))?;
        if n != data.len() {
            return Err(OpError::new("write", path, "short write"));
        }
        if fsync {
            self.fs
                .fsync(&file, false)
                .map_err(|e| err("fsync", path, e))?;
        }
        Ok(())
    }

    fn unlink(&self, path: &str) -> OpResult<()> {
        let (parent, name) = self.walk_parent("unlink", path)?;
        self.fs
            .unlink(&self.cred, parent, name.as_bytes())
            .map_err(|e| err("unlink", path, e))
    }

    fn rename(&self, from: &str, to: &str) -> OpResult<()> {
        let (p1, n1) = self.walk_parent("rename", from)?;
        let (p2, n2) = self.walk_parent("rename", to)?;
        self.fs
            .rename(&self.cred, p1, n1.as_bytes(), p2, n2.as_bytes(), 0)
            .map_err(|e| err("rename", from, e))
    }

    fn open(&self, path: &str, mode: OpenMode) -> OpResult<InprocFile> {
        let flags = match mode {
            OpenMode::Read => libc::O_RDONLY,
            OpenMode::ReadWrite => libc::O_RDWR,
            OpenMode::Append => libc::O_WRONLY | libc::O_APPEND,
            OpenMode::Truncate => libc::O_WRONLY | libc::O_TRUNC | libc::O_CREAT,
        };
        Ok(InprocFile {
            file: self.open_at("open", path, flags)?,
        })
    }

    fn pread(&self, file: &mut InprocFile, offset: u64, buf: &mut [u8]) -> OpResult<usize> {
        self.fs
            .read(&file.file, offset, buf)
            .map_err(|e| err("read", "(file)", e))
    }

    fn pwrite(&self, file: &mut InprocFile, offset: u64, data: &[u8]) -> OpResult<usize> {
        self.fs
            .write(&file.file, offset, data)
            .map(|(n, _)| n)
            .map_err(|e| err("write", "(file)", e))
    }

    fn append(&self, file: &mut InprocFile, data: &[u8]) -> OpResult<usize> {
        // The file is O_APPEND: the engine writes at end of file whatever
        // the offset says, as the kernel does.
        self.fs
            .write(&file.file, 0, data)
            .map(|(n, _)| n)
            .map_err(|e| err("append", "(file)", e))
    }

    fn truncate(&self, file: &mut InprocFile, size: u64) -> OpResult<()> {
        let changes = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.fs
            .setattr(&self.cred, file.file.ino(), &changes, Some(&file.file))
            .map(|_| ())
            .map_err(|e| err("ftruncate", "(file)", e))
    }
}
