//! Directory index: the in-memory map of one directory's entries.
//!
//! A directory inode's `Body::Dir` holds `RwLock<DirState>`; the index is
//! loaded from the store on first use and may be dropped by a shrink (entries
//! are written through to the store, so dropping loses nothing).
//!
//! Locking (the lock is the directory's `Inode::body` RwLock):
//! * read: lookups, readdir;
//! * write: every change of entries, loading, dropping.
//!
//! Readdir cookies: every entry gets a cookie from its directory's
//! `next_cookie` when it is inserted and keeps it until removed; cookies are
//! persisted with the entry. Listing returns entries in cookie order after
//! the caller's offset, so an entry present for the whole listing is returned
//! exactly once, whatever is inserted or removed meanwhile, and across
//! evictions of the index. Cookies 0, 1 and 2 are the start, `.` and `..`.

use std::collections::BTreeMap;

use foldhash::HashMap;

use lanefs_store::{DirEntryRecord, FileKind, Ino};

/// First cookie handed to a real entry.
pub(crate) const FIRST_COOKIE: u64 = 3;

/// One entry's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub ino: Ino,
    pub kind: FileKind,
    pub cookie: u64,
}

/// What a directory index must do (the swap point for milestone 2's
/// lock-free index).
pub(crate) trait DirectoryIndex: Sized {
    fn from_records(records: Vec<DirEntryRecord>) -> Self;
    fn get(&self, name: &[u8]) -> Option<Slot>;
    /// Insert or replace.
    fn insert(&mut self, name: &[u8], slot: Slot);
    fn remove(&mut self, name: &[u8]) -> Option<Slot>;
    fn len(&self) -> usize;
    /// Up to `max` entries with cookie > `after`, in cookie order.
    fn list_after(&self, after: u64, max: usize) -> Vec<(Vec<u8>, Slot)>;
}

/// Hash map by name plus a cookie-ordered map for listing. Names hash with
/// foldhash (randomly seeded per map, so names chosen to collide cannot be
/// precomputed; several times cheaper than SipHash on short names).
#[derive(Default)]
pub(crate) struct HashDirIndex {
    by_name: HashMap<Box<[u8]>, Slot>,
    by_cookie: BTreeMap<u64, Box<[u8]>>,
}

impl DirectoryIndex for HashDirIndex {
    fn from_records(records: Vec<DirEntryRecord>) -> Self {
        let mut d = HashDirIndex::default();
        for r in records {
            d.insert(
                &r.name,
                Slot {
                    ino: r.ino,
                    kind: r.kind,
                    cookie: r.cookie,
                },
            );
        }
        d
    }

    fn get(&self, name: &[u8]) -> Option<Slot> {
        self.by_name.get(name).copied()
    }

    fn insert(&mut self, name: &[u8], slot: Slot) {
        if let Some(old) = self.by_name.insert(name.into(), slot) {
            self.by_cookie.remove(&old.cookie);
        }
        self.by_cookie.insert(slot.cookie, name.into());
    }

    fn remove(&mut self, name: &[u8]) -> Option<Slot> {
        let slot = self.by_name.remove(name)?;
        self.by_cookie.remove(&slot.cookie);
        Some(slot)
    }

    fn len(&self) -> usize {
        self.by_name.len()
    }

    fn list_after(&self, after: u64, max: usize) -> Vec<(Vec<u8>, Slot)> {
        self.by_cookie
            .range(after.saturating_add(1)..)
            .take(max)
            .filter_map(|(_, name)| self.by_name.get(name).map(|s| (name.to_vec(), *s)))
            .collect()
    }
}

/// The index type the core uses.
pub(crate) type DirIndex = HashDirIndex;

/// A directory's lock-protected state: the index once loaded.
#[derive(Default)]
pub(crate) struct DirState {
    pub index: Option<DirIndex>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(ino: Ino, cookie: u64) -> Slot {
        Slot {
            ino,
            kind: FileKind::Regular,
            cookie,
        }
    }

    #[test]
    fn listing_is_in_cookie_order_and_resumable() {
        let mut d = HashDirIndex::default();
        d.insert(b"b", slot(10, 5));
        d.insert(b"a", slot(11, 3));
        d.insert(b"c", slot(12, 4));
        let all: Vec<_> = d.list_after(0, 10).into_iter().map(|(n, _)| n).collect();
        assert_eq!(all, vec![b"a".to_vec(), b"c".to_vec(), b"b".to_vec()]);
        let rest: Vec<_> = d
            .list_after(4, 10)
            .into_iter()
            .map(|(n, s)| (n, s.ino))
            .collect();
        assert_eq!(rest, vec![(b"b".to_vec(), 10)]);
        assert_eq!(d.remove(b"c"), Some(slot(12, 4)));
        assert_eq!(d.list_after(3, 1).len(), 1);
        d.insert(b"b", slot(13, 6));
        assert_eq!(d.len(), 2);
        assert_eq!(
            d.list_after(5, 10)[0].1.ino,
            13,
            "replacing moves the cookie"
        );
    }
}
