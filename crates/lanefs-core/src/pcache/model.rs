//! Shuttle model checks of the lock-free read against the changes that
//! advance the sequence count: write, punch, truncate and page drops.

use lanefs_store::MemoryStore;

use super::read::{LockedRead, LocklessRead, PageCache};
use super::*;
use crate::sync::Arc;

const INO: Ino = 7;
/// The range every reader reads: 8 bytes on each side of a page boundary,
/// so a read spans two pages and one of them is punched.
const AT: u64 = PAGE - 8;
const LEN: usize = 16;

fn write(f: &FileData, s: &MemoryStore, off: u64, data: &[u8]) {
    let mut pm = f.write();
    pm.prepare(s, INO, page_range(off, data.len() as u64))
        .unwrap();
    pm.write(off, data, Timespec::default());
}

/// Every state the writer thread passes through, as a reader of
/// `[AT, AT + LEN)` must see it.
fn versions() -> Vec<Vec<u8>> {
    let mut punched = vec![2u8; 8];
    punched.extend([0u8; 8]);
    vec![vec![1; LEN], vec![2; LEN], punched, vec![2; 4]]
}

fn check_reads(design: &'static dyn PageCache) {
    let store = Arc::new(MemoryStore::default());
    let file = Arc::new(FileData::new(0, true));
    write(&file, &store, AT, &[1; LEN]);
    let writer = {
        let (f, s) = (file.clone(), store.clone());
        shuttle::thread::spawn(move || {
            write(&f, &s, AT, &[2; LEN]);
            f.write().punch(&*s, INO, PAGE, PAGE).unwrap();
            f.write()
                .truncate(
                    &*s,
                    INO,
                    AT + 4,
                    Some((Timespec::default(), Timespec::default())),
                )
                .unwrap();
        })
    };
    let dropper = {
        let (f, s) = (file.clone(), store.clone());
        shuttle::thread::spawn(move || {
            let mut pm = f.write();
            pm.flush(&*s, INO).unwrap();
            pm.drop_clean();
        })
    };
    let allowed = versions();
    let mut seen = 0;
    for _ in 0..2 {
        let mut buf = [0xAAu8; LEN];
        let (n, _) = design.read(&file, &*store, INO, AT, &mut buf);
        let got = buf[..n.unwrap()].to_vec();
        let v = allowed.iter().position(|a| *a == got);
        assert!(v.is_some(), "torn read {got:?}");
        let v = v.unwrap_or(0);
        assert!(v >= seen, "went back from version {seen} to {v}");
        seen = v;
    }
    writer.join().unwrap();
    dropper.join().unwrap();
    let mut buf = [0u8; LEN];
    let (n, _) = design.read(&file, &*store, INO, AT, &mut buf);
    assert_eq!(buf[..n.unwrap()], allowed[3][..]);
}

#[test]
fn model_lockless_read_vs_write_truncate_punch_drop() {
    crate::sync::check_random(
        || check_reads(&LocklessRead),
        crate::sync::model_iterations(),
    );
}

#[test]
fn model_locked_read_vs_write_truncate_punch_drop() {
    crate::sync::check_random(
        || check_reads(&LockedRead),
        crate::sync::model_iterations() / 4,
    );
}

/// A file two lanes overwrote (it has stripes): an overwrite of one page
/// under its stripe, or through the data lock when the stripe stays taken
/// (`file::write_data`).
fn overwrite(f: &FileData, s: &MemoryStore, off: u64, data: &[u8]) {
    if !f.try_overwrite(off, data) {
        write(f, s, off, data);
    }
}

/// Bytes each overwriter writes: three words, so that a copy overlapping
/// one can see it in part.
const HALF: usize = 24;

/// The `2 * HALF` bytes around [`PAGE`] after a writeback and a drop of
/// every clean page (so read back from the store), all threads joined.
fn written_back(file: &FileData, store: &MemoryStore) -> [u8; 2 * HALF] {
    {
        let mut pm = file.write();
        pm.flush(store, INO).unwrap();
        pm.drop_clean();
    }
    let mut buf = [0u8; 2 * HALF];
    let (n, _) = LocklessRead.read(file, store, INO, PAGE - HALF as u64, &mut buf);
    assert_eq!(n.unwrap(), 2 * HALF);
    buf
}

/// Two overwriters of the two pages around [`PAGE`] under their
/// stripes, a writeback and a page drop, and a lock-free reader: each half of
/// the read is one write's, and the overwrites survive the drop.
fn check_stripes() {
    let store = Arc::new(MemoryStore::default());
    let file = Arc::new(FileData::new(0, true));
    write(&file, &store, PAGE - HALF as u64, &[1; 2 * HALF]);
    {
        let mut pm = file.write();
        pm.note_pure_overwrite(Some(1));
        pm.note_pure_overwrite(Some(2));
        assert!(pm.held.is_some(), "the second lane gives the file stripes");
    }
    let writers: Vec<_> = [(PAGE - HALF as u64, 2u8), (PAGE, 3u8)]
        .into_iter()
        .map(|(off, byte)| {
            let (f, s) = (file.clone(), store.clone());
            shuttle::thread::spawn(move || overwrite(&f, &s, off, &[byte; HALF]))
        })
        .collect();
    let dropper = {
        let (f, s) = (file.clone(), store.clone());
        shuttle::thread::spawn(move || {
            // Apart: an overwrite may make a page dirty again between them.
            f.write().flush(&*s, INO).unwrap();
            f.write().drop_clean();
        })
    };
    let mut buf = [0xAAu8; 2 * HALF];
    let (n, _) = LocklessRead.read(&file, &*store, INO, PAGE - HALF as u64, &mut buf);
    assert_eq!(n.unwrap(), 2 * HALF);
    let (lo, hi) = buf.split_at(HALF);
    assert!(
        lo.iter().all(|b| *b == lo[0]) && [1, 2].contains(&lo[0]),
        "torn {buf:?}"
    );
    assert!(
        hi.iter().all(|b| *b == hi[0]) && [1, 3].contains(&hi[0]),
        "torn {buf:?}"
    );
    for t in writers {
        t.join().unwrap();
    }
    dropper.join().unwrap();
    let buf = written_back(&file, &store);
    assert_eq!(buf[..HALF], [2; HALF], "an overwrite was lost");
    assert_eq!(buf[HALF..], [3; HALF], "an overwrite was lost");
}

#[test]
fn model_overwrites_under_stripes_vs_lockless_read_writeback_drop() {
    crate::sync::check_random(check_stripes, crate::sync::model_iterations());
    crate::sync::check_pct(check_stripes, crate::sync::model_iterations(), 3);
}

/// An overwrite of page 0 under its stripe against a truncate to one page
/// (which retires the stripes), a writeback and page drop of the retired
/// file, a write that grows it again and a writable open's taking the
/// stripes back (`lanes`: the gate's `RETIRED`), with a lock-free reader:
/// the reader sees the overwrite whole or not at all, and it survives.
fn check_retire() {
    let store = Arc::new(MemoryStore::default());
    let file = Arc::new(FileData::new(0, true));
    write(&file, &store, PAGE - HALF as u64, &[1; 2 * HALF]);
    file.stripe_for_overwrites();
    assert!(file.has_stripes());
    let overwriter = {
        let (f, s) = (file.clone(), store.clone());
        shuttle::thread::spawn(move || overwrite(&f, &s, PAGE - HALF as u64, &[2; HALF]))
    };
    let cutter = {
        let (f, s) = (file.clone(), store.clone());
        shuttle::thread::spawn(move || {
            let times = Some((Timespec::default(), Timespec::default()));
            f.write().truncate(&*s, INO, PAGE, times).unwrap();
            f.write().flush(&*s, INO).unwrap();
            f.write().drop_clean();
            write(&f, &s, PAGE, &[4; HALF]);
            f.stripe_for_overwrites();
        })
    };
    let mut buf = [0xAAu8; HALF];
    let (n, _) = LocklessRead.read(&file, &*store, INO, PAGE - HALF as u64, &mut buf);
    assert_eq!(n.unwrap(), HALF);
    assert!(
        buf.iter().all(|b| *b == buf[0]) && [1, 2].contains(&buf[0]),
        "torn {buf:?}"
    );
    overwriter.join().unwrap();
    cutter.join().unwrap();
    assert!(file.has_stripes(), "taken back into use");
    let buf = written_back(&file, &store);
    assert_eq!(buf[..HALF], [2; HALF], "the overwrite was lost");
    assert_eq!(buf[HALF..], [4; HALF], "the growing write was lost");
}

#[test]
fn model_overwrite_vs_retire_and_unretire() {
    crate::sync::check_random(check_retire, crate::sync::model_iterations());
    crate::sync::check_pct(check_retire, crate::sync::model_iterations(), 3);
}
