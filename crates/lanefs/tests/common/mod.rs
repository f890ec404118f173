//! Helpers shared by the path layer's image tests.

use std::io;
use std::path::Path;

use lanefs::Filesystem;

/// The engine's own check of `fs`, then, once `fs` is dropped (the caller
/// has dropped its other handles of the image), `lanefs fsck` of the image
/// at `img`, which must be clean.
pub fn check_then_fsck(fs: Filesystem, img: &Path) -> io::Result<()> {
    fs.core()
        .check()
        .map_err(|p| io::Error::other(format!("{p:?}")))?;
    drop(fs);
    let report = lanefs_image::fsck(img, false).map_err(io::Error::from)?;
    assert!(report.clean, "{:?} {:?}", report.problems, report.links);
    Ok(())
}
