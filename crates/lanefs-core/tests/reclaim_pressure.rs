//! The process-wide cache budget drives the reclaim registry: mounts that
//! each stay under their own budget are shrunk together once their sum
//! passes the process limit. Its own test binary (one test), because the
//! limit and the registries are process-wide.

use std::sync::Arc;

use lanefs_core::*;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

fn mount(variants: Variants) -> Fs {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 4096 * PAGE_SIZE as u64,
        max_inodes: 1000,
    }));
    let config = FsConfig {
        variants,
        ..FsConfig::default()
    };
    Fs::new(store, config).unwrap()
}

/// Write `pages` pages into a new file of `fs` and close it.
fn fill(fs: &Fs, name: &[u8], pages: usize) {
    let (_, f, _) = fs
        .open_at(&Cred::root(), ROOT_INO, name, CREAT, 0o644, 0, false)
        .unwrap();
    for p in 0..pages {
        fs.write(&f, (p * PAGE_SIZE) as u64, &[7u8; PAGE_SIZE])
            .unwrap();
    }
}

#[test]
fn process_budget_reclaims_across_mounts_on_every_design() {
    const LIMIT: usize = 300;
    set_process_cache_limit(LIMIT);
    for v in [
        Variants::default(),
        Variants::parse("reclaim=rwlock").unwrap(),
        Variants::parse("reclaim=sync-grace").unwrap(),
    ] {
        let registered_before = registry(v.reclaim).len();
        let (a, b) = (mount(v), mount(v));
        assert_eq!(registry(v.reclaim).len(), registered_before + 2, "{v}");
        // Each mount alone is far under its own budget (2^18 pages).
        fill(&b, b"bf", 250);
        let b_pages = b.cache_counts().1;
        assert!(b_pages >= 200, "{v}: b cached {b_pages} pages");
        // a's writes push the process past LIMIT: a's budget check asks the
        // registry to scan, which shrinks b too.
        fill(&a, b"af", 250);
        let b_after = b.cache_counts().1;
        assert!(
            b_after < b_pages,
            "{v}: b kept {b_after} of {b_pages} pages"
        );
        let total = process_cached_objects();
        assert!(
            total <= (LIMIT + LIMIT / 8) as i64,
            "{v}: {total} cached in the process"
        );
        // Nothing was lost: the data reads back from the store.
        let root = Cred::root();
        let attr = b.lookup(&root, ROOT_INO, b"bf").unwrap();
        let f = b.open(&root, attr.ino, libc::O_RDONLY).unwrap();
        let mut buf = vec![0u8; PAGE_SIZE];
        assert_eq!(b.read(&f, 0, &mut buf).unwrap(), PAGE_SIZE);
        assert!(buf.iter().all(|x| *x == 7), "{v}");
        drop(f);
        for fs in [&a, &b] {
            if let Err(p) = fs.check() {
                panic!("{v}: {p:#?}");
            }
        }
        drop((a, b));
        assert_eq!(registry(v.reclaim).len(), registered_before, "{v}");
    }
    assert_eq!(
        process_cached_objects(),
        0,
        "dropped mounts leave the total"
    );
}
