//! The mount-helper form: `lanefs SOURCE MOUNTPOINT [-o OPTIONS] [-f]`,
//! what `mount -t fuse.lanefs SOURCE MNT -o OPTS` and an fstab line run
//! (mount(8) calls `mount.fuse3`, which runs the program named by the
//! type's subtype as `lanefs SOURCE MNT -o OPTS`). SOURCE `memory` or
//! `none` is the memory store, anything else an image path. It becomes
//! `lanefs mount [--memory] [IMAGE] MNT -o OPTS ...`; like every mount
//! helper it returns once the mount is ready (the daemon stays behind),
//! unless `-f` is given. SOURCE becomes `fsname=` (what `mount`, `df`
//! and systemd's mount units show) unless the options name one.
//!
//! Options only a helper line can carry (no command-line flags there):
//! `transport=auto|uring|dev`, `threads=N`, `capacity=SIZE`,
//! `inodes=N`, `log_file=PATH`; the others go to `-o` as given (mount
//! options; the fstab words `defaults`, `nofail`, `_netdev`, `auto`,
//! `noauto`, `user`, `users`, `x-*` are accepted and ignored there).
//!
//! No state, no locks.

use std::ffi::OsString;

/// Is `name` a subcommand of the ordinary command line (taken from the
/// clap definition, so a new subcommand can never be mistaken for a
/// helper-form SOURCE)?
fn is_subcommand(name: &str) -> bool {
    use clap::CommandFactory;
    name == "help"
        || crate::Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == name || c.get_all_aliases().any(|a| a == name))
}

/// Helper-only `-o` keys and the `lanefs mount` flag each becomes.
const FLAG_OPTIONS: &[(&str, &str)] = &[
    ("transport", "--transport"),
    ("threads", "--threads"),
    ("capacity", "--capacity"),
    ("inodes", "--inodes"),
    ("log_file", "--log-file"),
];

/// `args` without the program name. `None`: not the helper form. Else
/// the equivalent `lanefs mount ...` arguments (without the program
/// name), or why the line is not understood.
pub fn translate(args: &[OsString]) -> Option<Result<Vec<OsString>, String>> {
    let first = args.first()?.to_str().unwrap_or("x");
    if first.starts_with('-') || is_subcommand(first) {
        return None;
    }
    Some(translate_helper(args))
}

fn translate_helper(args: &[OsString]) -> Result<Vec<OsString>, String> {
    let mut positional: Vec<OsString> = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let mut flags: Vec<OsString> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        match s.as_ref() {
            "-o" => {
                let v = it.next().ok_or("-o needs a value")?;
                options.push(v.to_str().ok_or("mount options must be UTF-8")?.into());
            }
            "-f" | "--foreground" => flags.push("--foreground".into()),
            // mount(8)'s own flags (no mtab, sloppy, verbose): nothing to do.
            "-n" | "-s" | "-v" => {}
            o if o.starts_with("-o") => options.push(o[2..].to_string()),
            o if o.starts_with('-') => {
                return Err(format!(
                    "unknown flag '{o}' (usage: lanefs SOURCE MOUNTPOINT [-o OPTIONS] [-f])"
                ))
            }
            _ => positional.push(a.clone()),
        }
    }
    let [source, mountpoint] = positional.as_slice() else {
        return Err(
            "usage: lanefs SOURCE MOUNTPOINT [-o OPTIONS] [-f] (SOURCE: memory, none, or an image)"
                .into(),
        );
    };
    let mut out: Vec<OsString> = vec!["mount".into()];
    match source.to_str() {
        Some("memory" | "none") => out.push("--memory".into()),
        _ => out.push(source.clone()),
    }
    out.push(mountpoint.clone());
    let mut rest = Vec::new();
    for opt in options
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
    {
        let flag = opt.split_once('=').and_then(|(k, v)| {
            FLAG_OPTIONS
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, f)| (f, v))
        });
        match flag {
            Some((f, v)) => {
                out.push((*f).into());
                out.push(v.into());
            }
            None => rest.push(opt.to_string()),
        }
    }
    // `mount`, `df` and systemd's mount units see SOURCE as the source.
    let source_name = source.to_string_lossy();
    if !rest.iter().any(|o| o.starts_with("fsname="))
        && !source_name.contains(|c: char| c == ',' || c.is_whitespace())
    {
        rest.push(format!("fsname={source_name}"));
    }
    if !rest.is_empty() {
        out.push("-o".into());
        out.push(rest.join(",").into());
    }
    out.extend(flags);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(args: &[&str]) -> Option<Result<Vec<String>, String>> {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        translate(&v).map(|r| r.map(|v| v.into_iter().map(|s| s.into_string().unwrap()).collect()))
    }

    #[test]
    fn helper_lines_become_mount_commands() {
        assert!(t(&["mount", "--memory", "/m"]).is_none());
        // Every subcommand, hidden ones included, is the ordinary form.
        for sub in [
            "audit",
            "bench",
            "stats",
            crate::watch::WATCH_SUBCOMMAND,
            "help",
        ] {
            assert!(t(&[sub, "/m"]).is_none(), "{sub}");
        }
        assert!(t(&["--help"]).is_none());
        assert!(t(&[]).is_none());
        assert_eq!(
            t(&[
                "memory",
                "/m",
                "-o",
                "rw,allow_other,transport=dev,capacity=64M"
            ])
            .unwrap(),
            Ok([
                "mount",
                "--memory",
                "/m",
                "--transport",
                "dev",
                "--capacity",
                "64M",
                "-o",
                "rw,allow_other,fsname=memory"
            ]
            .map(String::from)
            .to_vec())
        );
        assert_eq!(
            t(&["none", "/m"]).unwrap(),
            Ok(["mount", "--memory", "/m", "-o", "fsname=none"]
                .map(String::from)
                .to_vec())
        );
        assert_eq!(
            t(&["/img", "/m", "-odefaults,fsname=x", "-n", "-f"]).unwrap(),
            Ok([
                "mount",
                "/img",
                "/m",
                "-o",
                "defaults,fsname=x",
                "--foreground"
            ]
            .map(String::from)
            .to_vec())
        );
        assert!(t(&["memory"]).unwrap().unwrap_err().contains("usage"));
        assert!(t(&["memory", "/m", "-x"])
            .unwrap()
            .unwrap_err()
            .contains("'-x'"));
        assert!(t(&["memory", "/m", "-o"]).unwrap().is_err());
    }
}
