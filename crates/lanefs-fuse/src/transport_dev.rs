//! The `/dev/fuse` transport: N worker threads, each reading requests from
//! its own fd cloned from the session's (`FUSE_DEV_IOC_CLONE`), so the
//! kernel hands each request to whichever worker waits and the reply goes
//! back on the fd it came from — no shared reader, no hand-off. Each
//! worker decodes ([`wire::decode`]), calls [`dispatch`], and writes the
//! reply. Notifications ([`Notifier`]) are written to the session fd.
//!
//! # Locking rules
//!
//! None of its own: each worker owns its fd, request buffer and reply
//! buffer; the session fd is shared read-only (`Arc<OwnedFd>`; writes to
//! `/dev/fuse` are atomic per message in the kernel). `Session` is
//! immutable. All shared mutable state lives in the [`Handler`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno as NixErrno;

use crate::dispatch::{negotiate, InitReply, Reply, Session, REQUEST_BUFFER_BYTES};
use crate::handler::Handler;
use crate::proto::{FUSE_DEV_IOC_MAGIC, FUSE_INIT};
use crate::wire::{self, split_message, Op, ReplyBuf};
use crate::workers::{serve_raw, Workers};

nix::ioctl_read!(fuse_dev_ioc_clone, FUSE_DEV_IOC_MAGIC, 0, u32);

/// Open a new `/dev/fuse` fd attached to the session of `session_fd`.
pub fn clone_fd(session_fd: &OwnedFd) -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let fd: OwnedFd = f.into();
    let mut sfd = session_fd.as_raw_fd() as u32;
    // SAFETY: `fd` is an open /dev/fuse fd we own, and `sfd` is a valid
    // u32 the kernel reads the session fd number from (the ioctl is
    // declared _IOR but reads its argument, as libfuse uses it).
    unsafe { fuse_dev_ioc_clone(fd.as_raw_fd(), &mut sfd) }.map_err(io::Error::from)?;
    Ok(fd)
}

/// Writes notifications to the kernel over the session fd.
#[derive(Clone)]
pub struct Notifier {
    fd: Arc<OwnedFd>,
}

impl Notifier {
    pub fn new(fd: Arc<OwnedFd>) -> Notifier {
        Notifier { fd }
    }

    /// Drop the kernel's cached attributes (`off` -1) or also a data range.
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> io::Result<()> {
        let mut b = ReplyBuf::with_capacity(64);
        let msg = wire::notify_inval_inode(&mut b, ino, off, len);
        write_all(self.fd.as_fd(), msg)
    }

    /// Drop the kernel's dentry for `name` in `parent`.
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        let mut b = ReplyBuf::with_capacity(64 + name.len());
        let msg = wire::notify_inval_entry(&mut b, parent, name);
        write_all(self.fd.as_fd(), msg)
    }
}

fn write_all(fd: std::os::fd::BorrowedFd<'_>, msg: &[u8]) -> io::Result<()> {
    let n = nix::unistd::write(fd, msg).map_err(io::Error::from)?;
    if n != msg.len() {
        return Err(io::Error::other("short write to /dev/fuse"));
    }
    Ok(())
}

/// Read one message; `Ok(None)` when the session has ended (unmounted).
/// `woken` runs when a signal interrupted the wait (idle upkeep).
fn read_message(
    fd: &OwnedFd,
    buf: &mut [u8],
    mut woken: impl FnMut(),
) -> io::Result<Option<usize>> {
    loop {
        match nix::unistd::read(fd, buf) {
            Ok(n) => return Ok(Some(n)),
            Err(NixErrno::EINTR) => woken(),
            // ENOENT: the request was interrupted before we read it.
            Err(NixErrno::EAGAIN | NixErrno::ENOENT) => continue,
            Err(NixErrno::ENODEV) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Complete the INIT handshake on `fd`. `want_uring`: ask for
/// FUSE-over-io_uring if the kernel offers it; `want_writeback`: ask for
/// the kernel's writeback cache; `want_posix_acl`: ask for
/// `FUSE_POSIX_ACL` (`dispatch::negotiate`).
pub fn handshake(
    fd: &OwnedFd,
    want_uring: bool,
    want_writeback: bool,
    want_posix_acl: bool,
) -> Result<Session, String> {
    let mut buf = vec![0u8; REQUEST_BUFFER_BYTES];
    let mut out = ReplyBuf::default();
    loop {
        let n = read_message(fd, &mut buf, || {})
            .map_err(|e| format!("FUSE handshake: {e}"))?
            .ok_or("FUSE handshake: session ended")?;
        let (h, body) =
            split_message(&buf[..n]).map_err(|_| "FUSE handshake: malformed request")?;
        if h.opcode != FUSE_INIT {
            return Err(format!(
                "FUSE handshake: expected INIT, got opcode {}",
                h.opcode
            ));
        }
        let Ok(Op::Init(init)) = wire::decode(&h, None, body) else {
            return Err("FUSE handshake: malformed INIT".into());
        };
        match negotiate(&init, want_uring, want_writeback, want_posix_acl) {
            Ok(InitReply::Retry(o)) => {
                out.clear();
                out.push(&o);
                write_all(fd.as_fd(), out.finish(h.unique, 0)).map_err(|e| e.to_string())?;
            }
            Ok(InitReply::Ready(o, s)) => {
                out.clear();
                out.push(&o);
                write_all(fd.as_fd(), out.finish(h.unique, 0)).map_err(|e| e.to_string())?;
                tracing::info!(
                    kernel = format!("{}.{}", init.major, init.minor),
                    minor = s.minor,
                    flags = format!("{:#x}", s.flags),
                    "FUSE session initialised"
                );
                return Ok(s);
            }
            Err(msg) => {
                let _ = write_all(fd.as_fd(), out.finish(h.unique, -libc::EPROTO));
                return Err(msg);
            }
        }
    }
}

/// Serve requests from `fd` until the session ends.
fn worker(fd: &OwnedFd, handler: &Handler, s: &Session) -> io::Result<()> {
    let mut buf = vec![0u8; REQUEST_BUFFER_BYTES];
    let mut out = ReplyBuf::with_capacity(REQUEST_BUFFER_BYTES);
    let mut me = handler.upkeep().register();
    while let Some(n) = read_message(fd, &mut buf, || me.woken())? {
        me.started();
        let r = serve_one(fd, handler, s, &buf[..n], &mut out);
        me.finished();
        if !r? {
            return Ok(());
        }
    }
    Ok(())
}

/// Serve one message and write its reply; `Ok(false)` when the session
/// has ended.
fn serve_one(
    fd: &OwnedFd,
    handler: &Handler,
    s: &Session,
    msg: &[u8],
    out: &mut ReplyBuf,
) -> io::Result<bool> {
    let (h, body) = match split_message(msg) {
        Ok(x) => x,
        Err(_) => {
            tracing::error!(bytes = msg.len(), "malformed request header; dropped");
            return Ok(true);
        }
    };
    let reply = serve_raw(handler, s, &h, None, body, out);
    if let Reply::Send(err) = reply {
        match write_all(fd.as_fd(), out.finish(h.unique, err)) {
            Ok(()) => {}
            // The request was interrupted and is gone: nothing to do.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Start `threads` workers (the first on `fd` itself, the others on
/// clones) in `set`.
pub fn spawn_workers(
    set: &mut Workers,
    fd: &Arc<OwnedFd>,
    handler: &Arc<Handler>,
    s: &Arc<Session>,
    threads: usize,
) -> io::Result<()> {
    let mut fds = vec![fd.clone()];
    for _ in 1..threads.max(1) {
        fds.push(Arc::new(clone_fd(fd)?));
    }
    for (i, wfd) in fds.into_iter().enumerate() {
        let handler = handler.clone();
        let s = s.clone();
        set.spawn(format!("lanefs-dev-{i}"), move || {
            worker(&wfd, &handler, &s)
        })?;
    }
    Ok(())
}

/// Serve `handler` on `threads` workers until the file system is
/// unmounted. A worker that fails (an I/O error on `/dev/fuse`, or a
/// panic outside the request guard; request errors are answered) ends
/// the session at once with its error (see [`crate::workers`]).
pub fn run(
    fd: Arc<OwnedFd>,
    handler: Arc<Handler>,
    s: Arc<Session>,
    threads: usize,
) -> io::Result<()> {
    let mut set = Workers::default();
    spawn_workers(&mut set, &fd, &handler, &s, threads)?;
    let result = set.wait();
    handler.destroy();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_number_matches_the_kernel() {
        // _IOR(229, 0, uint32_t) from include/uapi/linux/fuse.h.
        assert_eq!(
            nix::request_code_read!(FUSE_DEV_IOC_MAGIC, 0, size_of::<u32>()),
            0x8004_e500
        );
        let _ = <crate::proto::InHeader as crate::proto::Pod>::read_from(&[0u8; 40]).unwrap();
    }
}
