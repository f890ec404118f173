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
        #[cfg(not(lanefs_shuttle))]
        {
            // SAFETY: all-zero bytes are a valid `PageBuf` (512 `AtomicU64`
            // of value 0; `AtomicU64` has `u64`'s layout), and the zeroed
            // allocation comes from the allocator's zeroing path (fresh
            // pages need no memset) instead of a 4 KiB value built on the
            // stack and copied.
            unsafe { Box::<PageBuf>::new_zeroed().assume_init() }
        }
        #[cfg(lanefs_shuttle)]
        Box::new(PageBuf {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        })
    }

    /// A page holding `data` (a page read from the store).
    pub fn from_bytes(data: &Page) -> Box<PageBuf> {
        PageBuf::with(0, data)
    }

    /// A new (unpublished) page holding `data` at byte `at`, zeros
    /// elsewhere. A whole page is copied into an uninitialised allocation
    /// (no zeroing first: an append writes whole new pages).
    pub fn with(at: usize, data: &[u8]) -> Box<PageBuf> {
        assert!(at + data.len() <= PAGE_SIZE, "write past the page");
        #[cfg(not(lanefs_shuttle))]
        if data.len() == PAGE_SIZE {
            let mut page = Box::<PageBuf>::new_uninit();
            // SAFETY: the allocation is `PAGE_SIZE` bytes (512 `u64`-layout
            // words), exclusively owned and not yet reachable by anyone
            // else, so a plain copy races with nothing; after it every
            // byte is initialised, and any bytes are a valid `PageBuf`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    page.as_mut_ptr().cast::<u8>(),
                    PAGE_SIZE,
                );
                return page.assume_init();
            }
        }
        let page = PageBuf::zeroed();
        page.write(at, data);
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
        // The conflict audit records every word a write stores: it keeps
        // the recorded word path.
        #[cfg(all(
            target_arch = "x86_64",
            not(lanefs_shuttle),
            not(miri),
            not(feature = "audit")
        ))]
        {
            assert!(at + data.len() <= PAGE_SIZE, "write past the page");
            let dst = self.words.as_ptr().cast::<u8>().cast_mut().wrapping_add(at);
            // SAFETY: `dst..dst + data.len()` lies inside `self.words` (the
            // assert above; the words are contiguous `u64`-layout bytes)
            // and `data` is a valid shared slice that cannot overlap the
            // page (the page is only reachable through `&self`, and no `&[u8]`
            // into it is ever handed out). Writing through `&self` is
            // allowed: every word is an `AtomicU64` (interior mutability).
            // Only the data lock's holder writes, so the only concurrent
            // accesses are lock-free readers' copies (`read`), themselves
            // per-byte-atomic inline assembly or Relaxed loads: the stores of
            // `rep movsb` are single-copy atomic per byte on x86-64, so this
            // behaves as a sequence of Relaxed byte stores — the argument
            // of `read` (taiki-e's `atomic-memcpy`). Readers that overlap it
            // may see a torn copy and are rejected by the sequence count.
            // `rep movsb` leaves the flags alone (DF is clear by the ABI).
            unsafe {
                std::arch::asm!(
                    "rep movsb",
                    inout("rcx") data.len() => _,
                    inout("rsi") data.as_ptr() => _,
                    inout("rdi") dst => _,
                    options(nostack, preserves_flags)
                );
            }
            #[allow(clippy::needless_return)]
            return;
        }
        #[allow(unreachable_code)]
        self.write_words(at, data)
    }

    /// [`write`](Self::write) with Relaxed word stores (other targets,
    /// model checks, the audit): a merged partial word at each end, whole words
    /// between.
    fn write_words(&self, at: usize, data: &[u8]) {
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

    /// The asm copy and the word path store the same bytes, and a new page
    /// made `with` a whole or a partial chunk holds it with zeros around.
    #[test]
    fn write_paths_and_new_pages_agree() {
        let full: Vec<u8> = (0..PAGE_SIZE).map(|i| (i * 7 + 3) as u8).collect();
        let a = PageBuf::with(0, &full);
        let mut out = vec![0u8; PAGE_SIZE];
        a.read(0, &mut out);
        assert_eq!(out, full);
        let b = PageBuf::with(5, &full[..100]);
        b.read(0, &mut out);
        assert_eq!(out[..5], [0; 5]);
        assert_eq!(out[5..105], full[..100]);
        assert!(out[105..].iter().all(|&x| x == 0));
        let (c, d) = (PageBuf::zeroed(), PageBuf::zeroed());
        for (at, len) in [(0, PAGE_SIZE), (1, 4000), (4093, 3), (17, 0), (8, 64)] {
            c.write(at, &full[..len]);
            d.write_words(at, &full[..len]);
            let (mut x, mut y) = (vec![0u8; PAGE_SIZE], vec![0u8; PAGE_SIZE]);
            c.read_words(0, &mut x);
            d.read_words(0, &mut y);
            assert_eq!(x, y, "at {at} len {len}");
        }
    }
}
