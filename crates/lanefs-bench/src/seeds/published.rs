//! What each seed thread itself published, per workload part and engine
//! variant, with the file and line of /work/shared/seeds (the thread as
//! stored in this project) it comes from. Printed beside this tool's own
//! numbers; never used in a computation. The seeds measured other systems
//! (Linux ext4/btrfs/XFS/ramfs on 16–80-core machines), so only the *ratio*
//! between designs is comparable, and even that only in direction.
//!
//! No shared state: constant tables.

/// One published figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// Workload name (`seed000`, `seed002:creat_clo`, …).
    pub workload: &'static str,
    /// Engine variant it corresponds to (`default`, `icache=global`, …).
    pub variant: &'static str,
    /// The figure, as the seed gives it, with its ratio to the seed's
    /// before-design where one follows from the numbers.
    pub figure: &'static str,
    /// `file:line[,line…]` of the seed thread (docs/seeds/ and
    /// /work/shared/seeds/ keep the threads).
    pub source: &'static str,
}

/// Every published figure this tool prints.
pub const PUBLISHED: &[Published] = &[
    // seed 000: 20 processes stat-walking 20 private trees of 1M files,
    // 32-core VM, ext4; wall time of the whole walk (lower is better).
    Published {
        workload: "seed000",
        variant: "icache=global",
        figure: "ext4 46.118 s (1.00x); btrfs 45.549 s",
        source: "000_a75f166552eaa19c.txt:56,60",
    },
    Published {
        workload: "seed000",
        variant: "icache=rcu-global-insert",
        figure: "ext4 21.581 s (2.14x, -53%); btrfs 37.932 s (1.20x)",
        source: "000_a75f166552eaa19c.txt:57,61",
    },
    // seed 001: stress-ng --ramfs 9, bogo ops/s (real time).
    Published {
        workload: "seed001",
        variant: "reclaim=rwlock",
        figure: "12915.89 bogo ops/s (4.59x), before the lockless shrinker list",
        source: "001_f79ad49e7ecf5cea.txt:33",
    },
    Published {
        workload: "seed001",
        variant: "reclaim=sync-grace",
        figure: "2811.08 bogo ops/s (1.00x, the -88.8% regression)",
        source: "001_f79ad49e7ecf5cea.txt:47",
    },
    Published {
        workload: "seed001",
        variant: "default",
        figure: "13824.14 bogo ops/s (4.92x), grace period moved to delayed work",
        source: "001_f79ad49e7ecf5cea.txt:111",
    },
    // seed 002: 80-CPU Xeon, ext4 on SAS SSD, average of 5 runs.
    Published {
        workload: "seed002:stress-orphan",
        variant: "orphan=locked",
        figure: "2 thr 1.332 s, 16 thr 14.938 s (1.00x)",
        source: "002_3ab70ae8ff92b56d.txt:33,36",
    },
    Published {
        workload: "seed002:stress-orphan",
        variant: "default",
        figure: "2 thr 1.247 s (1.07x), 16 thr 8.516 s (1.75x)",
        source: "002_3ab70ae8ff92b56d.txt:33,36",
    },
    Published {
        workload: "seed002:creat_clo",
        variant: "orphan=locked",
        figure: "1 client 14705.88 ops/s, 3: 27108.43, 31: 14283.52 (1.00x)",
        source: "002_3ab70ae8ff92b56d.txt:49,50,64",
    },
    Published {
        workload: "seed002:creat_clo",
        variant: "default",
        figure: "1 client 14354.07 (0.98x), 3: 28301.89 (1.04x), 31: 67982.45 (4.76x)",
        source: "002_3ab70ae8ff92b56d.txt:49,50,64",
    },
    // seed 003: fio on XFS over NVMeOF/null_blk, file fully cached, 3 runs.
    Published {
        workload: "seed003:read",
        variant: "read=locked",
        figure: "IOPS 1389k, 1381k, 1391k (1.00x)",
        source: "003_c87b723c38da477a.txt:6",
    },
    Published {
        workload: "seed003:read",
        variant: "default",
        figure: "IOPS 1403k, 1393k, 1399k (1.007x)",
        source: "003_c87b723c38da477a.txt:6",
    },
    // seed 004: profiles only; no rate was published.
    Published {
        workload: "seed004",
        variant: "counter=exact-compare",
        figure: "exact compare 5.78% of CPU in rm (no ops/s)",
        source: "004_6eb6188ea094be79.txt:219",
    },
    Published {
        workload: "seed004",
        variant: "default",
        figure: "counter sum 1.5% -> 0.6% of CPU in creates, 16p, batch 8 (no ops/s)",
        source: "004_6eb6188ea094be79.txt:1366",
    },
];

/// What the seed published for `workload` under `variant`:
/// `(figure, source)`, or "not published".
pub fn lookup(workload: &str, variant: &str) -> (String, String) {
    PUBLISHED
        .iter()
        .find(|p| p.workload == workload && p.variant == variant)
        .map(|p| (p.figure.to_string(), p.source.to_string()))
        .unwrap_or_else(|| ("not published".to_string(), String::new()))
}
