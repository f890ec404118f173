//! One cached page: 4 KiB kept as 512 atomic words, so that a lock-free
//! reader may copy it while the data lock's holder changes it without a
//! data race.
//!
//! Every access is `Relaxed`: a page's words are ordered only by the file's
//! sequence count (see the parent module) — a reader's copy is used only if
//! the count shows no change overlapped it — and by the `Release` store that
//! publishes a page in the index (a new page's contents are complete before
//! any reader can reach it). Only the holder of the file's data lock writes
//! words, so a partial-word write may load, merge and store without a
//! read-modify-write instruction.

use lanefs_store::{Page, PAGE_SIZE};

use crate::sync::{AtomicU64, Ordering};

const WORD: usize = std::mem::size_of::<u64>();
/// Words per page.
pub(crate) const PAGE_WORDS: usize = PAGE_SIZE / WORD;

pub(crate) struct PageBuf {
    words: [AtomicU64; PAGE_WORDS],
}

impl PageBuf {
    /// A zero-filled page.
    pub fn zeroed() -> Box<PageBuf> {
        Box::new(PageBuf {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        })
    }

    /// A page holding `data` (a page read from the store).
    pub fn from_bytes(data: &Page) -> Box<PageBuf> {
        let page = PageBuf::zeroed();
        page.write(0, data);
        page
    }

    /// Copy the whole page out (for the store).
    pub fn to_bytes(&self, out: &mut Page) {
        self.read(0, out);
    }

    /// Copy bytes `[at, at + out.len())` of the page into `out`.
    pub fn read(&self, at: usize, out: &mut [u8]) {
        debug_assert!(at + out.len() <= PAGE_SIZE, "read past the page");
        let mut done = 0;
        while done < out.len() {
            let pos = at + done;
            let (w, in_word) = (pos / WORD, pos % WORD);
            let n = (WORD - in_word).min(out.len() - done);
            let bytes = self.words[w].load(Ordering::Relaxed).to_ne_bytes();
            out[done..done + n].copy_from_slice(&bytes[in_word..in_word + n]);
            done += n;
        }
    }

    /// Store `data` at byte `at`. Caller holds the file's data lock (the only
    /// writer), inside a change section when the page is published.
    pub fn write(&self, at: usize, data: &[u8]) {
        debug_assert!(at + data.len() <= PAGE_SIZE, "write past the page");
        let mut done = 0;
        while done < data.len() {
            let pos = at + done;
            let (w, in_word) = (pos / WORD, pos % WORD);
            let n = (WORD - in_word).min(data.len() - done);
            let word = &self.words[w];
            let mut bytes = if n == WORD {
                [0; WORD]
            } else {
                word.load(Ordering::Relaxed).to_ne_bytes()
            };
            bytes[in_word..in_word + n].copy_from_slice(&data[done..done + n]);
            word.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
            done += n;
        }
    }

    /// Zero bytes `[at, at + len)`.
    pub fn zero(&self, at: usize, len: usize) {
        const ZEROS: [u8; PAGE_SIZE] = [0; PAGE_SIZE];
        self.write(at, &ZEROS[..len]);
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn unaligned_writes_and_reads_round_trip() {
        let p = PageBuf::zeroed();
        let data: Vec<u8> = (0..100u8).collect();
        p.write(3, &data);
        let mut out = [0u8; 106];
        p.read(0, &mut out);
        assert_eq!(out[..3], [0, 0, 0]);
        assert_eq!(&out[3..103], &data[..]);
        assert_eq!(out[103..], [0, 0, 0]);
        p.zero(10, 5);
        let mut mid = [9u8; 7];
        p.read(9, &mut mid);
        assert_eq!(mid, [6, 0, 0, 0, 0, 0, 12]);
        let mut full = [0u8; PAGE_SIZE];
        p.to_bytes(&mut full);
        let q = PageBuf::from_bytes(&full);
        let mut back = [1u8; PAGE_SIZE];
        q.to_bytes(&mut back);
        assert_eq!(full[..], back[..]);
    }
}
