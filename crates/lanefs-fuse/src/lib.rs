//! lanefs FUSE adapter: kernel requests to engine calls.
//!
//! Layout:
//!
//! * [`handler`]: the transport-neutral request handler. It maps a decoded
//!   request to [`lanefs_core::Fs`] calls and returns a reply value; it owns
//!   the open-file table and the lookup-count discipline.
//! * [`handles`]: the sharded `fh -> OpenFile` table.
//! * [`cred`]: caller credentials (supplementary groups from `/proc`).
//! * [`transport_fuser`]: the classic `/dev/fuse` transport on fuser 0.18
//!   (`n_threads` event loops, each on its own cloned fd).
//! * this file: mount options, `mount(2)` and unmount.
//!
//! # Locking rules (the whole adapter)
//!
//! * `HandleTable` shard `RwLock` (64 shards): protects that shard's
//!   `fh -> Arc<Handle>` map and its sequence counter. Leaf lock: held only
//!   to insert, remove or clone an `Arc`, never across an engine call or
//!   another lock.
//! * There are no adapter atomics on the request path: handle numbers come
//!   from the per-shard counter under the shard lock; lookup counts are kept
//!   by the engine (`lookup_counted` / `forget`).
//! * `Handler::invalidate_attr` (`OnceLock`): written once by `mount`
//!   before the session serves requests, read-only afterwards (the
//!   `OnceLock` gives the release/acquire pairing).
//! * fuser's own `Mutex<Option<Mount>>` (only when mounting through
//!   `fusermount3`) is taken at unmount only.
//!
//! Lock order: engine locks (taken inside `Fs` calls) and the handle shard
//! locks are never held at the same time; the adapter takes at most one
//! lock at a time. See `docs/FUSE.md` for the kernel-cache configuration.

pub mod cred;
pub mod handler;
pub mod handles;
pub mod transport_fuser;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use handler::{guarded, CacheConfig, Handler, HandlerConfig, FAULT_PANIC_NAME_ENV};
pub use transport_fuser::FuserFs;

/// Options of one mount, as given with `-o` and the CLI flags.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Source shown by `mount`/`df` (`fsname=`).
    pub fsname: String,
    /// Type suffix: the mount is listed as `fuse.<subtype>` (`subtype=`).
    pub subtype: String,
    pub read_only: bool,
    pub allow_other: bool,
    pub default_permissions: bool,
    /// Allow mounting over a non-empty directory.
    pub nonempty: bool,
    /// Extra `mount(2)` flags (`noatime`, `noexec`, `sync`, ...); `nosuid`
    /// and `nodev` are on unless `suid` / `dev` is given.
    pub ms_flags: libc::c_ulong,
    /// Request-serving threads (each with its own cloned `/dev/fuse` fd).
    pub threads: usize,
    /// Kernel cache timeouts and `keep_cache`.
    pub cache: CacheConfig,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "lanefs".into(),
            subtype: "lanefs".into(),
            read_only: false,
            allow_other: false,
            default_permissions: false,
            nonempty: false,
            ms_flags: libc::MS_NOSUID | libc::MS_NODEV,
            threads: 1,
            cache: CacheConfig::default(),
        }
    }
}

fn parse_secs(key: &str, v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("bad value for mount option {key}: '{v}'"))
}

impl MountOptions {
    /// Apply one `-o` string (comma-separated). Unknown options are an error.
    pub fn apply(&mut self, list: &str) -> Result<(), String> {
        for opt in list.split(',').filter(|o| !o.is_empty()) {
            let (key, val) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            match (key, val) {
                ("ro", None) => self.read_only = true,
                ("rw", None) => self.read_only = false,
                ("allow_other", None) => self.allow_other = true,
                ("default_permissions", None) => self.default_permissions = true,
                ("nonempty", None) => self.nonempty = true,
                ("fsname", Some(v)) if !v.is_empty() => self.fsname = v.into(),
                ("subtype", Some(v)) if !v.is_empty() => self.subtype = v.into(),
                ("suid", None) => self.ms_flags &= !libc::MS_NOSUID,
                ("nosuid", None) => self.ms_flags |= libc::MS_NOSUID,
                ("dev", None) => self.ms_flags &= !libc::MS_NODEV,
                ("nodev", None) => self.ms_flags |= libc::MS_NODEV,
                ("exec", None) => self.ms_flags &= !libc::MS_NOEXEC,
                ("noexec", None) => self.ms_flags |= libc::MS_NOEXEC,
                ("atime", None) => self.ms_flags &= !libc::MS_NOATIME,
                ("noatime", None) => self.ms_flags |= libc::MS_NOATIME,
                ("relatime", None) => self.ms_flags |= libc::MS_RELATIME,
                ("sync", None) => self.ms_flags |= libc::MS_SYNCHRONOUS,
                ("async", None) => self.ms_flags &= !libc::MS_SYNCHRONOUS,
                ("dirsync", None) => self.ms_flags |= libc::MS_DIRSYNC,
                ("entry_timeout", Some(v)) => self.cache.entry_ttl = parse_secs(key, v)?,
                ("attr_timeout", Some(v)) => self.cache.attr_ttl = parse_secs(key, v)?,
                ("negative_timeout", Some(v)) => self.cache.negative_ttl = parse_secs(key, v)?,
                ("keep_cache", None) => self.cache.keep_cache = true,
                ("nokeep_cache", None) => self.cache.keep_cache = false,
                _ => return Err(format!("unknown mount option '{opt}'")),
            }
        }
        if self
            .fsname
            .contains(|c: char| c == ',' || c.is_whitespace())
        {
            return Err(format!("bad fsname '{}'", self.fsname));
        }
        if self
            .subtype
            .contains(|c: char| c == ',' || c == '.' || c.is_whitespace())
        {
            return Err(format!("bad subtype '{}'", self.subtype));
        }
        Ok(())
    }
}

/// Check that `mountpoint` can be mounted on; the error is one line.
pub fn check_mountpoint(mountpoint: &Path, nonempty: bool) -> Result<PathBuf, String> {
    let shown = mountpoint.display();
    let md = std::fs::metadata(mountpoint).map_err(|e| format!("mountpoint {shown}: {e}"))?;
    if !md.is_dir() {
        return Err(format!("mountpoint {shown} is not a directory"));
    }
    if !nonempty {
        let mut it =
            std::fs::read_dir(mountpoint).map_err(|e| format!("mountpoint {shown}: {e}"))?;
        if it.next().is_some() {
            return Err(format!(
                "mountpoint {shown} is not empty (use -o nonempty to mount anyway)"
            ));
        }
    }
    mountpoint
        .canonicalize()
        .map_err(|e| format!("mountpoint {shown}: {e}"))
}

/// A mounted, initialised FUSE session, ready to serve.
pub struct Mounted {
    session: fuser::Session<FuserFs>,
    mountpoint: PathBuf,
}

impl Mounted {
    /// Where it is mounted (canonical path).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Serve requests on the configured threads until the file system is
    /// unmounted (returns `Ok` then).
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Mount `handler` on `mountpoint` and complete the FUSE handshake. As
/// root this calls `mount(2)` itself with type `fuse.<subtype>` (so `mount`
/// lists it as such); otherwise it goes through `fusermount3`.
pub fn mount(
    handler: Arc<Handler>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<Mounted, String> {
    let mnt = check_mountpoint(mountpoint, opts.nonempty)?;
    let mut config = fuser::Config::default();
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    // The kernel enforces allow_other itself (we pass it or not); fuser's
    // own uid filter would only repeat it, so let every request through.
    config.acl = fuser::SessionACL::All;
    let fs = FuserFs::new(handler.clone());

    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let session = if euid == 0 {
        let fd = mount_syscall(&mnt, opts)?;
        match fuser::Session::from_fd(fs, fd, config.acl, config) {
            Ok(s) => s,
            Err(e) => {
                let _ = unmount(&mnt, true);
                return Err(format!("FUSE handshake failed: {e}"));
            }
        }
    } else {
        use fuser::MountOption as M;
        let mut mo = vec![
            M::FSName(opts.fsname.clone()),
            M::Subtype(opts.subtype.clone()),
        ];
        if opts.read_only {
            mo.push(M::RO);
        }
        if opts.default_permissions {
            mo.push(M::DefaultPermissions);
        }
        if opts.allow_other {
            mo.push(M::CUSTOM("allow_other".into()));
        }
        config.mount_options = mo;
        fuser::Session::new(fs, &mnt, &config).map_err(|e| format!("mount failed: {e}"))?
    };
    let notifier = session.notifier();
    handler.set_attr_invalidator(Box::new(move |ino| {
        // offset -1: attributes only, no page-cache work, so this is safe
        // to send from inside a request handler.
        if let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), -1, 0) {
            tracing::debug!(ino, error = %e, "inval_inode failed");
        }
    }));
    Ok(Mounted {
        session,
        mountpoint: mnt,
    })
}

/// Open `/dev/fuse` and `mount(2)` it on `mnt`.
fn mount_syscall(mnt: &Path, opts: &MountOptions) -> Result<OwnedFd, String> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("cannot open /dev/fuse: {e} (is the fuse module loaded?)"))?;
    let fd: OwnedFd = dev.into();
    let mut data = format!(
        "fd={},rootmode={:o},user_id=0,group_id=0",
        fd.as_raw_fd(),
        libc::S_IFDIR
    );
    if opts.default_permissions {
        data.push_str(",default_permissions");
    }
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    let mut flags = opts.ms_flags;
    if opts.read_only {
        flags |= libc::MS_RDONLY;
    }
    let c = |s: &[u8]| CString::new(s).map_err(|_| "NUL byte in mount argument".to_string());
    let source = c(opts.fsname.as_bytes())?;
    let target = c(mnt.as_os_str().as_bytes())?;
    let data_c = c(data.as_bytes())?;
    let mut last = io::Error::from_raw_os_error(libc::ENODEV);
    // "fuse.<subtype>" first; kernels without subtype support say ENODEV.
    for fstype in [format!("fuse.{}", opts.subtype), "fuse".to_string()] {
        let fstype_c = c(fstype.as_bytes())?;
        // SAFETY: every pointer is a valid NUL-terminated string that lives
        // across the call; mount(2) does not keep them.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype_c.as_ptr(),
                flags,
                data_c.as_ptr().cast(),
            )
        };
        if rc == 0 {
            return Ok(fd);
        }
        last = io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::ENODEV) {
            break;
        }
    }
    Err(format!("mount {} failed: {last}", mnt.display()))
}

/// Unmount `mountpoint`: `umount2(2)`, lazily (`MNT_DETACH`) if `lazy`; as
/// non-root (EPERM) through `fusermount3 -u [-z]`.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let target = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: target is a valid NUL-terminated string for the call.
    let rc = unsafe { libc::umount2(target.as_ptr(), flags | libc::UMOUNT_NOFOLLOW) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let st = cmd.arg("--").arg(mountpoint).status()?;
    if st.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("fusermount3 -u failed ({st})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let mut o = MountOptions::default();
        o.apply("ro,allow_other,default_permissions,fsname=mem0,subtype=lanefs")
            .unwrap();
        assert!(o.read_only && o.allow_other && o.default_permissions);
        assert_eq!(o.fsname, "mem0");
        o.apply("attr_timeout=0.5,noatime").unwrap();
        assert_eq!(o.cache.attr_ttl, Duration::from_millis(500));
        assert!(o.ms_flags & libc::MS_NOATIME != 0);
        assert!(o.apply("bogus").unwrap_err().contains("bogus"));
        assert!(o.apply("attr_timeout=x").is_err());
        assert!(o.apply("subtype=a.b").is_err());
    }

    #[test]
    fn mountpoint_checks() {
        let base = std::env::temp_dir().join(format!("lanefs-fuse-ut-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("empty")).unwrap();
        std::fs::create_dir_all(base.join("full/x")).unwrap();
        std::fs::write(base.join("file"), b"").unwrap();
        assert!(check_mountpoint(&base.join("empty"), false).is_ok());
        assert!(check_mountpoint(&base.join("full"), false)
            .unwrap_err()
            .contains("not empty"));
        assert!(check_mountpoint(&base.join("full"), true).is_ok());
        assert!(check_mountpoint(&base.join("file"), false)
            .unwrap_err()
            .contains("not a directory"));
        assert!(check_mountpoint(&base.join("missing"), false).is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}
