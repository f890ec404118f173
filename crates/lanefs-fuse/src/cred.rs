//! Caller credentials: uid and gid come with each request; supplementary
//! groups are read from `/proc/<pid>/status` (the `Groups:` line), as
//! libfuse's `fuse_req_getgroups` does.
//!
//! Also whether a caller is inside a `chown(2)` call (`/proc/<tid>/syscall`),
//! which an empty SETATTR does not say.
//!
//! No locks or shared state: every call reads the file afresh, because a
//! process may change its groups at any time and pids are reused.

use lanefs_core::Cred;

/// Most supplementary groups read for one caller (Linux's `NGROUPS_MAX`).
pub const GROUPS_MAX: usize = 65536;
/// Largest `/proc/<pid>/status` we read (it is about 1.5 KiB plus the groups).
const STATUS_BYTES_MAX: usize = 1 << 20;

/// The identity of the process behind a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The calling thread's id (0 for requests the kernel makes on its own,
    /// such as writeback).
    pub pid: u32,
}

/// Parse the `Groups:` line of a `/proc/<pid>/status` text.
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|g| g.parse::<u32>().ok())
                .take(GROUPS_MAX)
                .collect()
        })
        .unwrap_or_default()
}

/// Supplementary groups of thread `pid`, or none if it cannot be read
/// (the process exited, or `pid` is 0).
pub fn groups_of(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    use std::io::Read;
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    let mut s = String::new();
    if f.take(STATUS_BYTES_MAX as u64)
        .read_to_string(&mut s)
        .is_err()
    {
        return Vec::new();
    }
    parse_groups(&s)
}

/// The engine credentials for `caller`. Root needs no groups (it passes
/// every check they could matter for), so its `/proc` read is skipped;
/// anyone else gets the groups read from `/proc`.
pub fn cred_for(caller: &Caller) -> Cred {
    let groups = if caller.uid == 0 {
        Vec::new()
    } else {
        groups_of(caller.pid)
    };
    Cred {
        uid: caller.uid,
        gid: caller.gid,
        groups,
    }
}

/// The `chown` family of system calls on this architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
const CHOWN_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
const CHOWN_SYSCALLS: &[libc::c_long] = &[libc::SYS_fchown, libc::SYS_fchownat];

/// Parse the system call number from a `/proc/<tid>/syscall` text (`-1`
/// or `running` when the thread is not in a system call).
pub fn parse_syscall_nr(text: &str) -> Option<libc::c_long> {
    text.split_whitespace().next()?.parse().ok()
}

/// Whether thread `pid` is blocked in a `chown(2)`-family system call now
/// (`/proc/<pid>/syscall`). The kernel sends the same empty SETATTR for
/// `chown(f, -1, -1)` and for the privilege kill before a write
/// (`file_remove_privs`); the caller sits in its system call while we
/// answer, so this tells them apart. `false` when it cannot be read
/// (the thread exited, no ptrace access to it, a kernel without
/// `CONFIG_HAVE_ARCH_TRACEHOOK`).
pub fn in_chown_syscall(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .ok()
        .and_then(|t| parse_syscall_nr(&t))
        .is_some_and(|nr| CHOWN_SYSCALLS.contains(&nr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_line() {
        let s = "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 1000 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), vec![4, 24, 27, 1000]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name: x\n"), Vec::<u32>::new());
    }

    #[test]
    fn syscall_numbers() {
        assert_eq!(parse_syscall_nr("92 0x1 0x2"), Some(92));
        assert_eq!(parse_syscall_nr("running"), None);
        assert_eq!(parse_syscall_nr("-1 0x7ffc 0x1"), Some(-1));
        // We are not in chown while reading our own file.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert!(!in_chown_syscall(tid));
        assert!(!in_chown_syscall(0));
    }

    #[test]
    fn reads_own_groups() {
        // Our own status file always has a Groups line; the call must not fail.
        let pid = std::process::id();
        let _ = groups_of(pid);
        assert!(groups_of(0).is_empty());
    }
}
