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
/// Words a read loads before it stores them (one cache line).
const BATCH: usize = 8;

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

    /// Copy bytes `[at, at + out.len())` of the page into `out`, without a
    /// data race against the lock holder's atomic stores.
    pub fn read(&self, at: usize, out: &mut [u8]) {
        debug_assert!(at + out.len() <= PAGE_SIZE, "read past the page");
        #[cfg(all(target_arch = "x86_64", not(lanefs_shuttle), not(miri)))]
        {
            assert!(at + out.len() <= PAGE_SIZE, "read past the page");
            let src = self.words.as_ptr().cast::<u8>().wrapping_add(at);
            // SAFETY: `src..src + out.len()` lies inside `self.words` (the
            // assert above; `AtomicU64` has `u64`'s layout, so the words are
            // contiguous bytes) and `out` is exclusively borrowed. Every
            // concurrent write to the page is an atomic store. The copy is
            // inline assembly, opaque to the compiler: on x86-64 its loads
            // are single-copy atomic per byte, so it behaves as a sequence of
            // Relaxed byte loads — no data race in the language's sense
            // (the argument of taiki-e's `atomic-memcpy`, after RFC 3301's
            // per-byte atomics). A copy overlapping a change may be torn;
            // the caller's sequence count rejects it. `rep movsb` leaves
            // the flags alone (DF is clear by the ABI).
            unsafe {
                std::arch::asm!(
                    "rep movsb",
                    inout("rcx") out.len() => _,
                    inout("rsi") src => _,
                    inout("rdi") out.as_mut_ptr() => _,
                    options(nostack, preserves_flags)
                );
            }
            #[allow(clippy::needless_return)]
            return;
        }
        #[allow(unreachable_code)]
        self.read_words(at, out)
    }

    /// [`read`](Self::read) with Relaxed word loads (other targets, model
    /// checks): a partial word at each end, whole words between.
    fn read_words(&self, at: usize, out: &mut [u8]) {
        let head = ((WORD - at % WORD) % WORD).min(out.len());
        if head > 0 {
            let bytes = self.words[at / WORD].load(Ordering::Relaxed).to_ne_bytes();
            out[..head].copy_from_slice(&bytes[at % WORD..at % WORD + head]);
        }
        let (first, last) = ((at + head) / WORD, (at + out.len()) / WORD);
        // Whole words in batches: every load of a batch before its stores,
        // so a load never waits on a store to an address equal modulo 4 KiB
        // (page-aligned source and destination alias in the store buffer).
        let mut lines = out[head..].chunks_exact_mut(BATCH * WORD);
        let mut w = first;
        for line in &mut lines {
            let mut batch = [0u64; BATCH];
            for (v, word) in batch.iter_mut().zip(&self.words[w..w + BATCH]) {
                *v = word.load(Ordering::Relaxed);
            }
            for (chunk, v) in line.chunks_exact_mut(WORD).zip(batch) {
                chunk.copy_from_slice(&v.to_ne_bytes());
            }
            w += BATCH;
        }
        let mut whole = lines.into_remainder().chunks_exact_mut(WORD);
        for (chunk, word) in (&mut whole).zip(&self.words[w..]) {
            let chunk: &mut [u8; WORD] = chunk.try_into().expect("exact chunk");
            *chunk = word.load(Ordering::Relaxed).to_ne_bytes();
        }
        let tail = whole.into_remainder();
        if !tail.is_empty() {
            let bytes = self.words[last].load(Ordering::Relaxed).to_ne_bytes();
            tail.copy_from_slice(&bytes[..tail.len()]);
        }
    }

    /// Store `data` at byte `at`. Caller holds the file's data lock (the only
    /// writer), inside a change section when the page is published.
    pub fn write(&self, at: usize, data: &[u8]) {
        debug_assert!(at + data.len() <= PAGE_SIZE, "write past the page");
        let merge = |w: usize, from: usize, bytes: &[u8]| {
            let word = &self.words[w];
            let mut v = word.load(Ordering::Relaxed).to_ne_bytes();
            v[from..from + bytes.len()].copy_from_slice(bytes);
            word.store(u64::from_ne_bytes(v), Ordering::Relaxed);
        };
        let head = ((WORD - at % WORD) % WORD).min(data.len());
        if head > 0 {
            merge(at / WORD, at % WORD, &data[..head]);
        }
        let first = (at + head) / WORD;
        let mut whole = data[head..].chunks_exact(WORD);
        for (chunk, word) in (&mut whole).zip(&self.words[first..]) {
            let chunk: &[u8; WORD] = chunk.try_into().expect("exact chunk");
            word.store(u64::from_ne_bytes(*chunk), Ordering::Relaxed);
        }
        let tail = whole.remainder();
        if !tail.is_empty() {
            merge((at + data.len()) / WORD, 0, tail);
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

    #[test]
    fn every_small_span_matches_a_byte_array() {
        let p = PageBuf::zeroed();
        let mut model = [0u8; 64];
        let mut x = 1u8;
        for at in 0..40 {
            for len in 0..24 {
                let data: Vec<u8> = (0..len)
                    .map(|_| {
                        x = x.wrapping_mul(31).wrapping_add(7);
                        x
                    })
                    .collect();
                p.write(at, &data);
                model[at..at + len].copy_from_slice(&data);
                let from = at.max(1) - 1;
                let mut out = vec![0u8; len + 3];
                p.read(from, &mut out);
                assert_eq!(out, model[from..from + len + 3], "at {at} len {len}");
                let mut words = vec![0u8; len + 3];
                p.read_words(from, &mut words);
                assert_eq!(words, out, "word copy at {at} len {len}");
            }
        }
    }
}
