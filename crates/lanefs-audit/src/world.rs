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
//! Observable state: every path's kind, permissions, size, link count,
//! contents (symlink targets too), which paths are links of one inode (inode
//! numbers compared only up to renaming: each is replaced by the path
//! where the sorted walk first meets it), each inode's timestamps as
//! changed/unchanged since preparation (or `new`), the contents and
//! attributes of the handles still open, and `statfs`'s free counts.
//!
//! Locks: `handles` and `kept` are the harness's own `std` mutexes (not
//! the engine's, never recorded), taken one at a time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use lanefs::{File, Filesystem};
use lanefs_core::{Attr, FileKind, FsConfig, MemoryStore, Store, Timespec, Variants};

use crate::ops::Raw;
use crate::store::RecordingStore;

/// The files each side holds a handle to.
pub const FILES: [&str; 3] = ["/d1/f1", "/d1/f2", "/d2/g1"];

/// One prepared state.
pub struct World {
    pub fs: Filesystem,
    /// `handles[side][file]`.
    handles: Mutex<[[Option<Arc<File>>; 3]; 2]>,
    /// Handles opened by `open`/`create` ops, closed when the world goes.
    kept: Mutex<Vec<File>>,
    /// Timestamps at preparation, by (inode, generation).
    prepared: HashMap<(u64, u64), [Timespec; 3]>,
}

impl World {
    /// A fresh file system with `variants`, holding the prepared tree.
    pub fn prepare(variants: &Variants) -> std::io::Result<World> {
        let store: Arc<dyn Store> = Arc::new(RecordingStore::new(MemoryStore::default()));
        let config = FsConfig {
            variants: *variants,
            ..FsConfig::default()
        };
        let fs = Filesystem::from_store(store, config)?;
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
        let mut world = World {
            fs,
            handles: Mutex::new(handles),
            kept: Mutex::new(Vec::new()),
            prepared: HashMap::new(),
        };
        let mut prepared = HashMap::new();
        for (_, a) in world.walk_attrs()? {
            prepared.insert((a.ino, a.generation), [a.atime, a.mtime, a.ctime]);
        }
        world.prepared = prepared;
        Ok(world)
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
                    .map(|(n, k, _)| format!("{}:{k}", String::from_utf8_lossy(n)))
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
