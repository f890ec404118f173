//! The image fuzzer's corpus on stable, in the normal test run: every input
//! committed in `fuzz/corpus/open_check/` (seeds made by
//! `cargo run -p lanefs --example fuzz_corpus`, and the regression inputs
//! of bugs the fuzzer found, `regress-*`), then deterministic random
//! mutations of them, all through the fuzz target's own entry function
//! `lanefs_image::fuzz::check_image_input`: every outcome must be a
//! result, never a panic; what `fsck --repair` leaves must be clean; and no
//! single allocation may exceed [`ALLOC_MAX`] (an input decodes to at most
//! 8 MiB, so a larger allocation means a size taken from the image).
//!
//! Knobs: `LANEFS_FUZZ_MUTATIONS` (mutated inputs, default 1000),
//! `LANEFS_FUZZ_SEED`. The real libFuzzer run is `scripts/fuzz.sh`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use lanefs_image::crash::next_rand;
mod common;

use lanefs_image::fuzz::{check_image_input_with, decode_sparse, mutate_input};

/// The largest single allocation any input may cause.
const ALLOC_MAX: usize = 64 << 20;

/// The system allocator, remembering the largest request it saw.
struct Watch;
/// Largest allocation seen (bytes); relaxed: a high-water mark only.
static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// only addition is an atomic maximum of the requested size.
unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Ordering::Relaxed);
        // SAFETY: `p` and `l` come from this allocator (the caller's
        // contract), which allocated them through `System`.
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Watch = Watch;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    lanefs_image::fuzz::committed_corpus()
}

fn run(name: &str, input: &[u8]) -> lanefs_image::fuzz::FuzzOutcome {
    let out = check_image_input_with(input, common::cfg().cache_bytes);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= ALLOC_MAX,
        "{name}: an allocation of {largest} bytes (over {ALLOC_MAX})"
    );
    out
}

/// Every seed is a valid image: it opens and checks clean; every input
/// (regressions included) runs to a result.
#[test]
fn fuzz_corpus_replays() {
    let corpus = corpus();
    let seeds = corpus
        .iter()
        .filter(|(n, _)| n.starts_with("seed-"))
        .count();
    assert!(seeds >= 5, "the corpus has its seeds ({seeds})");
    for (name, input) in &corpus {
        let out = run(name, input);
        if name.starts_with("seed-") {
            assert!(
                out.opened && out.clean,
                "{name}: a seed is a clean image: {out:?} (after a format change, regenerate \
                 the seeds: cargo run --release -p lanefs --example fuzz_corpus)"
            );
        }
    }
}

#[test]
fn fuzz_corpus_mutations_never_panic() {
    let iters = env_u64("LANEFS_FUZZ_MUTATIONS", 1000);
    let mut rng = env_u64("LANEFS_FUZZ_SEED", 0x5eed_f022) | 1;
    let corpus = corpus();
    let (mut opened, mut refused, mut unclean) = (0u64, 0u64, 0u64);
    for i in 0..iters {
        let (name, base) = &corpus[(next_rand(&mut rng) as usize) % corpus.len()];
        let mut input = base.clone();
        mutate_input(&mut input, &mut rng);
        let out = run(&format!("mutation {i} of {name}"), &input);
        if out.opened {
            opened += 1;
        } else {
            refused += 1;
        }
        unclean += (out.checked && !out.clean) as u64;
    }
    eprintln!("{iters} mutations: {opened} opened, {refused} refused, {unclean} found unclean");
    if iters >= 100 {
        assert!(
            opened > 0 && refused > 0 && unclean > 0,
            "the mutations reach every outcome: {opened} opened, {refused} refused, \
             {unclean} unclean"
        );
    }
}

/// The sparse encoding is exact: decoding an encoded image gives it back.
#[test]
fn sparse_encoding_round_trips() {
    for (name, input) in corpus() {
        let (flags, img) = decode_sparse(&input);
        let again = lanefs_image::fuzz::encode_sparse(&img, flags);
        assert_eq!(decode_sparse(&again), (flags, img), "{name}");
    }
}

tiny_budget_too!(fuzz_corpus_replays, fuzz_corpus_mutations_never_panic,);
