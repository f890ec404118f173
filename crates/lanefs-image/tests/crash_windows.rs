//! Targeted crash windows: the engine (`lanefs_core::Fs`) on an
//! `ImageStore` on a `CrashDevice`, one short scenario per window, cut at
//! *every* device event of the scenario (each with a few seeds choosing
//! which unflushed writes land, half of them tearing sectors):
//!
//! * truncate down, then fsync: the file is the old one or the truncated
//!   one, and a truncated file extended again reads zeros past the cut
//!   (never the bytes the truncate dropped);
//! * rename over an existing file (the victim open or not): one name holds
//!   one full content, the victim is freed, never leaked;
//! * unlink of an open file, then sync: the orphan is freed at recovery,
//!   no other file is lost;
//! * fsync of a file beside a sibling never fsynced: the fsynced one keeps
//!   its content and size;
//! * a full image (`ENOSPC`), then frees and new writes;
//! * (ignored, a known limit) a long extending write, fsynced: a file
//!   whose new size was lost and is then extended by truncate should
//!   read zeros past its old size;
//!
//! and after each cut, a second cut during the recovery itself at a random
//! event, then a full recovery: the same checks hold (recovering twice).
//! Every recovered image is fsck-clean before and after recovery and
//! passes the engine's check (no leaked inode, counts exact).
//!
//! Knob: `LANEFS_WINDOW_SEEDS` (multiplies the seeds per cut event,
//! default 1: one, twelve in the truncate window);
//! `LANEFS_CRASH_SEED`.

mod common;

use std::sync::Arc;

use common::*;
use lanefs_core::{Cred, Fs, FsConfig, OpenFile, SetAttr, ROOT_INO};
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{ImageStore, MemDevice};
use lanefs_store::{Errno, Result};

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

/// Content `v` of file `k`: no 8-byte word is zero, and no two versions
/// share a word.
fn content(k: u64, v: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut w = 0u64;
    while out.len() < len {
        let word = (k + 1) << 48 | (v + 1) << 32 | (w + 1);
        out.extend_from_slice(&word.to_le_bytes());
        w += 1;
    }
    out.truncate(len);
    out
}

/// What the scenario's calls returned: the labels of the steps done, and
/// the device events when each was done.
#[derive(Default)]
struct Done(Vec<&'static str>, Vec<u64>, Option<Arc<CrashDevice>>);

impl Done {
    fn has(&self, l: &str) -> bool {
        self.0.contains(&l)
    }

    fn mark(&mut self, l: &'static str) {
        self.0.push(l);
        self.1.push(self.2.as_ref().map_or(0, |d| d.events()));
    }

    /// Device events when step `l` was done.
    fn events_at(&self, l: &str) -> Option<u64> {
        self.0.iter().position(|x| *x == l).map(|i| self.1[i])
    }
}

type Body = fn(&Fs, &ImageStore, &mut Done) -> Result<()>;
type Check = fn(&Fs, &Done, &str);

fn create(fs: &Fs, name: &str, data: &[u8]) -> Result<OpenFile> {
    let (_, f, _) = fs.open_at(
        &Cred::root(),
        ROOT_INO,
        name.as_bytes(),
        CREAT,
        0o644,
        0,
        false,
    )?;
    fs.write(&f, 0, data)?;
    Ok(f)
}

fn read_name(fs: &Fs, name: &str) -> Option<Vec<u8>> {
    let root = Cred::root();
    let a = fs.lookup(&root, ROOT_INO, name.as_bytes()).ok()?;
    let f = fs.open(&root, a.ino, libc::O_RDONLY).unwrap();
    let mut buf = vec![0u8; a.size as usize];
    assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), buf.len());
    Some(buf)
}

fn set_size(fs: &Fs, f: &OpenFile, size: u64) -> Result<()> {
    let ch = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(&Cred::root(), f.ino(), &ch, Some(f)).map(drop)
}

// ---- truncate down, then fsync ----

const TRUNC_LEN: usize = 3 * 4096 + 100;
const TRUNC_TO: u64 = 100;

fn truncate_body(fs: &Fs, store: &ImageStore, done: &mut Done) -> Result<()> {
    let f = create(fs, "t", &content(0, 0, TRUNC_LEN))?;
    fs.fsync(&f, false)?;
    // The pages' mappings go home: the truncate's zeroed tail page is
    // then overwritten in place.
    store.checkpoint()?;
    done.mark("setup");
    set_size(fs, &f, TRUNC_TO)?;
    done.mark("truncated");
    fs.fsync(&f, false)?;
    done.mark("synced");
    Ok(())
}

fn truncate_check(fs: &Fs, done: &Done, what: &str) {
    if !done.has("setup") {
        return;
    }
    let old = content(0, 0, TRUNC_LEN);
    let got = read_name(fs, "t").unwrap_or_else(|| panic!("{what}: t missing"));
    match got.len() as u64 {
        n if n == TRUNC_TO => {
            assert_eq!(got, old[..n as usize], "{what}: truncated t's content");
            // Extend it again: what the truncate dropped must read zeros.
            let root = Cred::root();
            let a = fs.lookup(&root, ROOT_INO, b"t").unwrap();
            let f = fs.open(&root, a.ino, libc::O_RDWR).unwrap();
            set_size(fs, &f, TRUNC_LEN as u64).unwrap();
            let mut buf = vec![0u8; TRUNC_LEN];
            assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), TRUNC_LEN);
            let stale = buf[TRUNC_TO as usize..].iter().position(|&b| b != 0);
            assert!(
                stale.is_none(),
                "{what}: t truncated to {TRUNC_TO} then extended reads a dropped byte at {}",
                TRUNC_TO as usize + stale.unwrap_or(0)
            );
        }
        n if n == TRUNC_LEN as u64 => {
            assert!(!done.has("synced"), "{what}: fsynced truncate lost");
            // The truncate's pages may be gone (punched before the size
            // reached the journal): zeros, never anything else.
            assert_eq!(got[..TRUNC_TO as usize], old[..TRUNC_TO as usize]);
            assert!(
                got.iter().zip(&old).all(|(g, o)| g == o || *g == 0),
                "{what}: t holds bytes never written"
            );
        }
        n => panic!("{what}: t has size {n}"),
    }
}

// ---- rename over an existing file ----

fn rename_body(fs: &Fs, _: &ImageStore, done: &mut Done, victim_open: bool) -> Result<()> {
    let root = Cred::root();
    let a = create(fs, "b", &content(1, 0, 6000))?;
    fs.fsync(&a, false)?;
    let keep = victim_open.then_some(a);
    done.mark("setup");
    let t = create(fs, "tmp", &content(1, 1, 9000))?;
    fs.fsync(&t, false)?;
    done.mark("tmp synced");
    drop(t);
    fs.rename(&root, ROOT_INO, b"tmp", ROOT_INO, b"b", 0)?;
    done.mark("renamed");
    fs.sync()?;
    done.mark("synced");
    if let Some(h) = keep {
        // The victim is still readable through its handle.
        let mut buf = vec![0u8; 6000];
        fs.read(&h, 0, &mut buf)?;
        assert_eq!(buf, content(1, 0, 6000));
        drop(h);
        fs.sync()?;
        done.mark("victim closed");
    }
    Ok(())
}

fn rename_check(fs: &Fs, done: &Done, what: &str) {
    if !done.has("setup") {
        return;
    }
    let b = read_name(fs, "b");
    let tmp = read_name(fs, "tmp");
    let (old, new) = (content(1, 0, 6000), content(1, 1, 9000));
    if done.has("synced") {
        assert_eq!(b.as_ref(), Some(&new), "{what}: synced rename lost");
        assert!(tmp.is_none(), "{what}: tmp came back");
        return;
    }
    match (b, tmp) {
        (Some(b), None) if b == new => {}
        (Some(b), Some(t)) if b == old && t == new => {}
        (Some(b), None) if b == old => assert!(!done.has("tmp synced"), "{what}: fsynced tmp lost"),
        (Some(b), Some(t)) if b == old => assert!(
            !done.has("tmp synced")
                && (t.is_empty() || t.len() == new.len())
                && t.iter().zip(&new).all(|(a, n)| a == n || *a == 0),
            "{what}: tmp holds content never written"
        ),
        (b, t) => panic!(
            "{what}: b {:?} bytes, tmp {:?} bytes: neither state",
            b.map(|v| v.len()),
            t.map(|v| v.len())
        ),
    }
}

// ---- unlink of an open file ----

fn unlink_open_body(fs: &Fs, _: &ImageStore, done: &mut Done) -> Result<()> {
    let root = Cred::root();
    let mut files = Vec::new();
    for k in 0..3u64 {
        let f = create(fs, &format!("u{k}"), &content(2 + k, 0, 5000))?;
        fs.fsync(&f, false)?;
        files.push(f);
    }
    done.mark("setup");
    fs.unlink(&root, ROOT_INO, b"u1")?;
    done.mark("unlinked");
    // Written while unlinked: pages of an orphan.
    fs.write(&files[1], 8192, &content(9, 9, 5000))?;
    fs.fsync(&files[1], false)?;
    fs.sync()?;
    done.mark("synced");
    // A file never fsynced beside it.
    let s = create(fs, "s", &content(8, 0, 7000))?;
    fs.write(&files[0], 0, &content(2, 1, 5000))?;
    drop(s);
    Ok(())
}

fn unlink_open_check(fs: &Fs, done: &Done, what: &str) {
    if !done.has("setup") {
        return;
    }
    for k in [0u64, 2] {
        let got = read_name(fs, &format!("u{k}")).unwrap_or_else(|| panic!("{what}: u{k} lost"));
        assert!(
            got == content(2 + k, 0, 5000) || (k == 0 && got == content(2, 1, 5000)),
            "{what}: u{k} has other content"
        );
    }
    let u1 = read_name(fs, "u1");
    if done.has("synced") {
        assert!(u1.is_none(), "{what}: synced unlink undone");
    } else if let Some(u1) = u1 {
        assert_eq!(u1, content(3, 0, 5000), "{what}: u1 has other content");
    }
}

// ---- fsync beside a sibling never fsynced ----

fn sibling_body(fs: &Fs, _: &ImageStore, done: &mut Done) -> Result<()> {
    let s = create(fs, "sib", &content(4, 0, 10_000))?;
    done.mark("sib written");
    let g = create(fs, "g", &content(5, 0, 4096 * 2 + 17))?;
    fs.fsync(&g, false)?;
    done.mark("g synced");
    fs.write(&s, 10_000, &content(4, 1, 3000))?;
    fs.write(&g, 4096 * 2 + 17, &content(5, 1, 500))?;
    fs.fsync(&g, false)?;
    done.mark("g grown");
    drop(s);
    Ok(())
}

fn sibling_check(fs: &Fs, done: &Done, what: &str) {
    let g = read_name(fs, "g");
    let g0 = content(5, 0, 4096 * 2 + 17);
    let mut g1 = g0.clone();
    g1.extend(content(5, 1, 500));
    if done.has("g grown") {
        assert_eq!(g.as_ref(), Some(&g1), "{what}: fsynced g (grown) lost");
    } else if done.has("g synced") {
        assert!(
            g.as_ref() == Some(&g0) || g.as_ref() == Some(&g1),
            "{what}: fsynced g lost"
        );
    }
    if let Some(s) = read_name(fs, "sib") {
        let mut all = content(4, 0, 10_000);
        all.extend(content(4, 1, 3000));
        assert!(
            s.len() <= all.len() && s.iter().zip(&all).all(|(a, b)| a == b || *a == 0),
            "{what}: sib holds bytes never written"
        );
    }
}

// ---- a full image ----

fn full_body(fs: &Fs, _: &ImageStore, done: &mut Done) -> Result<()> {
    let root = Cred::root();
    let chunk = content(6, 0, 64 << 10);
    let mut k = 0;
    // Fill: each file fsynced, until ENOSPC.
    loop {
        let name = format!("x{k}");
        let f = match create(fs, &name, &chunk) {
            Ok(f) => f,
            Err(Errno::ENOSPC) => break,
            Err(e) => return Err(e),
        };
        match fs.fsync(&f, false) {
            Ok(()) => {}
            Err(Errno::ENOSPC) => break,
            Err(e) => return Err(e),
        }
        done.mark(leak(name));
        k += 1;
    }
    done.mark("full");
    // Free a few, write again, sync.
    for j in 0..k.min(3) {
        fs.unlink(&root, ROOT_INO, format!("x{j}").as_bytes())?;
    }
    fs.sync()?;
    done.mark("freed");
    let f = create(fs, "y", &chunk)?;
    fs.fsync(&f, false)?;
    done.mark("y synced");
    Ok(())
}

/// Labels are `&'static str`; the full scenario's file names are few.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn full_check(fs: &Fs, done: &Done, what: &str) {
    let chunk = content(6, 0, 64 << 10);
    let freed = done.has("freed");
    for l in &done.0 {
        let Some(j) = l.strip_prefix('x').and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        let got = read_name(fs, l);
        if freed && j < 3 {
            assert!(got.is_none(), "{what}: {l} unlinked and synced, back");
        } else if !(j < 3 && done.has("full")) {
            assert_eq!(got.as_ref(), Some(&chunk), "{what}: fsynced {l} lost");
        }
    }
    if done.has("y synced") {
        assert_eq!(read_name(fs, "y").as_ref(), Some(&chunk), "{what}: y lost");
    }
}

// ---- a long extending write, fsynced ----

const GROW_PAGES: u64 = 200;

fn grow_body(fs: &Fs, _: &ImageStore, done: &mut Done) -> Result<()> {
    let f = create(fs, "w", &content(7, 0, 4096))?;
    fs.fsync(&f, false)?;
    done.mark("setup");
    // Its writeback's records fill a lane buffer several times over:
    // batches that map pages are committed before the one with the size.
    fs.write(&f, 4096, &content(7, 1, (GROW_PAGES as usize - 1) * 4096))?;
    fs.fsync(&f, false)?;
    done.mark("synced");
    Ok(())
}

fn grow_check(fs: &Fs, done: &Done, what: &str) {
    if !done.has("setup") {
        return;
    }
    let got = read_name(fs, "w").unwrap_or_else(|| panic!("{what}: w lost"));
    if got.len() == 4096 {
        assert!(!done.has("synced"), "{what}: fsynced growth lost");
        // Extend it by truncate: what lies past the old size reads zeros.
        let root = Cred::root();
        let a = fs.lookup(&root, ROOT_INO, b"w").unwrap();
        let f = fs.open(&root, a.ino, libc::O_RDWR).unwrap();
        let len = GROW_PAGES as usize * 4096;
        set_size(fs, &f, len as u64).unwrap();
        let mut buf = vec![0u8; len];
        assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), len);
        let stale = buf[4096..].iter().position(|&b| b != 0);
        assert!(
            stale.is_none(),
            "{what}: w extended by truncate reads unsynced bytes past its old size at {}",
            4096 + stale.unwrap_or(0)
        );
    }
}

// ---- the harness ----

fn run_body(dev: Arc<CrashDevice>, body: Body, done: &mut Done) -> Result<()> {
    done.2 = Some(dev.clone());
    let store = Arc::new(ImageStore::open_device(dev, &cfg())?);
    let fs = Fs::new(store.clone(), FsConfig::default())?;
    body(&fs, &store, done)
}

/// Open the image (recovery), check it, drop; returns the image after.
fn verify(dev: Arc<MemDevice>, done: &Done, check: Check, what: &str) {
    let fs = recover_engine(dev.clone(), what);
    check(&fs, done, what);
    // What the check changed (a truncate up over stale pages) keeps the
    // engine's counts consistent too.
    assert_clean_after(fs, dev, what, "the scenario's check");
}

fn scenario(name: &str, image_bytes: usize, body: Body, check: Check) {
    scenario_from(name, image_bytes, body, check, None, 1);
}

/// Events before a scenario's window that are cut: one in this many.
const BEFORE_STRIDE: u64 = 8;

/// Cut at every event from `back` events before step `from` on (every
/// event if `None`), with `seeds` seeds each (times
/// `LANEFS_WINDOW_SEEDS`), and at one event in [`BEFORE_STRIDE`] before.
fn scenario_from(
    name: &str,
    image_bytes: usize,
    body: Body,
    check: Check,
    from: Option<(&str, u64)>,
    seeds: u64,
) {
    let seeds = seeds * env_u64("LANEFS_WINDOW_SEEDS", 1);
    let base = fresh(image_bytes).snapshot();
    let dry = Arc::new(CrashDevice::new(base.clone(), None, 1, false));
    let mut dry_done = Done::default();
    run_body(dry.clone(), body, &mut dry_done).unwrap();
    let events = dry.events();
    let first = from.map_or(1, |(l, back)| {
        dry_done
            .events_at(l)
            .expect("step done")
            .saturating_sub(back)
            + 1
    });
    let mut rng = env_u64("LANEFS_CRASH_SEED", 0xc4a5) ^ name.len() as u64 | 1;
    for cut_at in 1..=events {
        // Before the window: every BEFORE_STRIDE-th event, one seed.
        let seeds = match cut_at >= first {
            true => seeds,
            false if cut_at % BEFORE_STRIDE == 0 => 1,
            false => 0,
        };
        for s in 0..seeds {
            let seed = next_rand(&mut rng);
            let tear = (s + cut_at) % 2 == 1;
            let dev = Arc::new(CrashDevice::new(base.clone(), Some(cut_at), seed, tear));
            let mut done = Done::default();
            // The cut may also fall in the final checkpoint at drop.
            let _ = run_body(dev.clone(), body, &mut done);
            let Some(image) = dev.crash_image() else {
                continue;
            };
            let what = format!("{name}: cut at {cut_at}/{events} (seed {seed:#x}, tear {tear})");
            // Recover twice: a cut during recovery first.
            let again = recovery_cut(&image, seed, tear);
            verify(Arc::new(MemDevice::from_bytes(image)), &done, check, &what);
            if let Some((image, at)) = again {
                verify(
                    Arc::new(MemDevice::from_bytes(image)),
                    &done,
                    check,
                    &format!("{what}, then recovery cut at {at}"),
                );
            }
        }
    }
}

/// The image a power cut during the recovery of `image` leaves, at a
/// random event of it (`None` if recovery writes nothing).
fn recovery_cut(image: &[u8], seed: u64, tear: bool) -> Option<(Vec<u8>, u64)> {
    let dry = Arc::new(CrashDevice::new(image.to_vec(), None, seed, tear));
    drop(ImageStore::open_device(dry.clone(), &cfg()).ok()?);
    let events = dry.events();
    let mut rng = seed ^ 0x7e57 | 1;
    let at = 1 + next_rand(&mut rng) % events.max(1);
    let dev = Arc::new(CrashDevice::new(image.to_vec(), Some(at), seed, tear));
    let _ = ImageStore::open_device(dev.clone(), &cfg());
    dev.crash_image().map(|i| (i, at))
}

/// A truncate's size reaching the media without its zeroed tail page
/// (overwritten in place, flushed with the batch) must not bring the
/// dropped bytes back when the file grows again: many seeds at each event
/// after the setup, so that the cut keeps the batch and drops the page.
#[test]
fn crash_during_truncate_down_then_extend_reads_zeros() {
    scenario_from(
        "truncate",
        4 << 20,
        truncate_body,
        truncate_check,
        Some(("setup", 0)),
        12,
    );
}

#[test]
fn crash_during_rename_over_an_existing_file() {
    scenario(
        "rename",
        4 << 20,
        |fs, s, d| rename_body(fs, s, d, false),
        rename_check,
    );
}

#[test]
fn crash_during_rename_over_an_open_file() {
    scenario(
        "rename-open",
        4 << 20,
        |fs, s, d| rename_body(fs, s, d, true),
        rename_check,
    );
}

#[test]
fn crash_after_unlink_of_an_open_file() {
    scenario("unlink-open", 4 << 20, unlink_open_body, unlink_open_check);
}

#[test]
fn crash_keeps_a_fsynced_file_beside_an_unsynced_one() {
    scenario("sibling", 4 << 20, sibling_body, sibling_check);
}

/// Pages an extending write mapped in a batch before the one with the size
/// survive a cut that loses the size, past it; a truncate that then grows
/// the file over them must read zeros there (docs/FORMAT.md, "Derived
/// fields": the engine removes a persistent store's pages past a file's
/// size when it first learns the file's pages, `pcache::learn`).
#[test]
fn crash_during_a_long_extending_write_then_truncate_up_reads_zeros() {
    scenario_from(
        "grow",
        4 << 20,
        grow_body,
        grow_check,
        Some(("setup", 0)),
        2,
    );
}

#[test]
fn crash_on_a_full_image() {
    // Every event from the last files written before ENOSPC on.
    scenario_from(
        "full",
        4 << 20,
        full_body,
        full_check,
        Some(("full", 24)),
        1,
    );
}

tiny_budget_too!(
    crash_during_truncate_down_then_extend_reads_zeros,
    crash_during_rename_over_an_open_file,
    crash_after_unlink_of_an_open_file,
);
