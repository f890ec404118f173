//! Every flavour of rename is atomic for lookups: a reader that looks the
//! rename's names up one after the other sees each answer from before the
//! rename or after it, and once one answer is from after, every later one
//! is too (`dir` module doc, "Renames"; the shuttle models
//! `namei::model_lookups_vs_*` check the same on small schedules). Before,
//! a rename linked the new entry and removed the old one as two stores
//! (an exchange re-pointed its two names one after the other, a moved
//! directory's `..` changed before either): a reader between them found
//! one file under both names, or an exchange half done, or `..` naming
//! the new parent while the directory was still only in the old one.
//!
//! Each test prepares `ROUNDS` independent renames (fresh names, so that
//! each round's "before" and "after" are known), then a writer runs them
//! in turn, publishing the round it is at, while readers run that
//! round's lookups and check them.
//!
//! Knob: `LANEFS_RENAME_ATOMIC_ROUNDS` (renames per test, default 20000).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lanefs_core::*;

mod common;

/// One lookup: directory, name (`..` understood), the inode number it
/// answers before the round's rename and after it (`None`: `ENOENT`).
type Lookup = (Ino, Vec<u8>, Option<Ino>, Option<Ino>);

/// An `after` of a [`Lookup`]: some file other than `before` (one the
/// rename makes: a whiteout).
const NEW: Option<Ino> = Some(Ino::MAX);

/// Run `rounds` renames (`rename(i)`, in order) while readers look up
/// round `i`'s names (`lookups(i)`, made by `setup` before the race) and
/// check that each round switches from before to after once.
fn race(fs: &Fs, setup: impl Fn(usize) -> Vec<Lookup>, rename: impl Fn(usize)) {
    let rounds = common::knob("LANEFS_RENAME_ATOMIC_ROUNDS", 20_000) as usize;
    let lookups: Arc<Vec<Vec<Lookup>>> = Arc::new((0..rounds).map(setup).collect());
    let at = Arc::new(AtomicUsize::new(0));
    let read = {
        let (fs, at, lookups) = (fs.clone(), at.clone(), lookups.clone());
        move |_k: usize| {
            let r = Cred::root();
            let i = at.load(Ordering::Acquire);
            let mut done = false;
            let mut seen = Vec::new();
            for (dir, name, before, after) in &lookups[i] {
                let got = match fs.lookup(&r, *dir, name) {
                    Ok(a) => Some(a.ino),
                    Err(Errno::ENOENT) => None,
                    Err(e) => panic!("round {i}: lookup of {name:?}: {e:?}"),
                };
                seen.push((String::from_utf8_lossy(name).into_owned(), got));
                let is_after = |g: Option<Ino>| match *after {
                    NEW => g.is_some() && g != *before,
                    _ => g == *after,
                };
                done |= is_after(got);
                let ok = if done { is_after(got) } else { got == *before };
                assert!(
                    ok,
                    "round {i}: {:?} neither before ({before:?}) nor after ({after:?}) \
                     the rename, or before it after another lookup saw it done; \
                     answers: {seen:?}",
                    String::from_utf8_lossy(name),
                );
            }
            // Counted: a round whose lookups straddled the rename.
            done && seen.first().is_some_and(|(_, g)| *g == lookups[i][0].2)
        }
    };
    let straddled: u64 = common::with_readers(3, read, || {
        for i in 0..rounds {
            at.store(i, Ordering::Release);
            rename(i);
        }
    })
    .into_iter()
    .sum();
    // Not an assertion (a loaded machine may schedule the readers so that
    // none straddles): how often the race was run at all.
    eprintln!("{straddled} reads straddled a rename in {rounds} rounds");
    if let Err(bad) = fs.check() {
        panic!("after the race: {bad:?}");
    }
}

fn name(prefix: &str, i: usize) -> Vec<u8> {
    format!("{prefix}{i}").into_bytes()
}

fn file(fs: &Fs, dir: Ino, name: &[u8]) -> Ino {
    let f = fs.mknod(&Cred::root(), dir, name, 0o644, 0, 0).unwrap();
    fs.forget(f.ino, 1);
    f.ino
}

fn dir(fs: &Fs, parent: Ino, name: &[u8]) -> Ino {
    let d = fs.mkdir(&Cred::root(), parent, name, 0o755, 0).unwrap();
    fs.forget(d.ino, 1);
    d.ino
}

/// `rename(a{i}, b{i}, flags)` in the root.
fn rename_ab(fs: &Fs, i: usize, flags: u32) {
    fs.rename(
        &Cred::root(),
        ROOT_INO,
        &name("a", i),
        ROOT_INO,
        &name("b", i),
        flags,
    )
    .unwrap()
}

/// `rename(a, b)` in one directory, `b` absent: looked up `b`, `a`, `b`,
/// never the file under both names, never under neither.
#[test]
fn rename_is_atomic_for_lookups() {
    let fs = Fs::new_in_memory();
    race(
        &fs,
        |i| {
            let a = Some(file(&fs, ROOT_INO, &name("a", i)));
            let b = (ROOT_INO, name("b", i), None, a);
            vec![b.clone(), (ROOT_INO, name("a", i), a, None), b]
        },
        |i| rename_ab(&fs, i, 0),
    );
}

/// `rename(a, b)` with `RENAME_WHITEOUT`: `a` goes from the file to the
/// whiteout when `b` appears.
#[test]
fn rename_whiteout_is_atomic_for_lookups() {
    let fs = Fs::new_in_memory();
    race(
        &fs,
        |i| {
            let a = Some(file(&fs, ROOT_INO, &name("a", i)));
            let b = (ROOT_INO, name("b", i), None, a);
            vec![b.clone(), (ROOT_INO, name("a", i), a, NEW), b]
        },
        |i| rename_ab(&fs, i, RENAME_WHITEOUT),
    );
}

/// `rename(a, b)` over an existing `b`: `b` never `ENOENT`, and it names
/// the moved file once `a` is gone.
#[test]
fn rename_over_is_atomic_for_lookups() {
    let fs = Fs::new_in_memory();
    race(
        &fs,
        |i| {
            let a = Some(file(&fs, ROOT_INO, &name("a", i)));
            let b = Some(file(&fs, ROOT_INO, &name("b", i)));
            let at_b = (ROOT_INO, name("b", i), b, a);
            vec![at_b.clone(), (ROOT_INO, name("a", i), a, None), at_b]
        },
        |i| rename_ab(&fs, i, 0),
    );
}

/// `rename(p/a, q/b)` with `RENAME_NOREPLACE`: atomic across the two
/// directories.
#[test]
fn cross_directory_rename_is_atomic_for_lookups() {
    let fs = Fs::new_in_memory();
    let (p, q) = (dir(&fs, ROOT_INO, b"p"), dir(&fs, ROOT_INO, b"q"));
    race(
        &fs,
        |i| {
            let a = Some(file(&fs, p, &name("a", i)));
            let b = (q, name("b", i), None, a);
            vec![b.clone(), (p, name("a", i), a, None), b]
        },
        |i| {
            let nr = RENAME_NOREPLACE;
            fs.rename(&Cred::root(), p, &name("a", i), q, &name("b", i), nr)
                .unwrap()
        },
    );
}

/// `RENAME_EXCHANGE` of `a` and `b`: once one name is seen swapped, the
/// other is too.
#[test]
fn exchange_is_atomic_for_lookups() {
    let fs = Fs::new_in_memory();
    race(
        &fs,
        |i| {
            let a = Some(file(&fs, ROOT_INO, &name("a", i)));
            let b = Some(file(&fs, ROOT_INO, &name("b", i)));
            let at_a = (ROOT_INO, name("a", i), a, b);
            vec![at_a.clone(), (ROOT_INO, name("b", i), b, a), at_a]
        },
        |i| rename_ab(&fs, i, RENAME_EXCHANGE),
    );
}

/// A directory moved from `p` to `q`: its `..` switches with its entries
/// (`q/d` found ⇒ `..` is `q` ⇒ `p/d` gone).
#[test]
fn a_moved_directorys_dotdot_switches_with_its_entries() {
    let fs = Fs::new_in_memory();
    let (p, q) = (dir(&fs, ROOT_INO, b"p"), dir(&fs, ROOT_INO, b"q"));
    race(
        &fs,
        |i| {
            let d = dir(&fs, p, &name("d", i));
            vec![
                (q, name("d", i), None, Some(d)),
                (d, b"..".to_vec(), Some(p), Some(q)),
                (p, name("d", i), Some(d), None),
            ]
        },
        |i| {
            fs.rename(&Cred::root(), p, &name("d", i), q, &name("d", i), 0)
                .unwrap()
        },
    );
}
