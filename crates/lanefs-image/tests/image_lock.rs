//! One opener of an image at a time: every `FileDevice` open (store open,
//! `fsck`, `mkfs`) holds the image's exclusive `flock`, and another open
//! waits up to `LOCK_WAIT` and then fails `EBUSY` instead of writing beside
//! the first (two mounts of one image, `fsck --repair` or `mkfs` of a
//! mounted one all went ahead before).

use std::time::{Duration, Instant};

use lanefs_image::{
    fsck, is_finishing, mkfs, wait_for_release, FileDevice, FinishingMark, ImageStore, LOCK_WAIT,
};
use lanefs_store::{Errno, Store};

fn image(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lanefs-lock-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("fs.img");
    mkfs(&img, 32 << 20).unwrap();
    img
}

fn busy<T>(r: lanefs_store::Result<T>, what: &str) {
    match r {
        Err(e) => assert_eq!(e, Errno(libc::EBUSY), "{what}"),
        Ok(_) => panic!("{what}: opened an image another opener holds"),
    }
}

#[test]
fn an_open_image_is_refused_to_every_other_opener() {
    let img = image("held");
    let store = ImageStore::open(&img).unwrap();
    let t = Instant::now();
    busy(ImageStore::open(&img), "second store open");
    assert!(t.elapsed() >= LOCK_WAIT, "gave up before LOCK_WAIT");
    busy(fsck(&img, false), "fsck");
    busy(fsck(&img, true), "fsck --repair");
    busy(mkfs(&img, 32 << 20), "mkfs");
    busy(FileDevice::open(&img), "device open");
    // The holder's store still works.
    store.superblock().unwrap();
    drop(store);
    assert!(fsck(&img, false).unwrap().clean);
    let _ = std::fs::remove_dir_all(img.parent().unwrap());
}

#[test]
fn an_opener_waits_for_a_holder_that_lets_go() {
    let img = image("released");
    let store = ImageStore::open(&img).unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(store);
    });
    // As `lanefs umount; lanefs fsck` meets a daemon still checkpointing.
    let r = fsck(&img, false).unwrap();
    assert!(r.clean, "{:?}", r.problems);
    holder.join().unwrap();
    let _ = std::fs::remove_dir_all(img.parent().unwrap());
}

/// A holder that set its finishing mark (a daemon writing back after its
/// unmount) is waited for past `LOCK_WAIT`: `umount; fsck` and `umount;
/// mount` failed "in use" when the last write-back took longer.
#[test]
fn an_opener_waits_past_lock_wait_for_a_finishing_holder() {
    let img = image("finishing");
    let store = ImageStore::open(&img).unwrap();
    let mark = FinishingMark::open(&img).unwrap();
    let probe = std::fs::File::open(&img).unwrap();
    assert!(!is_finishing(&probe), "marked before set");
    mark.set().unwrap();
    assert!(is_finishing(&probe), "the mark is not seen");
    let hold = LOCK_WAIT + Duration::from_millis(1500);
    let holder = std::thread::spawn(move || {
        std::thread::sleep(hold);
        drop(store);
        drop(mark);
    });
    let t = Instant::now();
    let r = fsck(&img, false).unwrap();
    assert!(r.clean, "{:?}", r.problems);
    assert!(
        t.elapsed() >= hold - Duration::from_millis(100),
        "no holder met"
    );
    assert!(!is_finishing(&probe), "the mark outlived its holder");
    holder.join().unwrap();
    let _ = std::fs::remove_dir_all(img.parent().unwrap());
}

/// `wait_for_release` (what `lanefs umount` does after the unmount) waits
/// for a finishing holder to let go, and gives up on one without the mark
/// after its notice time (a new user of the image, not the daemon).
#[test]
fn wait_for_release_follows_the_finishing_mark() {
    let img = image("release");
    assert!(
        wait_for_release(&img, Duration::ZERO).unwrap(),
        "free image"
    );
    let store = ImageStore::open(&img).unwrap();
    let t = Instant::now();
    assert!(!wait_for_release(&img, Duration::from_millis(300)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(300));
    let mark = FinishingMark::open(&img).unwrap();
    mark.set().unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        drop(store);
        drop(mark);
    });
    let t = Instant::now();
    assert!(wait_for_release(&img, Duration::from_millis(100)).unwrap());
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "returned while held"
    );
    holder.join().unwrap();
    let _ = std::fs::remove_dir_all(img.parent().unwrap());
}
