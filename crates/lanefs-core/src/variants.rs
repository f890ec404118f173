//! Engine variants: for each of the five seeds' mechanisms, the production
//! design (the default) and the seed's "before" designs, selected per
//! instance by [`FsConfig::variants`](crate::FsConfig::variants).
//!
//! Baselines exist for benchmarks (`lanefs bench --variant`) and for the
//! differential and stress tests (same operation sequence, same results);
//! they must be exactly as correct as the default, only slower.
//!
//! A variant set is written as a comma-separated list of `mechanism=design`
//! (for example `icache=global,counter=atomic`); mechanisms not named keep
//! their default. [`Variants::parse`] reads that form and
//! [`Variants::baselines`] lists every single-mechanism baseline.

use std::fmt;
use std::str::FromStr;

/// Inode-cache designs (seed 000).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IcacheVariant {
    /// Lookups lock-free under an epoch guard; a miss inserts a placeholder
    /// under one bucket lock and loads outside any lock.
    #[default]
    Rcu,
    /// One global lock, taken twice on a cold lookup (Linux before the seed).
    Global,
    /// Lock-free first lookup, inserts under one global lock (the seed's patch).
    RcuGlobalInsert,
    /// One lock per bucket for lookups and inserts (hash-bl / lock array).
    BucketLock,
}

/// Reclaim-registry designs (seed 001).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReclaimVariant {
    /// Reference-counted entries, lock-free scans, unregister marks dead and
    /// frees through deferred reclamation: it never waits.
    #[default]
    Deferred,
    /// One global reader-writer lock around the registry.
    RwLock,
    /// Unregister waits synchronously for a full grace period (the regression
    /// in the seed).
    SyncGrace,
}

/// Orphan-table designs (seed 002).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OrphanVariant {
    /// Slot blocks with atomic free counts, lane-hashed start, CAS claim.
    #[default]
    Slots,
    /// One lock around the whole table.
    Locked,
}

/// Cached-read designs (seed 003).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadVariant {
    /// Copy from cached pages with no lock, validated by a sequence count.
    #[default]
    Lockless,
    /// Every read takes the file's data lock.
    Locked,
}

/// Free-space counter designs (seed 004).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CounterVariant {
    /// Per-lane shards with a batch; no exact compare on the hot path.
    #[default]
    Percpu,
    /// One shared atomic.
    Atomic,
    /// Per-lane shards, but an exact sum and compare on every decrement (XFS
    /// before the fix).
    ExactCompare,
}

/// One design per mechanism.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Variants {
    pub icache: IcacheVariant,
    pub reclaim: ReclaimVariant,
    pub orphan: OrphanVariant,
    pub read: ReadVariant,
    pub counter: CounterVariant,
}

/// `(mechanism, [(design name, setter)])`, the one table names are read from.
type Setter = fn(&mut Variants);
const TABLE: &[(&str, &[(&str, Setter)])] = &[
    (
        "icache",
        &[
            ("rcu", |v| v.icache = IcacheVariant::Rcu),
            ("global", |v| v.icache = IcacheVariant::Global),
            ("rcu-global-insert", |v| {
                v.icache = IcacheVariant::RcuGlobalInsert
            }),
            ("bucket-lock", |v| v.icache = IcacheVariant::BucketLock),
        ],
    ),
    (
        "reclaim",
        &[
            ("deferred", |v| v.reclaim = ReclaimVariant::Deferred),
            ("rwlock", |v| v.reclaim = ReclaimVariant::RwLock),
            ("sync-grace", |v| v.reclaim = ReclaimVariant::SyncGrace),
        ],
    ),
    (
        "orphan",
        &[
            ("slots", |v| v.orphan = OrphanVariant::Slots),
            ("locked", |v| v.orphan = OrphanVariant::Locked),
        ],
    ),
    (
        "read",
        &[
            ("lockless", |v| v.read = ReadVariant::Lockless),
            ("locked", |v| v.read = ReadVariant::Locked),
        ],
    ),
    (
        "counter",
        &[
            ("percpu", |v| v.counter = CounterVariant::Percpu),
            ("atomic", |v| v.counter = CounterVariant::Atomic),
            ("exact-compare", |v| {
                v.counter = CounterVariant::ExactCompare
            }),
        ],
    ),
];

impl Variants {
    /// Read `mechanism=design[,mechanism=design…]`; `default` or an empty
    /// string is the production set.
    pub fn parse(s: &str) -> Result<Variants, String> {
        let mut v = Variants::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                continue;
            }
            let (mech, design) = part
                .split_once('=')
                .ok_or_else(|| format!("variant {part:?}: expected mechanism=design"))?;
            let (_, designs) = TABLE
                .iter()
                .find(|(m, _)| *m == mech)
                .ok_or_else(|| format!("unknown mechanism {mech:?} (known: {})", mechanisms()))?;
            let (_, set) = designs.iter().find(|(d, _)| *d == design).ok_or_else(|| {
                let known: Vec<&str> = designs.iter().map(|(d, _)| *d).collect();
                format!(
                    "unknown {mech} design {design:?} (known: {})",
                    known.join(", ")
                )
            })?;
            set(&mut v);
        }
        Ok(v)
    }

    /// Every variant set that differs from the default in exactly one
    /// mechanism, as `(name, variants)`, in a stable order.
    pub fn baselines() -> Vec<(String, Variants)> {
        let mut out = Vec::new();
        for (mech, designs) in TABLE {
            for (design, set) in designs.iter().skip(1) {
                let mut v = Variants::default();
                set(&mut v);
                out.push((format!("{mech}={design}"), v));
            }
        }
        out
    }

    /// The baselines of one mechanism (`icache`, `reclaim`, …).
    pub fn baselines_of(mechanism: &str) -> Vec<(String, Variants)> {
        let prefix = format!("{mechanism}=");
        Variants::baselines()
            .into_iter()
            .filter(|(n, _)| n.starts_with(&prefix))
            .collect()
    }
}

fn mechanisms() -> String {
    TABLE.iter().map(|(m, _)| *m).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Variants {
    /// `default`, or the non-default designs as `mechanism=design,…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        for (mech, designs) in TABLE {
            for (design, set) in designs.iter().skip(1) {
                let mut probe = *self;
                set(&mut probe);
                if probe == *self {
                    parts.push(format!("{mech}={design}"));
                }
            }
        }
        if parts.is_empty() {
            f.write_str("default")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

impl FromStr for Variants {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Variants::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        assert_eq!(Variants::parse("").unwrap(), Variants::default());
        assert_eq!(Variants::default().to_string(), "default");
        let v = Variants::parse("icache=global, counter=exact-compare").unwrap();
        assert_eq!(v.icache, IcacheVariant::Global);
        assert_eq!(v.counter, CounterVariant::ExactCompare);
        assert_eq!(v.read, ReadVariant::Lockless);
        assert_eq!(v.to_string(), "icache=global,counter=exact-compare");
        assert_eq!(Variants::parse(&v.to_string()).unwrap(), v);
    }

    #[test]
    fn bad_names_are_errors() {
        assert!(Variants::parse("icache").is_err());
        assert!(Variants::parse("nope=1").is_err());
        assert!(Variants::parse("icache=nope").is_err());
    }

    #[test]
    fn baselines_cover_every_non_default_design_once() {
        let b = Variants::baselines();
        assert_eq!(b.len(), 3 + 2 + 1 + 1 + 2);
        for (name, v) in &b {
            assert_ne!(*v, Variants::default());
            assert_eq!(v.to_string(), *name);
        }
        assert_eq!(Variants::baselines_of("icache").len(), 3);
    }
}
