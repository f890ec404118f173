//! Targets: what a workload runs against, and the managed ones' set-up and
//! tear-down.
//!
//! * `inproc` — the engine in this process ([`Inproc`]), one fresh instance
//!   per run, of the variant named by `--variant`;
//! * `PATH` or `LABEL=PATH` — any existing directory, through syscalls;
//! * `tmpfs`, `ext4`, `lanefs`, `lanefs-image` — managed: the tool mounts
//!   a fresh file system before the first cell and unmounts it after the
//!   last (also when a cell fails or the run errors out: [`Managed`]
//!   unmounts, and detaches its loop device, on drop). `ext4` and
//!   `lanefs-image` sit on the same kind of storage: a sparse
//!   [`DISK_IMAGE_BYTES`] file in the temp dir behind a loop device;
//! * `inproc-image` — the engine in this process on an [`ImageStore`]
//!   (`lanefs::ImageStore`) kept in a fresh image file per run;
//! * `vfs`, `rsfs` — peer libraries in process (cargo feature `peers`).
//!
//! Each run of a syscall target works in a fresh directory
//! `lanefs-bench.PID.N` under the target's root, removed afterwards (untimed).
//!
//! Shared state: none; a `Target` is used by the coordinating thread only.

use crate::backend::inproc::Inproc;
use crate::backend::sys::SysFs;
use crate::backend::Backend;
use crate::harness::Measurement;
use crate::workload::{self, Params, Workload};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long to wait for a FUSE mount to appear.
const MOUNT_WAIT_MAX: Duration = Duration::from_secs(20);
/// `--capacity` and `--inodes` of the managed lanefs mount.
const LANEFS_CAPACITY: &str = "8G";
const LANEFS_INODES: &str = "4194304";
/// Size of the managed tmpfs.
const TMPFS_SIZE: &str = "16g";
/// Size of the sparse file behind the managed ext4 and lanefs-image loop
/// devices (the lanefs image then has one inode per 16 KiB: 512Ki).
pub const DISK_IMAGE_BYTES: u64 = 8 << 30;
/// How long to wait for an image mount (recovery reads every inode table
/// first).
const IMAGE_MOUNT_WAIT_MAX: Duration = Duration::from_secs(120);
/// Size of the image file of each `inproc-image` run (sparse; 128Ki
/// inodes): made fresh per run, so smaller than the loop-backed one.
const INPROC_IMAGE_BYTES: u64 = 2 << 30;

/// A target as named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    Inproc { variant: String },
    Path { label: String, path: PathBuf },
    Tmpfs,
    Ext4,
    Lanefs,
    LanefsImage,
    InprocImage { variant: String },
    Vfs,
    Rsfs,
}

impl TargetSpec {
    /// Parse one `--target` value. `inproc` expands to one target per
    /// variant, so it takes them.
    pub fn parse(s: &str, variants: &[String]) -> Result<Vec<TargetSpec>, String> {
        let one = |t| Ok(vec![t]);
        match s {
            "inproc" => Ok(variants
                .iter()
                .map(|v| TargetSpec::Inproc { variant: v.clone() })
                .collect()),
            "tmpfs" => one(TargetSpec::Tmpfs),
            "ext4" => one(TargetSpec::Ext4),
            "lanefs" => one(TargetSpec::Lanefs),
            "lanefs-image" => one(TargetSpec::LanefsImage),
            "inproc-image" => Ok(variants
                .iter()
                .map(|v| TargetSpec::InprocImage { variant: v.clone() })
                .collect()),
            "vfs" | "rsfs" if !cfg!(feature = "peers") => {
                Err(format!("target {s}: built without the `peers` feature"))
            }
            "vfs" => one(TargetSpec::Vfs),
            "rsfs" => one(TargetSpec::Rsfs),
            _ => {
                let (label, path) = match s.split_once('=') {
                    Some((l, p)) if !l.is_empty() && !l.contains('/') => (l.to_string(), p),
                    _ => (s.to_string(), s),
                };
                let path = PathBuf::from(path);
                if !path.is_dir() {
                    return Err(format!(
                        "target {s:?}: not a known target (inproc, inproc-image, tmpfs, ext4, lanefs, lanefs-image, vfs, rsfs) nor a directory"
                    ));
                }
                one(TargetSpec::Path { label, path })
            }
        }
    }

    /// The name in results.
    pub fn name(&self) -> String {
        match self {
            TargetSpec::Inproc { .. } => "inproc".into(),
            TargetSpec::Path { label, .. } => label.clone(),
            TargetSpec::Tmpfs => "tmpfs".into(),
            TargetSpec::Ext4 => "ext4".into(),
            TargetSpec::Lanefs => "lanefs".into(),
            TargetSpec::LanefsImage => "lanefs-image".into(),
            TargetSpec::InprocImage { .. } => "inproc-image".into(),
            TargetSpec::Vfs => "vfs".into(),
            TargetSpec::Rsfs => "rsfs".into(),
        }
    }

    /// The engine variant, `-` for targets that are not the engine.
    pub fn variant(&self) -> String {
        match self {
            TargetSpec::Inproc { variant } | TargetSpec::InprocImage { variant } => variant.clone(),
            _ => "-".into(),
        }
    }
}

/// A mount this tool made; unmounted (and its directories removed) on drop.
pub struct Managed {
    mountpoint: PathBuf,
    /// Directory to remove after unmounting (holds the mountpoint, images).
    scratch: PathBuf,
    lanefs: Option<(PathBuf, Child)>,
    /// Loop device to detach after unmounting.
    loopdev: Option<PathBuf>,
}

fn run_cmd(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Is `dir` a mount point right now (per /proc/self/mountinfo)?
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| m.replace("\\040", " ") == want)
}

fn scratch_dir(kind: &str) -> Result<PathBuf, String> {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lanefs-bench.{kind}.{}.{n}", std::process::id()));
    std::fs::create_dir_all(dir.join("mnt")).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The lanefs binary: this executable when it is `lanefs`, else `$LANEFS_BIN`.
pub fn lanefs_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("LANEFS_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    if exe.file_name().is_some_and(|n| n == "lanefs") {
        Ok(exe)
    } else {
        Err("target lanefs: set LANEFS_BIN to the lanefs binary (or run as `lanefs bench`)".into())
    }
}

impl Managed {
    /// Mount a fresh tmpfs.
    pub fn tmpfs() -> Result<Managed, String> {
        let scratch = scratch_dir("tmpfs")?;
        let mnt = scratch.join("mnt");
        let m = Managed {
            mountpoint: mnt.clone(),
            scratch,
            lanefs: None,
            loopdev: None,
        };
        run_cmd(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={TMPFS_SIZE},mode=0755"))
                .arg("lanefs-bench")
                .arg(&mnt),
        )?;
        Ok(m)
    }

    /// Make an ext4 image and loop-mount it.
    pub fn ext4() -> Result<Managed, String> {
        let scratch = scratch_dir("ext4")?;
        let mnt = scratch.join("mnt");
        let img = scratch.join("ext4.img");
        let mut m = Managed {
            mountpoint: mnt.clone(),
            scratch,
            lanefs: None,
            loopdev: None,
        };
        let dev = m.attach_loop(&img)?;
        // One inode per 4 KiB so the create/unlink budgets fit.
        run_cmd(
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-i", "4096"])
                .arg(&dev),
        )?;
        run_cmd(Command::new("mount").arg(&dev).arg(&mnt))?;
        Ok(m)
    }

    /// Create `img`, a sparse [`DISK_IMAGE_BYTES`] file, and attach it to a
    /// free loop device (detached on drop).
    fn attach_loop(&mut self, img: &Path) -> Result<PathBuf, String> {
        let f = std::fs::File::create(img).map_err(|e| format!("{}: {e}", img.display()))?;
        f.set_len(DISK_IMAGE_BYTES)
            .map_err(|e| format!("{}: {e}", img.display()))?;
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(img)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup {}: {}",
                img.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        self.loopdev = Some(dev.clone());
        Ok(dev)
    }

    /// A fresh lanefs image on a loop device (the same kind of storage as
    /// [`Managed::ext4`]): `lanefs mkfs DEV`, then `lanefs mount DEV DIR
    /// -f`, waiting until it is mounted.
    pub fn lanefs_image(threads: Option<usize>) -> Result<Managed, String> {
        let bin = lanefs_bin()?;
        let scratch = scratch_dir("lanefs-image")?;
        let img = scratch.join("lanefs.img");
        let mut m = Managed {
            mountpoint: scratch.join("mnt"),
            scratch,
            lanefs: None,
            loopdev: None,
        };
        let dev = m.attach_loop(&img)?;
        run_cmd(Command::new(&bin).arg("mkfs").arg(&dev))?;
        let mut cmd = Command::new(&bin);
        cmd.arg("mount").arg(&dev).arg(&m.mountpoint).arg("-f");
        if let Some(n) = threads {
            cmd.arg("--threads").arg(n.to_string());
        }
        m.spawn_lanefs(bin, cmd, IMAGE_MOUNT_WAIT_MAX)?;
        Ok(m)
    }

    /// Spawn `lanefs mount --memory DIR -f` and wait until it is mounted.
    pub fn lanefs(threads: Option<usize>) -> Result<Managed, String> {
        let bin = lanefs_bin()?;
        let scratch = scratch_dir("lanefs")?;
        let mnt = scratch.join("mnt");
        let mut m = Managed {
            mountpoint: mnt.clone(),
            scratch,
            lanefs: None,
            loopdev: None,
        };
        let mut cmd = Command::new(&bin);
        // Room for the create / fs_mark budgets (the memory store's defaults
        // are 1 GiB and 1M inodes).
        cmd.arg("mount")
            .arg("--memory")
            .args(["--capacity", LANEFS_CAPACITY, "--inodes", LANEFS_INODES])
            .arg(&mnt)
            .arg("-f");
        if let Some(n) = threads {
            cmd.arg("--threads").arg(n.to_string());
        }
        m.spawn_lanefs(bin, cmd, MOUNT_WAIT_MAX)?;
        Ok(m)
    }

    /// Spawn `cmd` (a foreground `lanefs mount` on this mount point) and
    /// wait up to `wait` until the mount appears.
    fn spawn_lanefs(
        &mut self,
        bin: PathBuf,
        mut cmd: Command,
        wait: Duration,
    ) -> Result<(), String> {
        let mnt = self.mountpoint.clone();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        self.lanefs = Some((bin, child));
        let t0 = Instant::now();
        while !is_mounted(&mnt) {
            if let Some((_, child)) = self.lanefs.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let mut err = String::new();
                    if let Some(mut s) = child.stderr.take() {
                        use std::io::Read;
                        let _ = s.read_to_string(&mut err);
                    }
                    return Err(format!("lanefs mount exited with {status}: {}", err.trim()));
                }
            }
            if t0.elapsed() > wait {
                return Err(format!(
                    "lanefs mount: {} not mounted after {wait:?}",
                    mnt.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        let mnt = self.mountpoint.clone();
        if let Some((bin, mut child)) = self.lanefs.take() {
            if is_mounted(&mnt) && run_cmd(Command::new(&bin).arg("umount").arg(&mnt)).is_err() {
                let _ = run_cmd(Command::new("fusermount3").arg("-uz").arg(&mnt));
            }
            let t0 = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if t0.elapsed() > Duration::from_secs(5) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        } else if is_mounted(&mnt) {
            if let Err(e) = run_cmd(Command::new("umount").arg(&mnt)) {
                say!("lanefs bench: {e}; trying a lazy unmount");
                let _ = run_cmd(Command::new("umount").arg("-l").arg(&mnt));
            }
        }
        if let Some(dev) = self.loopdev.take() {
            if is_mounted(&mnt) {
                say!(
                    "lanefs bench: {} is still mounted; detach {} by hand",
                    mnt.display(),
                    dev.display()
                );
            } else if let Err(e) = run_cmd(Command::new("losetup").arg("-d").arg(&dev)) {
                say!("lanefs bench: {e}");
            }
        }
        if !is_mounted(&mnt) {
            let _ = std::fs::remove_dir_all(&self.scratch);
        } else {
            say!(
                "lanefs bench: {} is still mounted; unmount it by hand",
                mnt.display()
            );
        }
    }
}

/// A target ready to make fresh instances.
pub struct Target {
    pub spec: TargetSpec,
    /// Root directory of syscall targets.
    root: Option<PathBuf>,
    /// Keeps a managed mount alive; dropped last.
    _managed: Option<Managed>,
    runs: usize,
}

/// What one cell of one target came to.
#[derive(Debug)]
pub enum CellOutcome {
    Ok(Measurement),
    NotApplicable(String),
    Failed(String),
}

impl Target {
    /// Set the target up (mounting managed file systems).
    pub fn open(spec: TargetSpec, lanefs_threads: Option<usize>) -> Result<Target, String> {
        let (root, managed) = match &spec {
            TargetSpec::Path { path, .. } => (Some(path.clone()), None),
            TargetSpec::Tmpfs => {
                let m = Managed::tmpfs()?;
                (Some(m.mountpoint().to_path_buf()), Some(m))
            }
            TargetSpec::Ext4 => {
                let m = Managed::ext4()?;
                (Some(m.mountpoint().to_path_buf()), Some(m))
            }
            TargetSpec::Lanefs => {
                let m = Managed::lanefs(lanefs_threads)?;
                (Some(m.mountpoint().to_path_buf()), Some(m))
            }
            TargetSpec::LanefsImage => {
                let m = Managed::lanefs_image(lanefs_threads)?;
                (Some(m.mountpoint().to_path_buf()), Some(m))
            }
            TargetSpec::Inproc { variant } => {
                Inproc::new(variant)?;
                (None, None)
            }
            TargetSpec::InprocImage { variant } => {
                // Check the variant now; the images are made per run.
                crate::backend::inproc::canonical_variant(variant)?;
                (None, None)
            }
            TargetSpec::Vfs | TargetSpec::Rsfs => (None, None),
        };
        Ok(Target {
            spec,
            root,
            _managed: managed,
            runs: 0,
        })
    }

    /// How a lanefs mount serves this target, if it is one (managed, or
    /// a directory that is the root of a lanefs mount): the daemon's
    /// answer to `lanefs stats` (transport, threads, writeback cache, …)
    /// on one line. `None` for anything else.
    pub fn served(&self) -> Option<String> {
        let text = lanefs::read_mount_stats(self.root.as_ref()?).ok()?;
        let line = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        (!line.is_empty()).then_some(line)
    }

    /// Run one cell on a fresh instance of this target.
    pub fn run_cell(&mut self, w: Workload, threads: usize, p: &Params) -> CellOutcome {
        self.runs += 1;
        let outcome = |b: &dyn Fn() -> Option<&'static str>,
                       r: &dyn Fn() -> Result<Measurement, String>| {
            if let Some(why) = b() {
                return CellOutcome::NotApplicable(why.to_string());
            }
            match r() {
                Ok(m) => CellOutcome::Ok(m),
                Err(e) => CellOutcome::Failed(e),
            }
        };
        if w.is_seed() {
            return match &self.spec {
                TargetSpec::Inproc { variant } => match crate::seeds::run(variant, w, threads, p) {
                    Ok(m) => CellOutcome::Ok(m),
                    Err(e) => CellOutcome::Failed(e),
                },
                _ => CellOutcome::NotApplicable(crate::seeds::ENGINE_ONLY.to_string()),
            };
        }
        match &self.spec {
            TargetSpec::Inproc { variant } => match Inproc::new(variant) {
                Ok(b) => outcome(&|| b.unsupported(w), &|| workload::run(&b, w, threads, p)),
                Err(e) => CellOutcome::Failed(e),
            },
            #[cfg(feature = "peers")]
            TargetSpec::Vfs => {
                let b = crate::backend::peers::VfsPeer::new();
                outcome(&|| b.unsupported(w), &|| workload::run(&b, w, threads, p))
            }
            #[cfg(feature = "peers")]
            TargetSpec::Rsfs => {
                let b = crate::backend::peers::RsfsPeer::new();
                outcome(&|| b.unsupported(w), &|| workload::run(&b, w, threads, p))
            }
            #[cfg(not(feature = "peers"))]
            TargetSpec::Vfs | TargetSpec::Rsfs => {
                CellOutcome::Failed("built without the `peers` feature".into())
            }
            TargetSpec::InprocImage { variant } => {
                let img = std::env::temp_dir().join(format!(
                    "lanefs-bench.inproc-image.{}.img",
                    std::process::id()
                ));
                let r = match Inproc::on_image(variant, &img, INPROC_IMAGE_BYTES) {
                    Ok(b) => outcome(&|| b.unsupported(w), &|| workload::run(&b, w, threads, p)),
                    Err(e) => CellOutcome::Failed(e),
                };
                // The engine (and its store) is dropped: remove the image.
                let _ = std::fs::remove_file(&img);
                r
            }
            TargetSpec::Path { .. }
            | TargetSpec::Tmpfs
            | TargetSpec::Ext4
            | TargetSpec::Lanefs
            | TargetSpec::LanefsImage => {
                let Some(root) = &self.root else {
                    return CellOutcome::Failed("no root directory".into());
                };
                let dir = root.join(format!("lanefs-bench.{}.{}", std::process::id(), self.runs));
                if let Err(e) = std::fs::create_dir(&dir) {
                    return CellOutcome::Failed(format!("{}: {e}", dir.display()));
                }
                let r = match SysFs::open(&dir) {
                    Ok(b) => outcome(&|| b.unsupported(w), &|| workload::run(&b, w, threads, p)),
                    Err(e) => CellOutcome::Failed(e),
                };
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    say!("lanefs bench: removing {}: {e}", dir.display());
                }
                r
            }
        }
    }
}
