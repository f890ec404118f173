//! Mount arbitrary images with the engine on top and walk them: every
//! directory listed, every file read, every link followed, then the
//! engine's own check (`fuzz/src/mount.rs`, shared with the stable replay
//! test `crates/lanefs/tests/image_fuzz_mount.rs`). Same input format and
//! corpus as `open_check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/mount.rs"]
mod mount;

fuzz_target!(|data: &[u8]| {
    mount::mount_walk_input(data);
});
