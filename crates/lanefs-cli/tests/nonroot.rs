//! Mounts by an unprivileged user (uid 1000) through `fusermount3`: the
//! mount works and unmounts, is closed to every other user (root
//! included), `allow_other`/`allow_root` need `user_allow_other` in
//! `/etc/fuse.conf` and then behave as documented, the io_uring transport
//! is used (or refused) as the kernel decides, and `auto_unmount` cleans up
//! after a killed daemon. Needs root (to set up the namespace) and
//! `fusermount3`.
//!
//! Each test runs in its own private mount namespace (`unshare`), where
//! `/dev/fuse` is a 0666 node, as distributions install it (a machine may
//! have it 0600, which keeps users out: fusermount3 opens it with the
//! user's rights), and, where a test asks, `/etc/fuse.conf` says
//! `user_allow_other`. Both are bind mounts inside the namespace: the
//! machine's own files are never edited, and nothing leaks to other tests.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use common::*;

/// The unprivileged user that mounts, and another one.
const USER: u32 = 1000;
const OTHER: u32 = 1001;

/// A private mount namespace, held by a sleeping process, with a user's
/// home directory and empty mount point (owned by [`USER`]).
struct UserNs {
    holder: Child,
    base: PathBuf,
    home: PathBuf,
    mnt: PathBuf,
    /// A daemon started with `-f` (our child, through nsenter and setpriv,
    /// which exec).
    daemon: Option<Child>,
}

impl UserNs {
    /// Set up the namespace; `user_allow_other` puts that line into its
    /// `/etc/fuse.conf`.
    fn new(name: &str, user_allow_other: bool) -> UserNs {
        require_tool("fusermount3");
        require_tool("nsenter");
        let base = unique_dir(name);
        let home = base.join("home");
        let mnt = home.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        for p in [&home, &mnt] {
            std::os::unix::fs::chown(p, Some(USER), Some(USER)).unwrap();
        }
        let conf = base.join("fuse.conf");
        std::fs::write(
            &conf,
            if user_allow_other {
                "user_allow_other\n"
            } else {
                "# no user_allow_other\n"
            },
        )
        .unwrap();
        let script = format!(
            "set -e; mknod -m 666 {b}/fuse c 10 229; mount --bind {b}/fuse /dev/fuse; \
             mount --bind {b}/fuse.conf /etc/fuse.conf; echo ready; exec sleep 600",
            b = base.display()
        );
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cannot run unshare");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "namespace setup failed");
        UserNs {
            holder,
            base,
            home,
            mnt,
            daemon: None,
        }
    }

    /// `prog args` in the namespace as `uid` (gid = uid, no supplementary
    /// groups; uid 0 runs as root).
    fn cmd(&self, uid: u32, prog: &str, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.holder.id().to_string())
            .arg("-m")
            .arg("--");
        if uid != 0 {
            c.arg("setpriv")
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .arg("--clear-groups");
        }
        c.arg(prog).args(args);
        c
    }

    /// `sh -c script` in the namespace as `uid`, under a timeout.
    fn sh(&self, uid: u32, script: &str) -> Output {
        run_timeout(30, &mut self.cmd(uid, "sh", &["-c", script]))
    }

    /// Whether a FUSE file system is mounted on the mount point in the
    /// namespace, and with which superblock options.
    fn mount_options(&self) -> Option<String> {
        let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", self.holder.id())).ok()?;
        let want = self.mnt.to_string_lossy().to_string();
        info.lines().rev().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (f.get(4) == Some(&want.as_str()) && f.get(sep + 1)?.starts_with("fuse"))
                .then(|| f.get(sep + 3).unwrap_or(&"").to_string())
        })
    }

    fn mounted(&self) -> bool {
        self.mount_options().is_some()
    }

    /// The `lanefs mount` arguments for this test: memory store, log file,
    /// the thread's transport, then `opts`.
    fn mount_args(&self, transport: &str, opts: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = ["mount", "--memory", "--log-file"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.push(self.log_path().to_string_lossy().into_owned());
        a.push("--transport".into());
        a.push(transport.into());
        if writeback() {
            a.extend(["-o".into(), "writeback_cache".into()]);
        }
        a.extend(opts.iter().map(|s| s.to_string()));
        a.push(self.mnt.to_string_lossy().into_owned());
        a
    }

    /// `lanefs mount` as [`USER`], backgrounded (returns once ready or
    /// failed).
    fn mount_bg(&self, transport: &str, opts: &[&str]) -> Output {
        let args = self.mount_args(transport, opts);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_timeout(60, &mut self.cmd(USER, BIN, &args))
    }

    /// `lanefs mount -f` as [`USER`], kept as our child; waits for the
    /// mount.
    fn mount_fg(&mut self, transport: &str, opts: &[&str]) {
        let mut args = self.mount_args(transport, opts);
        args.insert(1, "-f".into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = self
            .cmd(USER, BIN, &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot run lanefs");
        self.daemon = Some(child);
        let up = wait_until(30, || {
            self.mounted()
                || matches!(
                    self.daemon.as_mut().map(|c| c.try_wait()),
                    Some(Ok(Some(_)))
                )
        });
        assert!(
            up && self.mounted(),
            "user mount did not come up:\n{}",
            self.log()
        );
    }

    fn log_path(&self) -> PathBuf {
        self.home.join("lanefs.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The path of `rel` under the mount point, as a string for scripts.
    fn at(&self, rel: &str) -> String {
        self.mnt.join(rel).to_string_lossy().into_owned()
    }

    /// Processes whose command line mentions our mount point (daemon,
    /// watcher), by pid.
    fn our_processes(&self) -> Vec<i32> {
        let want = self.mnt.to_string_lossy().into_owned();
        let mut v = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmd
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if args.iter().any(|a| a == &want) && args.iter().any(|a| a.ends_with("lanefs")) {
                v.push(pid);
            }
        }
        v
    }
}

impl Drop for UserNs {
    fn drop(&mut self) {
        if self.mounted() {
            let mnt = self.mnt.to_string_lossy().into_owned();
            let _ = run_timeout(10, &mut self.cmd(0, "umount", &["-l", &mnt]));
        }
        if let Some(mut d) = self.daemon.take() {
            if !wait_until(5, || matches!(d.try_wait(), Ok(Some(_)))) {
                let _ = d.kill();
            }
            let _ = d.wait();
        }
        // A backgrounded daemon ends with its session; one that does not
        // is killed by pid.
        if !wait_until(5, || self.our_processes().is_empty()) {
            for pid in self.our_processes() {
                // SAFETY: kill(2) on a pid we found running our binary on
                // our own mount point.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// Whether the kernel lets CAP_SYS_ADMIN into any FUSE mount
/// (`fuse.allow_sys_admin_access`, default N).
fn sys_admin_bypass() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/allow_sys_admin_access")
        .is_ok_and(|v| v.trim() == "Y")
}

/// A user mounts on their own directory; every kind of change works, the
/// mount's root is theirs, `lanefs stats` names the transport,
/// `fusermount3 -u` unmounts and the daemon exits 0.
fn user_mount_works_and_unmounts() {
    let mut ns = UserNs::new("user", false);
    ns.mount_fg(&transport(), &[]);
    let opts = ns.mount_options().unwrap();
    assert!(
        opts.contains("user_id=1000") && opts.contains("group_id=1000"),
        "{opts}"
    );
    assert!(!opts.contains("allow_other"), "opened to others: {opts}");
    let script = format!(
        "set -e; cd {m}; test \"$(stat -c %u:%g .)\" = 1000:1000; \
         printf hello > f; test \"$(cat f)\" = hello; printf more >> f; \
         test \"$(cat f)\" = hellomore; mkdir d; mv f d/g; test \"$(ls d)\" = g; \
         test ! -e f; ln -s d/g s; test \"$(cat s)\" = hellomore; \
         for i in 1 2 3 4 5; do : > d/n$i; done; test \"$(ls d | wc -l)\" = 6; \
         rm d/g s d/n*; rmdir d; test -z \"$(ls -A)\"",
        m = ns.mnt.display()
    );
    let out = ns.sh(USER, &script);
    assert!(out.status.success(), "as the user:\n{}", show(&out));
    let stats = run_timeout(10, &mut ns.cmd(USER, BIN, &["stats", &ns.at("")]));
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(
        text.contains(&format!("transport={}", transport())),
        "{}",
        show(&stats)
    );
    let out = run_timeout(10, &mut ns.cmd(USER, "fusermount3", &["-u", &ns.at("")]));
    assert!(out.status.success(), "fusermount3 -u:\n{}", show(&out));
    assert!(!ns.mounted());
    let mut d = ns.daemon.take().unwrap();
    assert!(
        wait_until(10, || matches!(d.try_wait(), Ok(Some(_)))),
        "daemon still running 10 s after fusermount3 -u"
    );
    let st = d.wait().unwrap();
    assert!(st.success(), "daemon exited {st}:\n{}", ns.log());
}

/// Without `allow_other`/`allow_root` nobody but the mounting user gets
/// in: another user gets EACCES, and so does root (the kernel checks the
/// caller's uid and gid against the mount's, whatever its capabilities,
/// unless `fuse.allow_sys_admin_access` is on).
fn user_mount_is_closed_to_others() {
    let ns = UserNs::new("closed", false);
    let out = ns.mount_bg(&transport(), &[]);
    assert!(out.status.success(), "{}", show(&out));
    let out = ns.sh(USER, &format!("echo x > {}", ns.at("f")));
    assert!(out.status.success(), "{}", show(&out));
    let f = ns.at("f");
    let o = run_timeout(10, &mut ns.cmd(OTHER, "stat", &[&f]));
    assert!(
        !o.status.success() && stderr_of(&o).contains("Permission denied"),
        "another user:\n{}",
        show(&o)
    );
    let o = run_timeout(10, &mut ns.cmd(0, "stat", &[&f]));
    if sys_admin_bypass() {
        assert!(
            o.status.success(),
            "root with allow_sys_admin_access:\n{}",
            show(&o)
        );
    } else {
        assert!(
            !o.status.success() && stderr_of(&o).contains("Permission denied"),
            "root:\n{}",
            show(&o)
        );
    }
    // The user unmounts with `lanefs umount` (umount2 is EPERM for them:
    // it goes through fusermount3 -u).
    let out = run_timeout(10, &mut ns.cmd(USER, BIN, &["umount", &ns.at("")]));
    assert!(out.status.success(), "lanefs umount:\n{}", show(&out));
    assert!(!ns.mounted());
    assert!(
        wait_until(10, || ns.our_processes().is_empty()),
        "daemon left running after lanefs umount"
    );
    // `suid`/`dev` are not a user's to have: fusermount3 mounts nosuid,
    // nodev anyway, and the daemon's log says it overruled them.
    let out = ns.mount_bg(&transport(), &["-o", "suid,dev"]);
    assert!(out.status.success(), "{}", show(&out));
    let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", ns.holder.id())).unwrap();
    let want = format!(" {} ", ns.mnt.display());
    let line = info.lines().rev().find(|l| l.contains(&want)).unwrap();
    let flags = line.split(' ').nth(5).unwrap();
    assert!(
        flags.split(',').any(|f| f == "nosuid") && flags.split(',').any(|f| f == "nodev"),
        "{line}"
    );
    let log = ns.log();
    assert!(
        log.contains("unsafe option suid ignored") && log.contains("unsafe option dev ignored"),
        "not logged:\n{log}"
    );
}

/// `allow_other` by a user: refused (one line, non-zero, nothing mounted)
/// unless `/etc/fuse.conf` has `user_allow_other`; then other users get in
/// with the kernel checking permissions (`default_permissions`).
fn user_allow_other_needs_fuse_conf() {
    let ns = UserNs::new("allowother-no", false);
    let out = ns.mount_bg(&transport(), &["-o", "allow_other"]);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(err.lines().count(), 1, "{}", show(&out));
    assert!(err.contains("user_allow_other"), "{err}");
    assert!(!ns.mounted());
    drop(ns);

    let ns = UserNs::new("allowother-yes", true);
    let out = ns.mount_bg(&transport(), &["-o", "allow_other"]);
    assert!(out.status.success(), "{}", show(&out));
    let opts = ns.mount_options().unwrap();
    assert!(
        opts.contains("allow_other") && opts.contains("default_permissions"),
        "{opts}"
    );
    let out = ns.sh(
        USER,
        &format!(
            "echo shared > {f} && mkdir {d} && chmod 700 {d}",
            f = ns.at("f"),
            d = ns.at("d")
        ),
    );
    assert!(out.status.success(), "{}", show(&out));
    let out = ns.sh(OTHER, &format!("cat {}", ns.at("f")));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "shared\n",
        "{}",
        show(&out)
    );
    for (what, script) in [
        ("write a 0644 file", format!("echo x >> {}", ns.at("f"))),
        ("create in a 0755 dir", format!(": > {}", ns.at("g"))),
        ("list a 0700 dir", format!("ls {}", ns.at("d"))),
    ] {
        let o = ns.sh(OTHER, &script);
        assert!(
            !o.status.success() && stderr_of(&o).contains("Permission denied"),
            "another user could {what}:\n{}",
            show(&o)
        );
    }
    let o = run_timeout(10, &mut ns.cmd(0, "cat", &[&ns.at("f")]));
    assert!(o.status.success(), "root:\n{}", show(&o));
}

/// `allow_root` by a user: the same fuse.conf rule (the error says that
/// allow_root is mounted with allow_other); with it, root gets in and any
/// other user gets EACCES from the daemon.
fn user_allow_root() {
    let ns = UserNs::new("allowroot-no", false);
    let out = ns.mount_bg(&transport(), &["-o", "allow_root"]);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(err.lines().count(), 1, "{}", show(&out));
    assert!(
        err.contains("user_allow_other") && err.contains("allow_root"),
        "{err}"
    );
    assert!(!ns.mounted());
    drop(ns);

    let ns = UserNs::new("allowroot-yes", true);
    let out = ns.mount_bg(&transport(), &["-o", "allow_root"]);
    assert!(out.status.success(), "{}", show(&out));
    let out = ns.sh(USER, &format!("echo mine > {}", ns.at("f")));
    assert!(out.status.success(), "{}", show(&out));
    let o = run_timeout(10, &mut ns.cmd(0, "cat", &[&ns.at("f")]));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "mine\n",
        "root:\n{}",
        show(&o)
    );
    let o = run_timeout(
        10,
        &mut ns.cmd(0, "sh", &["-c", &format!(": > {}", ns.at("byroot"))]),
    );
    assert!(o.status.success(), "root creates:\n{}", show(&o));
    // Twice: the second time nothing may come from the kernel's caches.
    for round in 0..2 {
        for (what, args) in [
            ("stat", vec![ns.at("f")]),
            ("cat", vec![ns.at("f")]),
            ("ls", vec![ns.at("")]),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = run_timeout(10, &mut ns.cmd(OTHER, what, &args));
            assert!(
                !o.status.success() && stderr_of(&o).contains("Permission denied"),
                "round {round}: another user's {what} got in:\n{}",
                show(&o)
            );
        }
    }
    let out = ns.sh(USER, &format!("cat {} && ls {}", ns.at("f"), ns.at("")));
    assert!(
        out.status.success(),
        "the user after the others:\n{}",
        show(&out)
    );
}

/// `auto_unmount` by a user: after SIGKILL of the daemon the watcher
/// (running as the user) detaches the mount through `fusermount3 -uz`.
fn user_auto_unmount_after_sigkill() {
    let mut ns = UserNs::new("autoumount", false);
    ns.mount_fg(&transport(), &["-o", "auto_unmount"]);
    let out = ns.sh(USER, &format!("echo x > {}", ns.at("f")));
    assert!(out.status.success(), "{}", show(&out));
    let mut d = ns.daemon.take().unwrap();
    d.kill().unwrap();
    d.wait().unwrap();
    assert!(
        wait_until(10, || !ns.mounted()),
        "still mounted 10 s after the user's daemon died"
    );
    assert!(
        wait_until(10, || ns.our_processes().is_empty()),
        "watcher left running"
    );
}

on_both_transports!(
    user_mount_works_and_unmounts,
    user_mount_is_closed_to_others,
    user_allow_other_needs_fuse_conf,
    user_allow_root,
    user_auto_unmount_after_sigkill,
);

/// `--transport auto` and `uring` for a user: FUSE-over-io_uring needs no
/// privilege of its own (the rings are registered on the session fd
/// fusermount3 passed us), so a user gets it wherever root would — unless
/// `kernel.io_uring_disabled` refuses this user rings: then `auto` serves
/// through `/dev/fuse` and says so in the log, and `uring` fails with one
/// line.
#[test]
fn user_transport_choice() {
    let uring = uring_unavailable().is_none();
    let rings_refused = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .is_ok_and(|v| v.trim() != "0");
    let mut ns = UserNs::new("transport", false);
    ns.mount_fg("auto", &[]);
    let stats = run_timeout(10, &mut ns.cmd(USER, BIN, &["stats", &ns.at("")]));
    let text = String::from_utf8_lossy(&stats.stdout).into_owned();
    let got_uring = text.contains("transport=uring");
    if uring && !rings_refused {
        assert!(got_uring, "auto as a user: {text}");
    } else {
        assert!(text.contains("transport=dev"), "auto as a user: {text}");
    }
    if uring && rings_refused && !got_uring {
        assert!(
            ns.log().contains("io_uring refused"),
            "fallback not logged:\n{}",
            ns.log()
        );
    }
    let out = run_timeout(10, &mut ns.cmd(USER, "fusermount3", &["-u", &ns.at("")]));
    assert!(out.status.success(), "{}", show(&out));
    let mut d = ns.daemon.take().unwrap();
    assert!(wait_until(10, || matches!(d.try_wait(), Ok(Some(_)))));
    let _ = d.wait();
    let out = ns.mount_bg("uring", &[]);
    if uring && !got_uring {
        assert!(!out.status.success(), "uring where auto fell back");
    }
    if !out.status.success() {
        let err = stderr_of(&out);
        assert_eq!(err.lines().count(), 1, "{}", show(&out));
        assert!(err.contains("io_uring"), "{err}");
        assert!(!ns.mounted());
    } else {
        assert!(uring, "uring mounted where the kernel lacks it");
        let stats = run_timeout(10, &mut ns.cmd(USER, BIN, &["stats", &ns.at("")]));
        assert!(
            String::from_utf8_lossy(&stats.stdout).contains("transport=uring"),
            "{}",
            show(&stats)
        );
    }
}

/// `AUDIT_ARCH_*` of this build (seccomp data's `arch`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Make `cmd`'s process (and everything it execs, setuid fusermount3
/// included) get `EPERM` from `io_uring_setup`, as
/// `kernel.io_uring_disabled` does for a user it refuses — but for this
/// process tree only: a seccomp filter, installed by the (root) test
/// before the exec, so it needs no `no_new_privs` and setuid still works.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn refuse_io_uring(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let filter = [
        stmt(load, 4), // seccomp_data.arch
        jeq(AUDIT_ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(load, 0), // seccomp_data.nr
        jeq(libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    // SAFETY: the closure only calls prctl (async-signal-safe) with a
    // program that lives in the closure (moved in, not reallocated).
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Where the kernel offers FUSE-over-io_uring but this user may not
/// create rings (`io_uring_setup` is `EPERM`): `--transport auto` serves
/// through `/dev/fuse` and says so in the log; `--transport uring` fails
/// with one line and mounts nothing.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn user_without_io_uring_falls_back() {
    if let Some(why) = uring_unavailable() {
        eprintln!("SKIPPED (io_uring transport): {why}");
        return;
    }
    let ns = UserNs::new("noring", false);
    // `lanefs mount` under `timeout`, without rings (run_timeout would
    // rebuild the command and lose the filter).
    let mount_without_rings = |transport: &str| {
        let args = ns.mount_args(transport, &[]);
        let mut c = Command::new("timeout");
        c.args(["-k", "10", "60", "nsenter", "-t"])
            .arg(ns.holder.id().to_string())
            .args(["-m", "--", "setpriv", "--reuid=1000", "--regid=1000"])
            .args(["--clear-groups", BIN])
            .args(&args)
            .stdin(Stdio::null());
        refuse_io_uring(&mut c);
        c.output().expect("cannot run timeout")
    };
    let out = mount_without_rings("auto");
    assert!(out.status.success(), "auto without rings:\n{}", show(&out));
    let stats = run_timeout(10, &mut ns.cmd(USER, BIN, &["stats", &ns.at("")]));
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains("transport=dev"), "{}", show(&stats));
    assert!(
        ns.log()
            .contains("io_uring refused to this process; serving through /dev/fuse"),
        "fallback not logged:\n{}",
        ns.log()
    );
    let out = ns.sh(USER, &format!("echo x > {f} && cat {f}", f = ns.at("f")));
    assert!(out.status.success(), "{}", show(&out));
    let out = run_timeout(10, &mut ns.cmd(USER, "fusermount3", &["-u", &ns.at("")]));
    assert!(out.status.success(), "{}", show(&out));
    assert!(wait_until(10, || ns.our_processes().is_empty()));

    let out = mount_without_rings("uring");
    let err = stderr_of(&out);
    assert!(
        !out.status.success(),
        "uring without rings mounted:\n{}",
        show(&out)
    );
    assert_eq!(err.lines().count(), 1, "{}", show(&out));
    assert!(
        err.contains("--transport uring") && err.contains("io_uring_setup"),
        "{err}"
    );
    assert!(!ns.mounted());
}
