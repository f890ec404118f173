//! Seeds 001, 002 and 004 through the engine, on every design of each: the
//! same operation sequence gives the same results and a clean check.

use std::sync::Arc;

use lanefs_core::*;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

/// The default and every baseline of the counter, orphan and reclaim
/// mechanisms.
fn designs() -> Vec<(String, Variants)> {
    let mut out = vec![("default".to_string(), Variants::default())];
    for mech in ["counter", "orphan", "reclaim"] {
        out.extend(Variants::baselines_of(mech));
    }
    out
}

fn mount(variants: Variants, cap_pages: u64, inodes: u64) -> Fs {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: cap_pages * PAGE_SIZE as u64,
        max_inodes: inodes,
    }));
    let config = FsConfig {
        variants,
        ..FsConfig::default()
    };
    Fs::new(store, config).unwrap()
}

fn checked(name: &str, fs: &Fs) {
    if let Err(problems) = fs.check() {
        panic!("{name}: check failed: {problems:#?}");
    }
}

/// Orphans (unlinked while open), ENOSPC on blocks and inodes, frees: a
/// transcript of results that must be identical on every design.
fn scenario(name: &str, fs: &Fs) -> Vec<String> {
    let root = Cred::root();
    let mut log = Vec::new();
    let mut open = Vec::new();
    for i in 0..6u8 {
        let (_, f, _) = fs
            .open_at(&root, ROOT_INO, &[b'f', b'0' + i], CREAT, 0o644, 0, false)
            .unwrap();
        log.push(format!("write {i}: {:?}", fs.write(&f, 0, &[i; 3 * 4096])));
        open.push(f);
    }
    log.push(format!(
        "too big: {:?}",
        fs.write(&open[0], 0, &[1; 40 * 4096])
    ));
    log.push(format!(
        "inodes full: {:?}",
        fs.mknod(&root, ROOT_INO, b"x", libc::S_IFREG | 0o644, 0, 0)
            .map(|a| a.nlink)
    ));
    for i in 0..6u8 {
        fs.unlink(&root, ROOT_INO, &[b'f', b'0' + i]).unwrap();
    }
    checked(name, fs);
    log.push(format!(
        "statfs with 6 orphans: {:?}",
        fs.statfs().map(|s| (s.blocks_free, s.files_free))
    ));
    for (i, f) in open.drain(..).enumerate() {
        if i % 2 == 0 {
            drop(f);
        } else {
            log.push(format!(
                "orphan still reads: {:?}",
                fs.read(&f, 0, &mut [0u8; 8])
            ));
            drop(f);
        }
        checked(name, fs);
    }
    log.push(format!(
        "statfs after: {:?}",
        fs.statfs().map(|s| (s.blocks_free, s.files_free))
    ));
    log
}

#[test]
fn every_design_gives_the_same_results() {
    let mut reference: Option<Vec<String>> = None;
    for (name, v) in designs() {
        let fs = mount(v, 24, 7);
        let log = scenario(&name, &fs);
        checked(&name, &fs);
        assert!(
            log.contains(&"too big: Err(ENOSPC)".to_string()),
            "{log:#?}"
        );
        assert!(
            log.contains(&"inodes full: Err(ENOSPC)".to_string()),
            "{log:#?}"
        );
        assert_eq!(log.last().unwrap(), "statfs after: Ok((24, 6))", "{log:#?}");
        match &reference {
            None => reference = Some(log),
            Some(r) => assert_eq!(&log, r, "{name} differs from the default"),
        }
    }
}

/// Threads create, open, unlink and close files while others allocate:
/// the orphan table and counters end exact on every design.
#[test]
fn racing_orphans_and_reservations_end_exact() {
    for (name, v) in designs() {
        let fs = mount(v, 64, 40);
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let root = Cred::root();
                    for i in 0..150u32 {
                        let n = format!("t{t}-{i}");
                        let Ok((_, f, _)) =
                            fs.open_at(&root, ROOT_INO, n.as_bytes(), CREAT, 0o644, 0, false)
                        else {
                            continue; // ENOSPC on inodes: fine, others hold them
                        };
                        let _ = fs.write(&f, 0, &[t; 5000]);
                        fs.unlink(&root, ROOT_INO, n.as_bytes()).unwrap();
                        drop(f);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        checked(&name, &fs);
        let s = fs.statfs().unwrap();
        assert_eq!((s.blocks_free, s.files_free), (64, 39), "{name}");
    }
}

/// Each mount joins its design's process-wide registry and leaves it when
/// dropped; dropping is immediate for the default.
#[test]
fn mounts_register_and_unregister() {
    for (name, v) in designs() {
        let fs = mount(v, 16, 16);
        assert!(!registry(v.reclaim).is_empty(), "{name}");
        drop(fs);
    }
}
