//! Record the commit this binary is built from (`LANEFS_BUILD_COMMIT`), so
//! that results name the code that made them wherever the tool runs (the
//! working directory need not be the checkout). `-dirty` when tracked
//! files differ from that commit; `unknown` without git.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(c) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=LANEFS_BUILD_COMMIT={commit}");
    // Rebuild when HEAD moves (a commit, a checkout) or the index changes
    // (what `-dirty` looks at).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
    if let (Some(common), Some(head_ref)) = (
        git(&["rev-parse", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        println!("cargo:rerun-if-changed={common}/{head_ref}");
        println!("cargo:rerun-if-changed={common}/packed-refs");
    }
    // And when any source of the workspace changes: an edit not yet
    // staged moves neither HEAD nor the index, and a binary built from it
    // named the last commit without `-dirty` (a directory here is watched
    // recursively by file modification times).
    if let Some(top) = git(&["rev-parse", "--show-toplevel"]) {
        println!("cargo:rerun-if-changed={top}/crates");
    }
}
