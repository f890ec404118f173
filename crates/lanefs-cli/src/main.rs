//! `lanefs`: mkfs, mount, fsck, umount, stats, bench, audit. Argument parsing,
//! logging and process plumbing only; the file system lives in the library
//! crates (the image commands are in `image.rs`, the conflict audit in `audit.rs`,
//! `lanefs umount`'s retry of a passing EBUSY in `umount.rs`).

/// The process allocator: mimalloc. The engine frees much of what it
/// allocates on another thread (epoch-deferred frees run on whichever
/// thread collects; an evicted inode is freed by the evicting thread), and
/// glibc's malloc takes the owning arena's lock for every such free: in
/// seed000 two threads spent a quarter of their time in that lock's futex.
/// mimalloc frees to the owning thread's heap without a lock. The library
/// crates impose no allocator; an embedding program picks its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Give back what this thread's mimalloc heap holds free (pages other
/// threads freed into it included): the idle upkeep every FUSE worker runs
/// once the mount goes quiet (`lanefs_fuse::upkeep`).
fn give_back_free_memory() {
    // SAFETY: mi_collect has no preconditions; it works on the calling
    // thread's own heap and the shared arenas, under mimalloc's own locks.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// One line to stderr, as `eprintln!` but never a panic: `eprintln!`
/// panics when stderr is a closed pipe (the reader of a foreground
/// daemon's stderr gone), and neither a daemon nor a command must die, or
/// exit 101, for a line nobody reads.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// One line to stdout, as `println!` but never a panic: a report read by
/// `head` or a closed pipe must not turn a clean fsck into exit 101. Such
/// a report keeps its command's own exit status (fsck's is its result);
/// commands whose output is the product (`stats`, `bench`, `audit`) write
/// through [`lanefs_bench::out::stdout`] and die of SIGPIPE as coreutils
/// do once their reader is gone.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod audit;
mod daemon;
mod helper;
mod image;
mod syslog;
mod umount;
mod watch;

use clap::{Args, Parser, Subcommand};
use lanefs_core::{Fs, FsConfig, MemoryStore, MemoryStoreConfig, PAGE_SIZE};
use lanefs_fuse::{Handler, HandlerConfig, MountOptions};

/// Environment variable through which a backgrounding `lanefs mount` tells
/// its daemon child the fd of the readiness pipe.
const READY_FD_ENV: &str = "LANEFS_READY_FD";
/// How long a signalled daemon waits for its session to end after the
/// unmount before it exits anyway.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);
/// Longest readiness message read from the daemon.
const READY_MSG_BYTES_MAX: u64 = 4096;
/// First word of the readiness message of a daemon that mounted; the rest
/// of the line (an image's recovery report) is shown to the user.
const READY_OK: &str = "ok";

#[derive(Parser, Debug)]
#[command(
    name = "lanefs",
    version,
    about = "lanefs: an embeddable many-core file system"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Format a file or block device as an empty lanefs image.
    Mkfs(image::MkfsArgs),
    /// Mount a lanefs file system (an image, or --memory) through FUSE.
    Mount(MountArgs),
    /// Check (and with --repair, fix) an unmounted lanefs image.
    /// Exit status, as e2fsck's: 0 clean; 1 problems found and all
    /// repaired; 4 problems left (found without --repair, or not
    /// repairable); 8 operational error (cannot read, not a lanefs image).
    Fsck(image::FsckArgs),
    /// Unmount a mounted lanefs (as `fusermount3 -u` does); for an image,
    /// return once its daemon has written it back and let go of it.
    Umount(UmountArgs),
    /// Show how a mounted lanefs is served (transport, threads, ...).
    Stats(StatsArgs),
    /// Make everything written to a mounted lanefs durable (what syncfs(2)
    /// and sync(1) do on a local file system; through FUSE they never
    /// reach the daemon).
    Sync(StatsArgs),
    /// Run benchmarks.
    Bench(lanefs_bench::cli::BenchArgs),
    /// (internal) The `auto_unmount` watcher a daemon starts.
    #[command(name = "auto-unmount-watch", hide = true)]
    AutoUnmountWatch(watch::WatchArgs),
    /// Conflict audit: which commuting operation pairs share a cache line
    /// (build with `--features audit`; see docs/AUDIT.md).
    Audit(audit::AuditArgs),
}

#[derive(Args, Debug)]
struct MountArgs {
    /// Keep everything in memory (the embedded default store).
    #[arg(long)]
    memory: bool,
    /// `[IMAGE] MOUNTPOINT`: with --memory only the mount point.
    #[arg(value_name = "[IMAGE] MOUNTPOINT", num_args = 1..=2, required = true)]
    paths: Vec<PathBuf>,
    /// Stay in the foreground (otherwise return once the mount is ready).
    #[arg(short, long)]
    foreground: bool,
    /// Mount options: ro, allow_other or allow_root (both imply
    /// default_permissions; no_default_permissions opts out),
    /// default_permissions, fsname=NAME, subtype=NAME, nonempty, noexec,
    /// nosuid/suid, nodev/dev, noatime, sync, dirsync, entry_timeout=S,
    /// attr_timeout=S, negative_timeout=S, nokeep_cache, nocache_dir (no
    /// kernel listing cache; it is on by default: docs/FUSE.md),
    /// writeback_cache (the kernel's writeback cache; docs/FUSE.md), ...
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Request-serving threads (default: number of CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// How requests reach the daemon: auto (io_uring when the kernel
    /// offers it and enable_uring is on, else /dev/fuse), uring, or dev.
    #[arg(long, default_value = "auto")]
    transport: lanefs_fuse::Transport,
    /// Capacity of the memory store (e.g. 64M, 2G; default 1G).
    #[arg(long, value_parser = parse_size)]
    capacity: Option<u64>,
    /// Most inodes of the memory store (default 1048576).
    #[arg(long)]
    inodes: Option<u64>,
    /// Memory budget for the inode and page caches (e.g. 256M). Without
    /// it: the engine's defaults (a million inodes, 1 GiB of pages) and,
    /// on an image, 512 MiB for the store's inode objects.
    #[arg(long, value_parser = parse_size)]
    cache_size: Option<u64>,
    /// Image mounts: seconds between background commits (write-back of
    /// everything cached, then a journal commit): what a crash can lose
    /// beyond what was fsynced. 0 turns it off (default 5).
    #[arg(long, value_name = "SECONDS", value_parser = image::parse_interval)]
    commit_interval: Option<Duration>,
    /// Write logs here (default: stderr in the foreground, syslog/journald
    /// for a backgrounded daemon).
    #[arg(long)]
    log_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct StatsArgs {
    mountpoint: PathBuf,
}

#[derive(Args, Debug)]
struct UmountArgs {
    /// Lazy unmount: detach now, finish when the last file is closed.
    #[arg(short = 'z', long)]
    lazy: bool,
    mountpoint: PathBuf,
}

/// Parse `64M`, `2G`, `512k`, `4096`, `1GiB`, ... into bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("bad size '{s}' (use e.g. 64M, 2G)"))
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match helper::translate(&args[1.min(args.len())..]) {
        None => Cli::parse(),
        Some(Ok(mount_args)) => {
            Cli::parse_from(std::iter::once(OsString::from("lanefs")).chain(mount_args))
        }
        Some(Err(msg)) => {
            say!("lanefs: {msg}");
            return ExitCode::FAILURE;
        }
    };
    match cli.cmd {
        Cmd::Mkfs(a) => match image::cmd_mkfs(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => {
                say!("lanefs mkfs: {msg}");
                ExitCode::FAILURE
            }
        },
        Cmd::Fsck(a) => image::cmd_fsck(&a),
        Cmd::Mount(a) => match cmd_mount(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => {
                say!("lanefs mount: {msg}");
                ExitCode::FAILURE
            }
        },
        Cmd::Umount(a) => match cmd_umount(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => {
                say!("lanefs umount: {msg}");
                ExitCode::FAILURE
            }
        },
        Cmd::Stats(a) => match cmd_stats(&a) {
            Ok(()) => lanefs_bench::out::success(),
            Err(msg) => {
                say!("lanefs stats: {msg}");
                ExitCode::FAILURE
            }
        },
        Cmd::Sync(a) => match lanefs_core::sync_mount(&a.mountpoint) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                say!(
                    "lanefs sync: {}: not a lanefs mount, or the sync failed ({e})",
                    a.mountpoint.display()
                );
                ExitCode::FAILURE
            }
        },
        Cmd::AutoUnmountWatch(a) => watch::run(&a),
        Cmd::Audit(a) => audit::cmd_audit(&a),
        Cmd::Bench(a) => match lanefs_bench::cli::run(a) {
            Ok(()) => lanefs_bench::out::success(),
            Err(msg) => {
                say!("{msg}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Logs go to `log_file`; else, for a backgrounded daemon (`daemonized`,
/// no terminal), to syslog/journald; else to stderr.
fn init_logging(log_file: Option<&Path>, daemonized: bool) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // No "[tracing-subscriber] Unable to write an event" on stderr when
    // the log's writer fails: that is an `eprintln!`, which panics when
    // stderr is a closed pipe (a foreground daemon's reader gone), and
    // from the panic hook below (which logs) a second panic aborts.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false);
    match log_file {
        None if daemonized => {
            let log = syslog::Syslog::from_env().map_err(|e| format!("syslog socket: {e}"))?;
            let _ = builder
                .with_ansi(false)
                .without_time()
                .with_writer(log)
                .try_init();
        }
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("log file {}: {e}", p.display()))?;
            let _ = builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(f))
                .try_init();
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
    // Panics are caught per request; make sure the message lands in the log.
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        tracing::error!(thread = thread.name().unwrap_or("?"), "panic: {info}");
    }));
    Ok(())
}

/// The mount point and the checked options of a mount command.
struct MountPlan {
    /// The image to serve; `None`: --memory.
    image: Option<PathBuf>,
    mountpoint: PathBuf,
    opts: MountOptions,
}

fn plan(a: &MountArgs) -> Result<MountPlan, String> {
    let mut opts = MountOptions::default();
    for o in &a.options {
        opts.apply(o)?;
    }
    opts.transport = a.transport;
    opts.threads = match a.threads {
        Some(0) => return Err("--threads must be at least 1".into()),
        Some(n) => n,
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    };
    let (image, mountpoint) = match (a.memory, a.paths.as_slice()) {
        (true, [m]) => (None, m.clone()),
        (true, [_, _]) => return Err("--memory takes only a MOUNTPOINT, not an IMAGE".into()),
        (false, [img, m]) => (Some(img.clone()), m.clone()),
        (false, _) => return Err("give IMAGE MOUNTPOINT, or --memory MOUNTPOINT".into()),
        (true, _) => return Err("give a MOUNTPOINT".into()),
    };
    if image.is_some() && (a.capacity.is_some() || a.inodes.is_some()) {
        return Err("--capacity and --inodes apply to --memory; an image has its mkfs size".into());
    }
    if image.is_none() && a.commit_interval.is_some() {
        return Err("--commit-interval applies to image mounts only".into());
    }
    if let Some(img) = &image {
        // Fail fast, before forking, on an image we cannot read.
        image::check_openable(img)?;
        // The image's path is the mount's source (what `mount`, `df` and
        // `findmnt` show, as for a disk), unless `-o fsname=` names one:
        // `lanefs umount` learns from it which image to wait for.
        let named = a
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .any(|o| o.starts_with("fsname="));
        if !named {
            if let Some(p) = img
                .canonicalize()
                .ok()
                .and_then(|p| p.to_str().map(String::from))
            {
                if !p.contains(|c: char| c == ',' || c.is_whitespace()) {
                    opts.fsname = p;
                }
            }
        }
    }
    Ok(MountPlan {
        image,
        mountpoint,
        opts,
    })
}

fn cmd_mount(a: MountArgs) -> Result<(), String> {
    // Before any thread exists (it edits the environment).
    daemon::take_notify_socket();
    let plan = plan(&a)?;
    let ready_fd = std::env::var(READY_FD_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok());
    if !a.foreground && ready_fd.is_none() {
        // Fail fast on what we can see from here; the daemon checks again.
        lanefs_fuse::check_mountpoint(&plan.mountpoint, plan.opts.nonempty)?;
        return daemon::spawn_daemon();
    }
    // SAFETY: the fd number came from our parent, which created the pipe's
    // write end for us and passed it on (not close-on-exec); we own it now.
    let ready = ready_fd.map(|fd| unsafe { std::fs::File::from(OwnedFd::from_raw_fd(fd)) });
    if let Some(r) = &ready {
        // Helpers we start (fusermount3, which stays with auto_unmount)
        // must not hold the pipe open: the parent waits for its end.
        // SAFETY: fcntl on an fd we own.
        unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(r),
                libc::F_SETFD,
                libc::FD_CLOEXEC,
            )
        };
    }
    std::env::remove_var(READY_FD_ENV);
    match serve(&a, plan, ready) {
        Ok(()) => Ok(()),
        Err((msg, Some(mut ready))) => {
            let _ = writeln!(ready, "{msg}");
            Err(msg)
        }
        Err((msg, None)) => Err(msg),
    }
}

type ServeError = (String, Option<std::fs::File>);

fn serve(a: &MountArgs, plan: MountPlan, ready: Option<std::fs::File>) -> Result<(), ServeError> {
    // Before any thread starts (the log writer, the image store's commit
    // thread, the engine's): each inherits the mask, so a SIGTERM always
    // reaches the thread that unmounts.
    daemon::block_shutdown_signals();
    if let Err(e) = init_logging(a.log_file.as_deref(), ready.is_some()) {
        return Err((e, ready));
    }
    let mut store_cfg = MemoryStoreConfig::default();
    if let Some(c) = a.capacity {
        store_cfg.capacity_bytes = c;
    }
    if let Some(n) = a.inodes {
        store_cfg.max_inodes = n;
    }
    let mut fs_cfg = FsConfig {
        // A new store's root belongs to whoever mounts it (as a tmpfs a
        // user mounts in their own namespace, or mke2fs's root_owner): a
        // user's own mount must be writable by them. An image's root is
        // made at its first mount; later mounts keep it.
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        root_uid: unsafe { libc::geteuid() },
        root_gid: unsafe { libc::getegid() },
        atime: plan.opts.atime,
        nodiratime: plan.opts.nodiratime,
        // The kernel's `may_linkat` applies the host's current
        // `fs.protected_hardlinks` to every LINK before it is sent (its
        // read/write test through the permission hook, which asks nothing
        // without `default_permissions`): the engine's own check (on by
        // default) refused links the host allows (tests/sysctl.rs,
        // xfstests generic/597). Without `default_permissions` the engine
        // makes it, as the host had it at mount.
        protected_hardlinks: !plan.opts.effective_default_permissions()
            && std::fs::read_to_string("/proc/sys/fs/protected_hardlinks")
                .map_or(true, |v| v.trim() != "0"),
        ..FsConfig::default()
    };
    if let Some(c) = a.cache_size {
        // Half for data pages, a quarter for the engine's inodes (about
        // 1 KiB each with their directory index share); an image mount
        // gives the last quarter to the store's inode objects
        // (`image::store_cache_bytes`). A memory store keeps everything
        // in its own memory, so the quarter is not used there.
        fs_cfg.cache_pages_max = ((c / 2) / PAGE_SIZE as u64).max(64) as usize;
        fs_cfg.cache_inodes_max = ((c / 4) / 1024).max(64) as usize;
    }
    let mut ready_line = READY_OK.to_string();
    let mut commit_every = None;
    // Declared before the store so that it outlives it: the mark stays
    // set until the last write-back is done (`lanefs_image::holder`).
    let mut finishing: Option<Arc<lanefs_image::FinishingMark>> = None;
    let mut image_store = None;
    let store: Arc<dyn lanefs_core::Store> = match &plan.image {
        None => Arc::new(MemoryStore::new(store_cfg)),
        Some(img) => {
            let every = match a.commit_interval {
                None => Some(lanefs_image::COMMIT_INTERVAL_DEFAULT),
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
            };
            // Without `--cache-size`, the store's own default budget (the
            // engine keeps its defaults too): never every object.
            let cache = a
                .cache_size
                .map_or(lanefs_image::CACHE_BYTES_DEFAULT, image::store_cache_bytes);
            let store = match image::open_store(img, every, cache) {
                Ok(s) => s,
                Err(e) => return Err((e, ready)),
            };
            match lanefs_image::FinishingMark::open(img) {
                Ok(m) => finishing = Some(Arc::new(m)),
                Err(e) => return Err((format!("{}: {e}", img.display()), ready)),
            }
            let line = image::recovery_line(img, store.recovery_report());
            tracing::info!("{line}");
            if ready.is_none() {
                say!("lanefs mount: {line}");
            }
            ready_line = format!("{READY_OK} {line}");
            commit_every = every;
            image_store = Some(store.clone());
            store
        }
    };
    let fs = match Fs::new(store, fs_cfg) {
        Ok(fs) => fs,
        Err(e) => return Err((format!("cannot create file system: {e}"), ready)),
    };
    let hcfg = HandlerConfig {
        cache: plan.opts.effective_cache(),
        default_permissions: plan.opts.effective_default_permissions(),
        fault_panic_name: None,
        fault_worker_panic_name: None,
        sync_writes: plan.opts.ms_flags & libc::MS_SYNCHRONOUS != 0,
        sync_dir_changes: plan.opts.ms_flags & libc::MS_DIRSYNC != 0,
    }
    .with_env_faults();
    if let Some(n) = &hcfg.fault_panic_name {
        tracing::warn!(name = %String::from_utf8_lossy(n), "fault injection enabled");
    }
    let handler = Arc::new(Handler::new(fs, hcfg));
    handler.upkeep().enable(give_back_free_memory);
    let failure = || {
        image_store
            .as_ref()
            .and_then(|s| s.failure())
            .map(|f| format!("the image store failed on {f}"))
    };
    let result = daemon::serve_mounted(
        &plan,
        handler.clone(),
        ready,
        &ready_line,
        commit_every,
        &failure,
        // From the unmount on, a new opener of the image (`mount`, `fsck`)
        // waits for this daemon's last write-back instead of failing "in
        // use" after `LOCK_WAIT`; `lanefs umount` waits for it too.
        Box::new({
            let finishing = finishing.clone();
            move || {
                if let Some(Err(e)) = finishing.map(|m| m.set()) {
                    tracing::warn!(error = %e, "cannot mark the image as finishing");
                }
            }
        }),
    );
    if plan.image.is_some() {
        // Everything the engine still caches goes to the image; dropping
        // the last reference to the store then checkpoints it.
        if let Err(e) = handler.fs().sync() {
            // The calls after a store failure answer EIO: say what failed
            // it (the host's ENOSPC under a sparse image, say).
            let cause = image_store
                .as_ref()
                .and_then(|s| s.failure())
                .map(|f| format!("; the image store failed on {f}"))
                .unwrap_or_default();
            tracing::error!(error = %e, "final sync of the image failed{cause}");
            // What was not committed before is lost: never exit 0 for
            // that (a failed store, the image's host file system full).
            // The image recovers to its last commit at the next mount.
            if result.is_ok() {
                return Err((
                    format!(
                        "final write-back to the image failed ({e}{cause}): changes since \
                         the last commit are lost; the next mount recovers the image"
                    ),
                    None,
                ));
            }
        }
    }
    result
}

/// Whether `mnt` (canonical) is a FUSE mount point, per mountinfo.
fn is_fuse_mount(mnt: &Path) -> bool {
    watch::fuse_mount_id(mnt).is_some()
}

/// `lanefs stats MNT`: the daemon answers the xattr
/// [`lanefs_core::STATS_XATTR`] on the root with `key=value` lines
/// (read by [`lanefs_core::read_mount_stats`], as `lanefs bench` does).
fn cmd_stats(a: &StatsArgs) -> Result<(), String> {
    let text = lanefs_core::read_mount_stats(&a.mountpoint)
        .map_err(|e| format!("{}: not a lanefs mount ({e})", a.mountpoint.display()))?;
    lanefs_bench::out::stdout(&text)
}

fn cmd_umount(a: &UmountArgs) -> Result<(), String> {
    let shown = a.mountpoint.display();
    // Do not follow into a hung mount: canonicalize the parent, not the
    // mount point itself.
    let name = a
        .mountpoint
        .file_name()
        .ok_or_else(|| format!("{shown}: not a mount point"))?;
    let parent = match a.mountpoint.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mnt = parent
        .canonicalize()
        .map_err(|e| format!("{shown}: {e}"))?
        .join(name);
    if !is_fuse_mount(&mnt) {
        return Err(format!("{shown}: not a FUSE mount point"));
    }
    let image = umount::image_of(&mnt);
    // A passing EBUSY (a child of another thread between fork and exec
    // still holding the file just closed) is retried for a moment.
    umount::unmount(&mnt, a.lazy).map_err(|e| format!("{shown}: {e}"))?;
    // The kernel has let go; the daemon may still be writing the image
    // back. Return when it is done, so that what follows (a copy of the
    // image, `fsck`, the next mount) finds it whole and free. Not after
    // `-z`: the mount lives on until its last user leaves.
    if let (Some(img), false) = (image, a.lazy) {
        match lanefs_image::wait_for_release(&img, lanefs_image::LOCK_WAIT) {
            Ok(true) => {}
            Ok(false) => say!(
                "lanefs umount: {shown} unmounted; {} is still held (its daemon, or a new user)",
                img.display()
            ),
            Err(e) => say!(
                "lanefs umount: {shown} unmounted; cannot wait for {}: {e}",
                img.display()
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("x").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn cli_shape() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let c =
            Cli::try_parse_from(["lanefs", "mount", "--memory", "/mnt", "-o", "ro", "-f"]).unwrap();
        match c.cmd {
            Cmd::Mount(m) => {
                assert!(m.memory && m.foreground);
                assert_eq!(m.paths, vec![PathBuf::from("/mnt")]);
            }
            _ => panic!("wrong subcommand"),
        }
        let c = Cli::try_parse_from([
            "lanefs",
            "mount",
            "fs.img",
            "/mnt",
            "--commit-interval",
            "0.5",
        ])
        .unwrap();
        match c.cmd {
            Cmd::Mount(m) => {
                let p = plan(&m);
                // fs.img does not exist: refused before any fork, one line.
                assert!(p.is_err_and(|e| e.contains("fs.img") && !e.contains('\n')));
                assert_eq!(m.commit_interval, Some(Duration::from_millis(500)));
            }
            _ => panic!("wrong subcommand"),
        }
        let c = Cli::try_parse_from(["lanefs", "mkfs", "fs.img", "--size", "64M"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Mkfs(m) if m.size == Some(64 << 20) && !m.force));
        let c = Cli::try_parse_from(["lanefs", "fsck", "fs.img", "--repair"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Fsck(f) if f.repair));
        let c = Cli::try_parse_from([
            "lanefs",
            "mount",
            "--memory",
            "/mnt",
            "--commit-interval",
            "1",
        ])
        .unwrap();
        match c.cmd {
            Cmd::Mount(m) => assert!(plan(&m).is_err()),
            _ => panic!("wrong subcommand"),
        }
    }
}
