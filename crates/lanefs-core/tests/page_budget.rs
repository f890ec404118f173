//! The page budget under writers running together: each writer over the
//! budget reclaims, walking its own parts of the inode cache (the reclaim
//! cursor), and stops once the cache is back under the budget. The cache
//! stays near its budget and no written byte is lost to the drops.

use std::sync::Arc;

use lanefs_core::*;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const BUDGET: usize = 64;
const THREADS: usize = 4;
const FILES: usize = 300;

fn mount() -> Fs {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 8192 * PAGE_SIZE as u64,
        max_inodes: 4096,
    }));
    let config = FsConfig {
        cache_pages_max: BUDGET,
        ..FsConfig::default()
    };
    Fs::new(store, config).unwrap()
}

fn name(t: usize, i: usize) -> Vec<u8> {
    format!("t{t}-f{i}").into_bytes()
}

/// The page file `i` of thread `t` holds.
fn page(t: usize, i: usize) -> Vec<u8> {
    let mut p = vec![(t * 31 + i) as u8; PAGE_SIZE];
    p[..8].copy_from_slice(&((t * FILES + i) as u64).to_le_bytes());
    p
}

#[test]
fn writers_over_the_page_budget_stay_near_it_and_lose_nothing() {
    let fs = mount();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let fs = &fs;
            s.spawn(move || {
                for i in 0..FILES {
                    let (_, f, _) = fs
                        .open_at(&Cred::root(), ROOT_INO, &name(t, i), CREAT, 0o644, 0, false)
                        .unwrap();
                    fs.write(&f, 0, &page(t, i)).unwrap();
                    drop(f);
                }
            });
        }
    });
    let cached = fs.cache_counts().1;
    // Each write over the budget reclaims down to 7/8 of it; a writer may
    // add its page after another's check.
    assert!(
        cached <= BUDGET + THREADS,
        "{cached} pages cached, budget {BUDGET}"
    );
    for t in 0..THREADS {
        for i in 0..FILES {
            let (_, f, _) = fs
                .open_at(
                    &Cred::root(),
                    ROOT_INO,
                    &name(t, i),
                    libc::O_RDONLY,
                    0,
                    0,
                    false,
                )
                .unwrap();
            let mut buf = vec![0u8; PAGE_SIZE + 1];
            let n = fs.read(&f, 0, &mut buf).unwrap();
            assert_eq!(n, PAGE_SIZE, "t{t}-f{i}");
            assert!(buf[..n] == page(t, i)[..], "t{t}-f{i}: contents");
            drop(f);
        }
    }
}
