//! The prepared state every run starts from, and what of a state is
//! observable (to decide commutativity).
//!
//! The tree (made afresh, on a fresh file system, for every run):
//!
//! ```text
//! /d1/f1    file 0644, 8 KiB of 'a'
//! /d1/f2    file 0644, 8 KiB of 'b', hard-linked as /d2/l2
//! /d1/sub/  empty directory
//! /d2/g1    file 0644, 4 KiB of 'c'
//! /d2/l2    the second link of /d1/f2
//! /d2/sub/  empty directory
//! ```
//!
//! Each file is read once after it is written (relatime's atime update is
//! done, as for a file read since its last change), and then, for each side (the two threads of a pair), one read-write handle
//! to each of `f1`, `f2`, `g1` ([`FILES`]).
//!
//! Besides the main instance, [`EXTRA_MOUNTS`] more file-system instances
//! per side, each an empty file system on a fresh memory store with the
//! world's variants (made as the main one, [`World::instance`]), for the
//! side's `umount` ops. Side `s`'s are made with the preparing thread
//! pinned to side `s`'s lane (`s + 1`, the lane its worker runs on), so
//! they join the reclaim registry as a mount made by that side would.
//! Instances that `mount` ops make are kept until the world is dropped
//! (never inside a recorded op). The two sides never share an instance,
//! as two processes each unmount their own mount: an `umount` of one
//! instance by both sides is not in the universe (the second would fail
//! with `EINVAL`, so the pair would not commute).
//!
//! Observable state: every path's kind, permissions, size, link count,
//! contents (symlink targets too), which paths are links of one inode (inode
//! numbers compared only up to renaming: each is replaced by the path
//! where the sorted walk first meets it), each inode's timestamps as
//! changed/unchanged since preparation (or `new`), the contents and
//! attributes of the handles still open, `statfs`'s free counts, and which
//! extra instances are mounted: each side's prepared ones still mounted,
//! the number each side's `mount` ops made, and each one's `statfs`.
//! Op results are named the same way: a `stat`'s inode, and each entry a
//! `readdir` returns with its kind and inode number (`getdents` returns
//! `d_ino`: a rename over a name changes what a listing says of it).
//!
//! Locks: `handles`, `kept`, `extra` and `mounted` are the harness's own
//! `std` mutexes (not the engine's, never recorded), taken one at a time
//! and never held while an instance is made or dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use lanefs::{File, Filesystem};
use lanefs_core::{Attr, FileKind, FsConfig, MemoryStore, Store, Timespec, Variants};

use crate::ops::Raw;
use crate::store::RecordingStore;

/// The files each side holds a handle to.
pub const FILES: [&str; 3] = ["/d1/f1", "/d1/f2", "/d2/g1"];

/// Extra file-system instances the preparation makes per side (for
/// `umount`).
pub const EXTRA_MOUNTS: usize = 2;

/// One prepared state.
pub struct World {
    pub fs: Filesystem,
    /// `handles[side][file]`.
    handles: Mutex<[[Option<Arc<File>>; 3]; 2]>,
    /// Handles opened by `open`/`create` ops, closed when the world goes.
    kept: Mutex<Vec<File>>,
    /// `extra[side][k]`: the side's prepared instances (`None` once
    /// unmounted).
    extra: Mutex<[[Option<Filesystem>; EXTRA_MOUNTS]; 2]>,
    /// Instances made by `mount` ops, with the side that made each; dropped
    /// with the world.
    mounted: Mutex<Vec<(usize, Filesystem)>>,
    variants: Variants,
    /// Timestamps at preparation, by (inode, generation).
    prepared: HashMap<(u64, u64), [Timespec; 3]>,
}

impl World {
    /// A fresh file system with `variants`, holding the prepared tree.
    pub fn prepare(variants: &Variants) -> std::io::Result<World> {
        let fs = World::instance(variants, None)?;
        for d in ["/d1", "/d1/sub", "/d2", "/d2/sub"] {
            fs.create_dir(d)?;
        }
        fs.write("/d1/f1", vec![b'a'; 8192])?;
        fs.write("/d1/f2", vec![b'b'; 8192])?;
        fs.write("/d2/g1", vec![b'c'; 4096])?;
        fs.hard_link("/d1/f2", "/d2/l2")?;
        // Read each file once, so that relatime's update after a write is
        // done: a read then updates no atime (see docs/AUDIT.md).
        for f in FILES {
            fs.read(f)?;
        }
        let mut handles: [[Option<Arc<File>>; 3]; 2] = Default::default();
        for side in &mut handles {
            for (i, h) in side.iter_mut().enumerate() {
                let f = fs.open_flags(FILES[i], libc::O_RDWR, 0)?;
                *h = Some(Arc::new(f));
            }
        }
        let mut extra: [[Option<Filesystem>; EXTRA_MOUNTS]; 2] = Default::default();
        let lane = lanefs_store::lane();
        for (side, mounts) in extra.iter_mut().enumerate() {
            lanefs_store::set_lane(side + 1);
            for (k, m) in mounts.iter_mut().enumerate() {
                match World::instance(variants, Some(&format!("m{side}.{k}"))) {
                    Ok(fs) => *m = Some(fs),
                    Err(e) => {
                        lanefs_store::set_lane(lane);
                        return Err(e);
                    }
                }
            }
        }
        lanefs_store::set_lane(lane);
        let mut world = World {
            fs,
            handles: Mutex::new(handles),
            kept: Mutex::new(Vec::new()),
            extra: Mutex::new(extra),
            mounted: Mutex::new(Vec::new()),
            variants: *variants,
            prepared: HashMap::new(),
        };
        let mut prepared = HashMap::new();
        for (_, a) in world.walk_attrs()? {
            prepared.insert((a.ino, a.generation), [a.atime, a.mtime, a.ctime]);
        }
        world.prepared = prepared;
        Ok(world)
    }

    /// A new file-system instance with `variants` on a fresh memory store
    /// (recorded at key level; an extra instance's keys carry `tag`).
    pub fn instance(variants: &Variants, tag: Option<&str>) -> std::io::Result<Filesystem> {
        let store: Arc<dyn Store> = match tag {
            None => Arc::new(RecordingStore::new(MemoryStore::default())),
            Some(tag) => Arc::new(RecordingStore::tagged(MemoryStore::default(), tag)),
        };
        let config = FsConfig {
            variants: *variants,
            ..FsConfig::default()
        };
        Filesystem::from_store(store, config)
    }

    /// `mount` on side `side`: a new instance, made on the calling thread
    /// (so in its lane), kept until the world is dropped.
    pub fn mount(&self, side: usize) -> std::io::Result<Raw> {
        let n = self
            .lock_mounted()
            .iter()
            .filter(|(s, _)| *s == side)
            .count();
        let fs = World::instance(&self.variants, Some(&format!("n{side}.{n}")))?;
        self.lock_mounted().push((side, fs));
        Ok(Raw::Unit)
    }

    /// `umount` on side `side`: drop the side's prepared instance `k` here,
    /// on the calling thread (its unmount, with the shrinker's
    /// unregistration, runs inside the caller's recorded section);
    /// `EINVAL` if it is not mounted.
    pub fn umount(&self, side: usize, k: usize) -> Raw {
        let fs = self.extra.lock().unwrap_or_else(|e| e.into_inner())[side]
            .get_mut(k)
            .and_then(Option::take);
        match fs {
            Some(fs) => {
                drop(fs);
                Raw::Unit
            }
            None => Raw::Err(libc::EINVAL),
        }
    }

    fn lock_mounted(&self) -> std::sync::MutexGuard<'_, Vec<(usize, Filesystem)>> {
        self.mounted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep a handle an op opened until the world is dropped.
    pub fn keep(&self, f: File) {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }

    /// Run `f` on side `side`'s handle to `FILES[file]` (`EBADF` once closed).
    pub fn with_handle(
        &self,
        side: usize,
        file: usize,
        f: impl FnOnce(&File) -> std::io::Result<Raw>,
    ) -> std::io::Result<Raw> {
        let h = self.handles.lock().unwrap_or_else(|e| e.into_inner())[side][file].clone();
        match h {
            Some(h) => f(&h),
            None => Err(std::io::Error::from_raw_os_error(libc::EBADF)),
        }
    }

    /// Close side `side`'s handle to `FILES[file]`: the last reference is
    /// dropped here, on the calling thread.
    pub fn close(&self, side: usize, file: usize) -> Raw {
        let h = self.handles.lock().unwrap_or_else(|e| e.into_inner())[side][file].take();
        match h {
            Some(h) => {
                drop(h);
                Raw::Unit
            }
            None => Raw::Err(libc::EBADF),
        }
    }

    /// Every path below the root (sorted) with its attributes.
    fn walk_attrs(&self) -> std::io::Result<Vec<(String, Attr)>> {
        let mut out = vec![("/".to_string(), self.fs.symlink_metadata("/")?.0)];
        let mut i = 0;
        while i < out.len() {
            let (path, attr) = out[i].clone();
            i += 1;
            if attr.kind != FileKind::Directory {
                continue;
            }
            let mut names = Vec::new();
            for e in self.fs.read_dir(&path)? {
                names.push(String::from_utf8_lossy(e?.name_bytes()).into_owned());
            }
            names.sort();
            for n in names {
                let p = if path == "/" {
                    format!("/{n}")
                } else {
                    format!("{path}/{n}")
                };
                let a = self.fs.symlink_metadata(&p)?.0;
                out.push((p, a));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// What of this state is observable (see the module doc).
    pub fn observe(&self) -> Observed {
        match self.try_observe() {
            Ok(o) => o,
            Err(e) => Observed {
                lines: vec![format!("observation failed: {e}")],
                names: HashMap::new(),
                prepared: self.prepared.clone(),
            },
        }
    }

    fn try_observe(&self) -> std::io::Result<Observed> {
        // Attributes first: reading contents may change access times.
        let attrs = self.walk_attrs()?;
        let handles: Vec<(usize, usize, Arc<File>)> = {
            let h = self.handles.lock().unwrap_or_else(|e| e.into_inner());
            (0..2)
                .flat_map(|s| (0..3).map(move |f| (s, f)))
                .filter_map(|(s, f)| h[s][f].clone().map(|h| (s, f, h)))
                .collect()
        };
        let handle_attrs: Vec<Attr> = handles
            .iter()
            .map(|(_, _, h)| h.metadata().map(|m| m.0))
            .collect::<std::io::Result<_>>()?;
        let mut names: HashMap<(u64, u64), String> = HashMap::new();
        for (p, a) in &attrs {
            names
                .entry((a.ino, a.generation))
                .or_insert_with(|| p.clone());
        }
        let mut obs = Observed {
            lines: Vec::new(),
            names,
            prepared: self.prepared.clone(),
        };
        for (p, a) in &attrs {
            let content = match a.kind {
                FileKind::Regular => digest(&self.fs.read(p)?),
                FileKind::Symlink => self.fs.read_link(p)?.display().to_string(),
                _ => String::new(),
            };
            let line = format!("{p}: {} {content}", obs.attr(a));
            obs.lines.push(line);
        }
        for ((side, file, h), a) in handles.iter().zip(&handle_attrs) {
            let mut buf = vec![0u8; a.size as usize];
            let n = h.read_at(&mut buf, 0)?;
            buf.truncate(n);
            let line = format!(
                "handle {side}/{}: {} {}",
                FILES[*file],
                obs.attr(a),
                digest(&buf)
            );
            obs.lines.push(line);
        }
        let st = self.fs.statfs()?;
        obs.lines.push(format!(
            "statfs: blocks_free={} files_free={}",
            st.blocks_free, st.files_free
        ));
        let extra: Vec<(String, Filesystem)> = {
            let e = self.extra.lock().unwrap_or_else(|e| e.into_inner());
            (0..2)
                .flat_map(|s| (0..EXTRA_MOUNTS).map(move |k| (s, k)))
                .filter_map(|(s, k)| e[s][k].clone().map(|fs| (format!("m{s}.{k}"), fs)))
                .collect()
        };
        let made: Vec<(String, Filesystem)> = {
            let m = self.lock_mounted();
            (0..2)
                .flat_map(|s| {
                    m.iter()
                        .filter(move |(side, _)| *side == s)
                        .enumerate()
                        .map(move |(n, (_, fs))| (format!("n{s}.{n}"), fs.clone()))
                })
                .collect()
        };
        for (tag, fs) in extra.iter().chain(&made) {
            let st = fs.statfs()?;
            obs.lines.push(format!(
                "mounted {tag}: blocks_free={} files_free={}",
                st.blocks_free, st.files_free
            ));
        }
        Ok(obs)
    }
}

/// A short, exact description of some bytes: runs of equal bytes.
fn digest(data: &[u8]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        let mut j = i;
        while j < data.len() && data[j] == b {
            j += 1;
        }
        runs.push(format!("{}x{:02x}", j - i, b));
        i = j;
    }
    format!("[{}]", runs.join(","))
}

/// An observed state, and the names that make op results comparable.
#[derive(Debug)]
pub struct Observed {
    /// One line per path and open handle, and statfs.
    pub lines: Vec<String>,
    /// Inode (number, generation) -> the first path it has in the sorted walk.
    names: HashMap<(u64, u64), String>,
    prepared: HashMap<(u64, u64), [Timespec; 3]>,
}

impl Observed {
    /// The name of an inode, up to renumbering.
    fn inode(&self, ino: u64, generation: u64) -> String {
        match self.names.get(&(ino, generation)) {
            Some(p) => format!("#{p}"),
            None => "#unlinked".to_string(),
        }
    }

    /// The name of an inode known by number only (a directory entry's
    /// `d_ino`): within one pair no number is freed and reused, so the
    /// number alone picks the inode.
    fn inode_by_number(&self, ino: u64) -> String {
        let mut found = self.names.iter().filter(|((i, _), _)| *i == ino);
        match found.next() {
            Some(((_, generation), _)) => self.inode(ino, *generation),
            None => "#unlinked".to_string(),
        }
    }

    /// Attributes with the inode named and timestamps as changed/unchanged.
    fn attr(&self, a: &Attr) -> String {
        let times = match self.prepared.get(&(a.ino, a.generation)) {
            Some(t) => {
                let flag = |was: Timespec, now: Timespec, c: char| if was == now { '-' } else { c };
                format!(
                    "{}{}{}",
                    flag(t[0], a.atime, 'a'),
                    flag(t[1], a.mtime, 'm'),
                    flag(t[2], a.ctime, 'c')
                )
            }
            None => "new".to_string(),
        };
        format!(
            "{:?} {:o} nlink={} size={} blocks={} uid={} gid={} ino={} t={}",
            a.kind,
            a.perm,
            a.nlink,
            a.size,
            a.blocks,
            a.uid,
            a.gid,
            self.inode(a.ino, a.generation),
            times
        )
    }

    /// An op's result, comparable across runs.
    pub fn result(&self, r: &Raw) -> String {
        match r {
            Raw::Unit => "ok".into(),
            Raw::Err(e) => format!("err {}", errno_name(*e)),
            Raw::Attr(a) => self.attr(a),
            Raw::Bytes(b) => digest(b),
            Raw::Count(n) => format!("{n} bytes"),
            Raw::Names(v) => {
                let mut entries: Vec<String> = v
                    .iter()
                    .map(|(n, k, ino)| {
                        let name = String::from_utf8_lossy(n);
                        format!("{name}:{k}:{}", self.inode_by_number(*ino))
                    })
                    .collect();
                entries.sort();
                entries.join(" ")
            }
        }
    }
}

fn errno_name(e: i32) -> String {
    let names: BTreeMap<i32, &str> = [
        (libc::ENOENT, "ENOENT"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::EBADF, "EBADF"),
        (libc::EINVAL, "EINVAL"),
        (libc::EPERM, "EPERM"),
        (libc::EACCES, "EACCES"),
    ]
    .into_iter()
    .collect();
    names
        .get(&e)
        .map_or_else(|| format!("errno {e}"), |n| n.to_string())
}
