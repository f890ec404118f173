//! The `mount_walk` image fuzzer on stable, in the normal test run: the
//! committed corpus `fuzz/corpus/open_check/` and deterministic mutations
//! of it, through the fuzz target's own entry (`fuzz/src/mount.rs`,
//! included here): open the image, mount the engine with a tiny cache,
//! walk and change it. Every outcome must be a result, never a panic.
//!
//! Knobs: `LANEFS_FUZZ_MUTATIONS` (default 1000), `LANEFS_FUZZ_SEED`.

#[path = "../../../fuzz/src/mount.rs"]
mod mount;

use lanefs_image::crash::next_rand;
use lanefs_image::fuzz::mutate_input;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    lanefs_image::fuzz::committed_corpus()
}

#[test]
fn image_fuzz_mount_corpus_and_mutations() {
    let corpus = corpus();
    for (name, input) in &corpus {
        let out = mount::mount_walk_input(input);
        if name.starts_with("seed-") {
            // A seed is a valid image with at least the root's entries.
            assert!(out.mounted, "{name}: a seed mounts");
        }
    }
    let iters = env_u64("LANEFS_FUZZ_MUTATIONS", 1000);
    let mut rng = env_u64("LANEFS_FUZZ_SEED", 0x3011_17a1) | 1;
    let (mut mounted, mut visited) = (0u64, 0usize);
    for _ in 0..iters {
        let (_, base) = &corpus[(next_rand(&mut rng) as usize) % corpus.len()];
        let mut input = base.clone();
        mutate_input(&mut input, &mut rng);
        let out = mount::mount_walk_input(&input);
        mounted += out.mounted as u64;
        visited += out.visited;
    }
    eprintln!("{iters} mutations: {mounted} mounted, {visited} entries visited");
    if iters >= 100 {
        assert!(mounted > 0 && visited > 0, "the mutations reach the walk");
    }
}
