//! The engine-level image fuzz entry: decode a sparse-image input
//! (`lanefs_image::fuzz::decode_sparse`), open it as a store, mount the
//! engine on it with a tiny cache budget (so the walk evicts and reloads),
//! walk it — every directory listed, every regular file read (in bounded
//! chunks: a corrupt size must not become an allocation), every link read,
//! xattrs listed — make a few changes, sync, and run the engine's check.
//! Every outcome must be a result; a panic here is a bug.
//!
//! Shared by the `mount_walk` fuzz target and the stable test
//! `crates/lanefs/tests/image_fuzz_mount.rs` (included with `#[path]`), so
//! both run exactly this code. No locks, no atomics.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lanefs::{FileKind, Filesystem, FsConfig, ImageConfig, ImageStore};
use lanefs_image::fuzz::{decode_sparse, reseal_all, FLAG_RESEAL};
use lanefs_image::MemDevice;

/// Most directory entries, files and bytes the walk visits, so that a
/// corrupt image cannot make one input run long.
const VISIT_MAX: usize = 512;
const READ_MAX: u64 = 64 * 1024;

/// What one input led to, for the replay test's coverage checks.
#[derive(Clone, Copy, Debug, Default)]
pub struct MountOutcome {
    pub mounted: bool,
    pub visited: usize,
}

pub fn mount_walk_input(data: &[u8]) -> MountOutcome {
    let (flags, mut img) = decode_sparse(data);
    if flags & FLAG_RESEAL != 0 {
        reseal_all(&mut img);
    }
    let mut out = MountOutcome::default();
    let cfg = ImageConfig {
        commit_interval: None,
        cache_bytes: None,
    };
    let Ok(store) = ImageStore::open_device(Arc::new(MemDevice::from_bytes(img)), &cfg) else {
        return out;
    };
    let config = FsConfig {
        cache_inodes_max: 8,
        cache_pages_max: 8,
        ..FsConfig::default()
    };
    let Ok(fs) = Filesystem::from_store(Arc::new(store), config) else {
        return out;
    };
    out.mounted = true;
    let mut todo = vec![PathBuf::from("/")];
    let mut buf = [0u8; 4096];
    while let Some(dir) = todo.pop() {
        let Ok(rd) = fs.read_dir(&dir) else { continue };
        for e in rd {
            if out.visited >= VISIT_MAX {
                break;
            }
            out.visited += 1;
            let Ok(e) = e else { continue };
            let p = dir.join(std::ffi::OsStr::from_bytes(e.name_bytes()));
            let _ = fs.symlink_metadata(&p);
            let _ = fs.list_xattr(&p);
            match e.kind() {
                FileKind::Directory => todo.push(p),
                FileKind::Symlink => {
                    let _ = fs.read_link(&p);
                }
                FileKind::Regular => {
                    if let Ok(f) = fs.open(&p) {
                        let mut f = f.take(READ_MAX);
                        while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
                    }
                }
                _ => {}
            }
        }
    }
    change(&fs, Path::new("/fuzz-new"));
    let _ = fs.sync();
    fs.core().shrink();
    let _ = fs.core().check();
    out
}

/// Create, write, rename and remove: the store paths a mount writes.
fn change(fs: &Filesystem, p: &Path) {
    let _ = fs.write(p, [1u8; 5000]);
    let _ = fs.create_dir("/fuzz-dir");
    let _ = fs.rename(p, "/fuzz-dir/moved");
    let _ = fs.remove_file("/fuzz-dir/moved");
    let _ = fs.remove_dir("/fuzz-dir");
}
