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
                .truncate(&*s, INO, AT + 4, (Timespec::default(), Timespec::default()))
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
