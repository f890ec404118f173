//! Readdir offsets increase in listing order, so that seeking to any
//! offset below the last one a listing returned lists an entry: the next
//! one in listing order (xfstests generic/676, `t_readdir_3`, which seeks
//! to random offsets below the largest `telldir` and takes an empty
//! answer for an error, as tmpfs and ext4 never give one). Until 2026-11
//! an entry's offset was its cookie, which does not increase from one
//! partition of the listing to the next, and such a seek into the last
//! partition, past its last cookie, listed nothing.

use lanefs_core::*;

/// Every entry from `off` on: (name, offset to resume after it).
fn list_from(fs: &Fs, dir: &OpenFile, off: u64, max: usize) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    fs.readdir(dir, off, &mut |e| {
        out.push((e.name.to_vec(), e.next_offset));
        out.len() == max
    })
    .unwrap();
    out
}

#[test]
fn offsets_increase_and_any_offset_below_the_last_lists_the_next_entry() {
    let fs = Fs::new_in_memory();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
    for i in 0..3000 {
        let a = fs
            .mknod(&r, d.ino, format!("file-{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.forget(a.ino, 1);
    }
    // Holes in the partitions, as a directory in use has.
    for i in (0..3000).step_by(7) {
        fs.unlink(&r, d.ino, format!("file-{i}").as_bytes())
            .unwrap();
    }
    let dir = fs
        .open(&r, d.ino, libc::O_RDONLY | libc::O_DIRECTORY)
        .unwrap();
    let all = list_from(&fs, &dir, 0, usize::MAX);
    assert_eq!(all.len(), 2 + 3000 - 3000_usize.div_ceil(7));
    for w in all.windows(2) {
        assert!(
            w[0].1 < w[1].1,
            "offsets do not increase: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    let last = all.last().unwrap().1;
    assert!(last < 1 << 31, "a 32-bit reader's offset: {last}");
    // Resuming after each entry lists the rest, in order.
    for (i, (_, off)) in all.iter().enumerate().step_by(97) {
        let rest = list_from(&fs, &dir, *off, usize::MAX);
        assert_eq!(rest, all[i + 1..], "after entry {i}");
    }
    // Any offset below the last lists the first entry whose offset is
    // above it; from the last on, nothing.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..4000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pos = x % last;
        let next = all.iter().position(|(_, o)| *o > pos).unwrap();
        let got = list_from(&fs, &dir, pos, 1);
        assert_eq!(got.first(), Some(&all[next]), "from offset {pos}");
    }
    assert!(list_from(&fs, &dir, last, usize::MAX).is_empty());
    for pos in [
        last + 1,
        1 << 31,
        1 << 40,
        1 << 62,
        i64::MAX as u64,
        u64::MAX,
    ] {
        // Offsets no entry returned: any answer but a panic; never an
        // entry listed twice.
        let got = list_from(&fs, &dir, pos, usize::MAX);
        let mut names: Vec<_> = got.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), got.len(), "from offset {pos}");
    }
}
