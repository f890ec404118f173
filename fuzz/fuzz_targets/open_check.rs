//! Open and check arbitrary images at the store level: recovery, store
//! calls, fsck and fsck --repair (`lanefs_image::fuzz::check_image_input`;
//! input format: the sparse image described there). Corpus:
//! `fuzz/corpus/open_check/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    lanefs_image::fuzz::check_image_input(data);
});
