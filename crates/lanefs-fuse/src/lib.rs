//! lanefs FUSE adapter: kernel requests to engine calls.
//!
//! Layout (docs/FUSE.md has the picture and the reasons):
//!
//! * [`proto`]: the kernel protocol structures and constants (fuse.h 7.42).
//! * [`wire`]: zero-copy request decoding, reply and notification encoding.
//! * [`dispatch`]: INIT negotiation; decoded request -> [`Handler`] call ->
//!   encoded reply. Transport-neutral.
//! * [`handler`]: the request handler over [`lanefs_core::Fs`]; it owns the
//!   open-file table and the lookup-count discipline.
//! * [`transport_dev`]: `/dev/fuse`, one cloned fd per worker thread.
//! * [`transport_uring`]: FUSE-over-io_uring, one pinned ring per CPU.
//! * [`handles`]: the sharded `fh -> OpenFile` table.
//! * [`cred`]: caller credentials (supplementary groups from `/proc`).
//! * [`dircache`]: what keeps the kernel's cached directory listings
//!   (`cache_dir`) from serving names removed before a listing began.
//! * [`workers`]: per-request panic guard and worker supervision (a dead
//!   worker ends the session at once).
//! * `fusermount`: non-root mounting through `fusermount3`.
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
//! * `ListingGuard` shard `Mutex` (64 shards, `dircache.rs`, only with
//!   `cache_dir`): protects that shard's map of listed directories. Leaf
//!   lock: held only to record a listing reply or a directory change,
//!   never across an engine call, a notification or another lock.
//! * `Handler::invalidate` and `Handler::writeback` (`OnceLock`s):
//!   written once by `mount` before the session serves requests, read-only
//!   afterwards (the `OnceLock` gives the release/acquire pairing).
//! * `dispatch::Session`: immutable after INIT, shared by `Arc`.
//! * Each transport worker owns its fd or ring and its buffers; the
//!   session fd is shared read-only (the kernel makes each `/dev/fuse`
//!   write atomic).
//!
//! Lock order: engine locks (taken inside `Fs` calls) and the handle shard
//! locks are never held at the same time; the adapter takes at most one
//! lock at a time. See `docs/FUSE.md` for the kernel-cache configuration.

pub mod cred;
pub mod dircache;
pub mod dispatch;
mod fusermount;
pub mod handler;
pub mod handles;
pub mod proto;
pub mod transport_dev;
pub mod transport_uring;
pub mod upkeep;
pub mod wire;
pub mod workers;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lanefs_core::AtimePolicy;

pub use handler::{guarded, CacheConfig, Handler, HandlerConfig, FAULT_PANIC_NAME_ENV};

/// Options of one mount, as given with `-o` and the CLI flags.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Source shown by `mount`/`df` (`fsname=`).
    pub fsname: String,
    /// Type suffix: the mount is listed as `fuse.<subtype>` (`subtype=`).
    pub subtype: String,
    pub read_only: bool,
    /// Let every user in (the kernel's `allow_other`); implies
    /// `default_permissions` unless `no_default_permissions` is given.
    pub allow_other: bool,
    /// Let root in besides the mounting user (kernel `allow_other`,
    /// narrowed by the daemon, as libfuse does).
    pub allow_root: bool,
    pub default_permissions: bool,
    /// Explicit opt-out of the `default_permissions` that `allow_other`
    /// implies (the engine alone checks permissions; see docs/FUSE.md for
    /// the holes that leaves).
    pub no_default_permissions: bool,
    /// Which transport serves requests (`--transport`).
    pub transport: Transport,
    /// Allow mounting over a non-empty directory.
    pub nonempty: bool,
    /// Extra `mount(2)` flags (`noatime`, `noexec`, `sync`, ...); `nosuid`
    /// and `nodev` are on unless `suid` / `dev` is given.
    pub ms_flags: libc::c_ulong,
    /// Request-serving threads (each with its own cloned `/dev/fuse` fd).
    pub threads: usize,
    /// Kernel cache timeouts and `keep_cache`.
    pub cache: CacheConfig,
    /// When reads and listings move atime (`relatime` default,
    /// `strictatime`, `noatime`): the daemon owns atime, the kernel only
    /// shows what the daemon says. Goes to the engine's `FsConfig`.
    pub atime: lanefs_core::AtimePolicy,
    /// `nodiratime`: listings never move a directory's atime.
    pub nodiratime: bool,
    /// `auto_unmount`: the mount goes away when the daemon dies. Not a
    /// kernel option: the program that serves the mount starts a watcher
    /// (`lanefs` does, see docs/FUSE.md).
    pub auto_unmount: bool,
    /// `writeback_cache`: ask the kernel for its writeback cache
    /// (`FUSE_WRITEBACK_CACHE`); off by default; implies
    /// `default_permissions` (see `effective_default_permissions`).
    /// docs/FUSE.md says what the kernel then owns and what the daemon
    /// does for it.
    pub writeback_cache: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fsname: "lanefs".into(),
            subtype: "lanefs".into(),
            read_only: false,
            allow_other: false,
            allow_root: false,
            default_permissions: false,
            no_default_permissions: false,
            transport: Transport::Auto,
            nonempty: false,
            ms_flags: libc::MS_NOSUID | libc::MS_NODEV,
            threads: 1,
            cache: CacheConfig::default(),
            atime: lanefs_core::AtimePolicy::Relatime,
            nodiratime: false,
            auto_unmount: false,
            writeback_cache: false,
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
                ("allow_root", None) => self.allow_root = true,
                ("default_permissions", None) => self.default_permissions = true,
                ("no_default_permissions", None) => self.no_default_permissions = true,
                ("nonempty", None) => self.nonempty = true,
                ("fsname", Some(v)) if !v.is_empty() => self.fsname = v.into(),
                ("subtype", Some(v)) if !v.is_empty() => self.subtype = v.into(),
                ("suid", None) => self.ms_flags &= !libc::MS_NOSUID,
                ("nosuid", None) => self.ms_flags |= libc::MS_NOSUID,
                ("dev", None) => self.ms_flags &= !libc::MS_NODEV,
                ("nodev", None) => self.ms_flags |= libc::MS_NODEV,
                ("exec", None) => self.ms_flags &= !libc::MS_NOEXEC,
                ("noexec", None) => self.ms_flags |= libc::MS_NOEXEC,
                // Linux: `atime` = the default, relatime.
                ("atime" | "relatime", None) => self.set_atime(AtimePolicy::Relatime),
                ("noatime", None) => self.set_atime(AtimePolicy::Never),
                ("strictatime", None) => self.set_atime(AtimePolicy::Strict),
                ("nodiratime", None) => {
                    self.nodiratime = true;
                    self.ms_flags |= libc::MS_NODIRATIME;
                }
                ("diratime", None) => {
                    self.nodiratime = false;
                    self.ms_flags &= !libc::MS_NODIRATIME;
                }
                ("auto_unmount", None) => self.auto_unmount = true,
                ("writeback_cache", None) => self.writeback_cache = true,
                ("no_writeback_cache", None) => self.writeback_cache = false,
                // mount(8)/fstab words for userspace, not for us or the
                // kernel (`rw` is handled above).
                (
                    "defaults" | "nofail" | "_netdev" | "auto" | "noauto" | "user" | "users"
                    | "nouser" | "owner" | "group",
                    None,
                ) => {}
                (k, _) if k.starts_with("x-") => {}
                ("sync", None) => self.ms_flags |= libc::MS_SYNCHRONOUS,
                ("async", None) => self.ms_flags &= !libc::MS_SYNCHRONOUS,
                ("dirsync", None) => self.ms_flags |= libc::MS_DIRSYNC,
                ("entry_timeout", Some(v)) => self.cache.entry_ttl = parse_secs(key, v)?,
                ("attr_timeout", Some(v)) => self.cache.attr_ttl = parse_secs(key, v)?,
                ("negative_timeout", Some(v)) => self.cache.negative_ttl = parse_secs(key, v)?,
                ("keep_cache", None) => self.cache.keep_cache = true,
                ("nokeep_cache", None) => self.cache.keep_cache = false,
                ("cache_dir", None) => self.cache.cache_dir = true,
                ("nocache_dir", None) => self.cache.cache_dir = false,
                _ => return Err(format!("unknown mount option '{opt}'")),
            }
        }
        if self.allow_other && self.allow_root {
            return Err("allow_other and allow_root are mutually exclusive".into());
        }
        if self.default_permissions && self.no_default_permissions {
            return Err("default_permissions and no_default_permissions contradict".into());
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

impl MountOptions {
    /// One of `relatime`, `strictatime`, `noatime` (the last one wins, as
    /// with mount(8)): the engine's policy and the matching kernel flag.
    fn set_atime(&mut self, policy: AtimePolicy) {
        self.atime = policy;
        self.ms_flags &= !(libc::MS_NOATIME | libc::MS_RELATIME | libc::MS_STRICTATIME);
        self.ms_flags |= match policy {
            AtimePolicy::Relatime => libc::MS_RELATIME,
            AtimePolicy::Strict => libc::MS_STRICTATIME,
            AtimePolicy::Never => libc::MS_NOATIME,
        };
    }

    /// The kernel cache settings to use: as configured, except for
    /// `allow_root` by a non-root mounter, where the daemon must see every
    /// access to refuse other users (entry, attribute and negative
    /// timeouts 0, no kept page cache or directory cache).
    pub fn effective_cache(&self) -> CacheConfig {
        let mut c = self.cache.clone();
        if self.allow_root && !mounter_is_root() {
            c.entry_ttl = Duration::ZERO;
            c.attr_ttl = Duration::ZERO;
            c.negative_ttl = Duration::ZERO;
            c.keep_cache = false;
            c.cache_dir = false;
        }
        c
    }

    /// Whether the kernel checks permissions: asked for, or implied by
    /// `allow_other`/`allow_root` (a mount opened to other users must not
    /// let them walk cached dentries past directories closed to them),
    /// unless explicitly refused with `no_default_permissions`.
    ///
    /// `writeback_cache` implies it too: the kernel then sends a user's
    /// `utimensat` and its own flush of the times it keeps in the same
    /// shape, and only the kernel's check tells who may set a time.
    pub fn effective_default_permissions(&self) -> bool {
        (self.default_permissions || self.allow_other || self.allow_root || self.writeback_cache)
            && !self.no_default_permissions
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

/// Which transport serves the kernel's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// FUSE-over-io_uring when the kernel offers it and
    /// `/sys/module/fuse/parameters/enable_uring` is on, else `/dev/fuse`.
    Auto,
    /// FUSE-over-io_uring; mounting fails when the kernel lacks it.
    Uring,
    /// Worker threads reading cloned `/dev/fuse` fds.
    Dev,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "uring" | "io_uring" => Ok(Transport::Uring),
            "dev" => Ok(Transport::Dev),
            _ => Err(format!("unknown transport '{s}' (auto, uring, dev)")),
        }
    }
}

/// `/dev/fuse` workers beside the io_uring queues.
const URING_DEV_THREADS: usize = 1;

/// Where the kernel says whether FUSE-over-io_uring may be used.
pub const ENABLE_URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether this kernel has FUSE-over-io_uring switched on.
pub fn uring_enabled() -> bool {
    std::fs::read_to_string(ENABLE_URING_PARAM).is_ok_and(|v| v.trim() == "Y")
}

/// A mounted, initialised FUSE session, ready to serve.
pub struct Mounted {
    fd: Arc<OwnedFd>,
    handler: Arc<Handler>,
    session: Arc<dispatch::Session>,
    threads: usize,
    mountpoint: PathBuf,
    transport: &'static str,
}

impl Mounted {
    /// Where it is mounted (canonical path).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The transport in use: `"dev"` or `"uring"`.
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// Serve requests on the configured threads until the file system is
    /// unmounted (returns `Ok` then).
    pub fn run(self) -> io::Result<()> {
        if self.session.uring {
            // /dev/fuse then only carries FORGET, INTERRUPT and what comes
            // before the rings are registered: one worker is enough.
            transport_uring::run(self.fd, self.handler, self.session, URING_DEV_THREADS)
        } else {
            transport_dev::run(self.fd, self.handler, self.session, self.threads)
        }
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
    // Before mounting: `--transport uring` fails with nothing to undo.
    let want_uring = match opts.transport {
        Transport::Dev => false,
        Transport::Auto | Transport::Uring => uring_enabled() && rings_allowed(opts)?,
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let fd = if euid == 0 {
        mount_syscall(&mnt, opts)?
    } else {
        fusermount::mount(&mnt, opts)?
    };
    // POSIX ACLs are evaluated by the kernel (with `FUSE_POSIX_ACL`) only
    // under `default_permissions`, which the flag forces on: without it
    // (`no_default_permissions`) the engine stays the only checker, and
    // evaluates ACLs itself (docs/FUSE.md, INIT flags).
    let want_acl = opts.effective_default_permissions();
    let mut session =
        match transport_dev::handshake(&fd, want_uring, opts.writeback_cache, want_acl) {
            Ok(s) => s,
            Err(e) => {
                let _ = unmount(&mnt, true);
                return Err(e);
            }
        };
    if opts.allow_root && euid != 0 {
        // The kernel lets everyone in (allow_other); we refuse all but the
        // mounting user and root. What the kernel serves from its caches
        // never reaches us, so the caches are off for such a mount (see
        // `MountOptions::effective_cache`).
        session.deny_others_except = Some(euid);
    }
    if opts.transport == Transport::Uring && !session.uring {
        let _ = unmount(&mnt, true);
        return Err(format!(
            "--transport uring: the kernel does not offer FUSE-over-io_uring (is {ENABLE_URING_PARAM} Y?)"
        ));
    }
    if opts.writeback_cache && !session.writeback {
        tracing::warn!("writeback_cache: the kernel did not grant it; writing through");
    }
    // Before any request is served: the handler's open and setattr
    // rules depend on it.
    handler.set_writeback(session.writeback);
    let transport = if session.uring { "uring" } else { "dev" };
    session.transport = transport;
    session.threads = if session.uring {
        transport_uring::possible_cpus().map_or(1, |c| c.len())
    } else {
        opts.threads.max(1)
    };
    let fd = Arc::new(fd);
    let notifier = transport_dev::Notifier::new(fd.clone());
    handler.set_invalidator(Box::new(move |ino, what| {
        // offset -1: attributes only, no page-cache work, so this is safe
        // to send from inside a request handler; pages only of directory
        // listings (every page for a moved directory, the first page of a
        // listing that a change straddled; `Handler::dir_moved` and
        // `dircache.rs` say why that is safe too). Offset 0, length 0:
        // every page; length 1: the first.
        let (off, len) = match what {
            handler::Invalidate::Attr => (-1, 0),
            handler::Invalidate::AttrAndPages => (0, 0),
            handler::Invalidate::AttrAndFirstPage => (0, 1),
        };
        if let Err(e) = notifier.inval_inode(ino, off, len) {
            tracing::debug!(ino, error = %e, "inval_inode failed");
        }
    }));
    Ok(Mounted {
        fd,
        handler,
        session: Arc::new(session),
        threads: opts.threads.max(1),
        mountpoint: mnt,
        transport,
    })
}

/// Whether this process may set up the io_uring transport's rings (FUSE
/// offering io_uring is not enough: `kernel.io_uring_disabled` can refuse
/// rings to this user, typically a non-root mounter). `--transport uring`
/// then fails; `auto` falls back to `/dev/fuse` and
/// says so in the log.
fn rings_allowed(opts: &MountOptions) -> Result<bool, String> {
    match transport_uring::rings_allowed() {
        Ok(()) => Ok(true),
        Err(e) if opts.transport == Transport::Uring => Err(format!(
            "--transport uring: this process cannot use io_uring: {e}"
        )),
        Err(e) => {
            tracing::warn!(reason = %e, "io_uring refused to this process; serving through /dev/fuse");
            Ok(false)
        }
    }
}

/// Whether this process mounts as root (then the kernel's own check,
/// `user_id=0,group_id=0` without `allow_other`, admits exactly root).
fn mounter_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the kernel must let every user in (`allow_other`): asked for,
/// or `allow_root` by a non-root mounter (the kernel cannot say "this user
/// and root", so the daemon refuses the others). `allow_root` by root
/// needs nothing: without `allow_other` the kernel admits only processes
/// of the mounting user, i.e. root, and refuses everyone else itself —
/// also for cached dentries and attributes, which the daemon never sees.
fn kernel_allow_other(opts: &MountOptions) -> bool {
    opts.allow_other || (opts.allow_root && !mounter_is_root())
}

/// The `mount(2)` data string for the kernel (also what `fusermount3`
/// gets, minus the fd and ids it adds itself).
fn kernel_options(opts: &MountOptions) -> String {
    let mut data = String::new();
    if opts.effective_default_permissions() {
        data.push_str(",default_permissions");
    }
    if kernel_allow_other(opts) {
        data.push_str(",allow_other");
    }
    data
}

/// Open `/dev/fuse` and `mount(2)` it on `mnt`.
fn mount_syscall(mnt: &Path, opts: &MountOptions) -> Result<OwnedFd, String> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| format!("cannot open /dev/fuse: {e} (is the fuse module loaded?)"))?;
    let fd: OwnedFd = dev.into();
    let data = format!(
        "fd={},rootmode={:o},user_id=0,group_id=0{}",
        fd.as_raw_fd(),
        libc::S_IFDIR,
        kernel_options(opts)
    );
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
        assert_eq!(o.atime, AtimePolicy::Never);
        o.apply("strictatime,nodiratime").unwrap();
        assert_eq!(o.atime, AtimePolicy::Strict);
        assert!(o.nodiratime);
        assert_eq!(
            o.ms_flags & (libc::MS_NOATIME | libc::MS_STRICTATIME | libc::MS_NODIRATIME),
            libc::MS_STRICTATIME | libc::MS_NODIRATIME
        );
        o.apply("atime").unwrap();
        assert_eq!(o.atime, AtimePolicy::Relatime);
        // fstab/mount(8) words are accepted and change nothing.
        let before = format!("{o:?}");
        o.apply("defaults,nofail,_netdev,auto,noauto,user,users,x-systemd.automount,x-mount.mkdir")
            .unwrap();
        assert_eq!(format!("{o:?}"), before);
        o.apply("auto_unmount").unwrap();
        assert!(o.auto_unmount);
        assert!(o
            .apply("x")
            .unwrap_err()
            .contains("unknown mount option 'x'"));
        assert!(o.apply("bogus").unwrap_err().contains("bogus"));
        assert!(o.apply("attr_timeout=x").is_err());
        assert!(o.apply("subtype=a.b").is_err());
        let mut o = MountOptions::default();
        o.apply("allow_other").unwrap();
        assert!(o.effective_default_permissions(), "allow_other implies it");
        o.apply("no_default_permissions").unwrap();
        assert!(!o.effective_default_permissions(), "explicit opt-out");
        assert!(
            o.apply("allow_root").is_err(),
            "allow_root with allow_other"
        );
        let mut o = MountOptions::default();
        assert!(!o.effective_default_permissions());
        o.apply("allow_root").unwrap();
        assert!(o.effective_default_permissions());
        let want = if mounter_is_root() {
            ",default_permissions"
        } else {
            ",default_permissions,allow_other"
        };
        assert_eq!(kernel_options(&o), want);
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
