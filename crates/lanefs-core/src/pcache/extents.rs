//! A set of page ranges, kept as disjoint, non-adjacent `start..end` runs:
//! a file's *unwritten extents* (allocated by `fallocate`, reading as zeros
//! wherever no data page exists). Every operation costs O(log n + runs
//! touched), never O(pages in the range).

use std::collections::BTreeMap;
use std::ops::Range;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extents {
    /// start -> end of each run.
    runs: BTreeMap<u64, u64>,
}

impl Extents {
    pub fn from_ranges(ranges: &[Range<u64>]) -> Extents {
        let mut e = Extents::default();
        for r in ranges {
            e.insert(r.clone());
        }
        e
    }

    pub fn to_ranges(&self) -> Vec<Range<u64>> {
        self.runs.iter().map(|(s, e)| *s..*e).collect()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Runs that overlap or touch `r`, as starts.
    fn touching(&self, r: &Range<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        if let Some((s, e)) = self.runs.range(..r.start).next_back() {
            if *e >= r.start {
                out.push(*s);
            }
        }
        out.extend(self.runs.range(r.start..=r.end).map(|(s, _)| *s));
        out
    }

    /// Add `r` (union).
    pub fn insert(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        for s in self.touching(&r) {
            if let Some(e) = self.runs.remove(&s) {
                start = start.min(s);
                end = end.max(e);
            }
        }
        self.runs.insert(start, end);
        self.debug_check();
    }

    /// Take `r` out (difference).
    pub fn remove(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        for s in self.touching(&r) {
            let Some(e) = self.runs.remove(&s) else {
                continue;
            };
            if s < r.start {
                self.runs.insert(s, e.min(r.start));
            }
            if e > r.end {
                self.runs.insert(r.end.max(s), e);
            }
        }
        self.debug_check();
    }

    pub fn contains(&self, idx: u64) -> bool {
        self.runs
            .range(..=idx)
            .next_back()
            .is_some_and(|(_, e)| *e > idx)
    }

    /// Pages of `r` inside the set.
    pub fn covered(&self, r: &Range<u64>) -> u64 {
        self.overlaps(r).map(|o| o.end - o.start).sum()
    }

    /// The parts of `r` inside the set, in order.
    pub fn overlaps<'a>(&'a self, r: &Range<u64>) -> impl Iterator<Item = Range<u64>> + 'a {
        let r = r.clone();
        let first = self
            .runs
            .range(..r.start)
            .next_back()
            .filter(|(_, e)| **e > r.start);
        first
            .into_iter()
            .chain(self.runs.range(r.start..r.end))
            .map(move |(s, e)| (*s).max(r.start)..(*e).min(r.end))
            .filter(|o| !o.is_empty())
    }

    /// The parts of `r` outside the set, in order.
    pub fn gaps(&self, r: &Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut at = r.start;
        for o in self.overlaps(r) {
            if o.start > at {
                out.push(at..o.start);
            }
            at = o.end;
        }
        if at < r.end {
            out.push(at..r.end);
        }
        out
    }

    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            let mut prev_end = None;
            for (s, e) in &self.runs {
                debug_assert!(s < e, "empty run {s}..{e}");
                if let Some(p) = prev_end {
                    debug_assert!(p < *s, "runs touch or overlap at {s}");
                }
                prev_end = Some(*e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_difference_and_counts() {
        let mut e = Extents::default();
        e.insert(10..20);
        e.insert(30..40);
        e.insert(20..25);
        assert_eq!(e.to_ranges(), vec![10..25, 30..40]);
        assert_eq!(e.covered(&(0..u64::MAX)), 25);
        assert_eq!(e.covered(&(12..33)), 13 + 3);
        assert_eq!(e.gaps(&(0..50)), vec![0..10, 25..30, 40..50]);
        assert!(e.contains(24) && !e.contains(25) && e.contains(30));
        e.remove(15..35);
        assert_eq!(e.to_ranges(), vec![10..15, 35..40]);
        e.insert(0..u64::MAX);
        assert_eq!(e.to_ranges(), vec![0..u64::MAX]);
        e.remove(5..6);
        assert_eq!(e.to_ranges(), vec![0..5, 6..u64::MAX]);
        assert_eq!(Extents::from_ranges(&e.to_ranges()), e);
        e.remove(0..u64::MAX);
        assert!(e.is_empty());
    }
}
