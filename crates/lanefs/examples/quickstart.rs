//! A tour of the lanefs Rust API: an in-memory file system, paths like
//! std::fs, File with Read/Write/Seek, credentials and xattrs.
//!
//! Run with `cargo run -p lanefs --example quickstart`.

use std::io::{Read, Seek, SeekFrom, Write};

use lanefs::{Cred, Filesystem, OpenOptions};

fn main() -> std::io::Result<()> {
    let fs = Filesystem::new_in_memory()?;

    fs.create_dir_all("/projects/lanefs/src")?;
    fs.write(
        "/projects/lanefs/README",
        b"an embeddable many-core file system\n",
    )?;
    fs.symlink("lanefs/README", "/projects/readme")?;

    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o640)
        .open(&fs, "/projects/lanefs/src/lib.rs")?;
    f.write_all(b"pub fn answer() -> u32 { 42 }\n")?;
    f.seek(SeekFrom::Start(7))?;
    let mut word = [0u8; 2];
    f.read_exact(&mut word)?;
    println!("read back {:?}", std::str::from_utf8(&word).unwrap_or("?"));

    fs.set_xattr("/projects/lanefs", b"user.owner", b"lanefs team", 0)?;
    println!(
        "xattr user.owner = {:?}",
        String::from_utf8_lossy(&fs.get_xattr("/projects/lanefs", b"user.owner")?)
    );

    // An unprivileged view: permission checks apply.
    let guest = fs.with_cred(Cred::user(1000, 1000));
    match guest.write("/projects/intruder", b"hi") {
        Err(e) => println!("guest write refused: {}", e),
        Ok(()) => println!("guest write allowed?!"),
    }

    for entry in fs.read_dir("/projects")? {
        let entry = entry?;
        let meta =
            fs.symlink_metadata(std::path::Path::new("/projects").join(entry.file_name()))?;
        println!(
            "{:<10} {:?} mode {:o} size {}",
            entry.file_name().to_string_lossy(),
            entry.kind(),
            meta.mode(),
            meta.len()
        );
    }
    println!(
        "readme via symlink: {}",
        fs.read_to_string("/projects/readme")?.trim()
    );

    let st = fs.statfs()?;
    println!("{} of {} inodes free", st.files_free, st.files);
    fs.core()
        .check()
        .map_err(|p| std::io::Error::other(p.join("; ")))?;
    Ok(())
}
