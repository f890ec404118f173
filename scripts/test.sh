#!/usr/bin/env bash
# The whole test suite, as the README's second command and CI run it:
# installs what the tests need (as root on Debian), checks formatting and
# lints, then runs every test (unit, property, differential against a kernel
# tmpfs, FUSE integration on real mounts, bench harness) in release mode.
# Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings

echo "== cargo test (release)"
cargo test --workspace --all-features --release

echo "== model checks (shuttle; LANEFS_SHUTTLE_ITERS=${LANEFS_SHUTTLE_ITERS:-1000} per check)"
RUSTFLAGS="--cfg lanefs_shuttle" CARGO_TARGET_DIR=target/shuttle \
    cargo test -p lanefs-core --lib --release -- model_ --test-threads=1

# The fuzz corpus and deterministic mutations of it already ran inside
# `cargo test` (crates/lanefs-image/tests/fuzz_corpus.rs); a real libFuzzer
# run (nightly + cargo-fuzz) only when asked: LANEFS_FUZZ_SECONDS=N.
if [ -n "${LANEFS_FUZZ_SECONDS:-}" ]; then
    echo "== cargo fuzz (${LANEFS_FUZZ_SECONDS} s per target)"
    scripts/fuzz.sh "$LANEFS_FUZZ_SECONDS"
fi
