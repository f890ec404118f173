#!/usr/bin/env bash
# Run the image fuzzers (fuzz/, libFuzzer through cargo-fuzz) for SECONDS
# each (default 60): `open_check` (store: recovery, calls, fsck, repair) and
# `mount_walk` (the engine mounted on the image, walked and changed).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs a nightly toolchain and cargo-fuzz; installs cargo-fuzz if it is
# missing, and says loudly and fails if nightly is not there. New inputs go to
# fuzz/target/corpus/<target>/ (not committed); crashes to
# fuzz/artifacts/<target>/. A crash is a bug: fix it and commit the input
# as fuzz/corpus/open_check/regress-<what> (the stable tests replay it:
# crates/lanefs-image/tests/fuzz_corpus.rs, crates/lanefs/tests/image_fuzz_mount.rs).
# The seeds are made by `cargo run --release -p lanefs --example fuzz_corpus`.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(open_check mount_walk)

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: NO NIGHTLY TOOLCHAIN: fuzzing SKIPPED (rustup toolchain install nightly)" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
for t in "${targets[@]}"; do
    work="fuzz/target/corpus/$t"
    mkdir -p "$work" "fuzz/artifacts/$t"
    echo "fuzz.sh: $t for ${secs}s" >&2
    # Optimised, with debug assertions and overflow checks (-O -a): an
    # arithmetic overflow on a corrupt field is a finding. Bounds: 10 s per
    # input (a hang), 512 MiB per allocation and 2 GiB in all (an input
    # decodes to at most 8 MiB of image).
    (cd fuzz && cargo +nightly fuzz run -O -a "$t" "../$work" corpus/open_check -- \
        -max_total_time="$secs" -max_len=32768 -timeout=10 \
        -malloc_limit_mb=512 -rss_limit_mb=2048 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1)
done
