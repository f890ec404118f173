//! The FUSE-over-io_uring transport (kernel 6.14+, protocol 7.42): one
//! thread per possible CPU, pinned to it, each with its own io_uring and
//! [`QUEUE_DEPTH`] ring entries registered for queue `qid` = that CPU. The
//! kernel queues a request on the queue of the CPU that issued it, so a
//! request made on core k is served on core k. Each entry is a header
//! buffer ([`UringReqHeader`]) and a payload buffer; the thread decodes a
//! completed entry ([`wire::decode`] with the split fixed argument), calls
//! [`dispatch`], writes the reply into the same buffers and submits
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also hands it the next
//! request. FORGET, INTERRUPT and notifications stay on `/dev/fuse` (the
//! kernel sends them there; see `transport_dev`), as do requests made
//! before every queue has registered.
//!
//! # Locking rules
//!
//! None: each thread owns its ring, its entries and its reply buffer. The
//! buffers are shared with the kernel only between a submission that
//! names them and its completion (the io_uring protocol orders them).
//!
//! The kernel ends every entry with `-ENOTCONN` when the connection goes
//! away (unmount); a thread then exits. Any other error ends the thread
//! loudly (logged at error level and returned from [`run`]).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::dispatch::{Reply, Session};
use crate::handler::Handler;
use crate::proto::*;
use crate::wire::ReplyBuf;
use crate::workers::{serve_raw, Workers};

/// Ring entries registered per queue: how many requests of one CPU can be
/// in the daemon at once.
pub const QUEUE_DEPTH: usize = 4;
/// Offset of `len` in `struct io_uring_sqe` (after opcode, flags, ioprio,
/// fd, off, addr): the io-uring crate has no setter for it on URING_CMD.
const SQE_LEN_OFFSET: usize = 24;
/// Number of iovecs a REGISTER passes (header and payload).
const REGISTER_IOVECS: u32 = 2;

/// The CPUs the kernel counts queues for (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> io::Result<Vec<usize>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(s.trim()).ok_or_else(|| io::Error::other(format!("bad CPU list '{s}'")))
}

/// Parse a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

/// Whether this process may create the rings the transport needs (an
/// SQE128 ring like [`queue_thread`]'s): `kernel.io_uring_disabled` = 2,
/// or = 1 for a user outside `kernel.io_uring_group`, makes
/// `io_uring_setup` fail with `EPERM`, also where FUSE offers io_uring.
/// Asked before INIT, so `--transport auto` can still choose `/dev/fuse`.
pub fn rings_allowed() -> Result<(), String> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(1)
        .map(drop)
        .map_err(|e| format!("io_uring_setup: {e} (see kernel.io_uring_disabled)"))
}

/// One ring entry: buffers the kernel reads requests into and replies from.
struct Entry {
    header: Box<UringReqHeader>,
    payload: Vec<u8>,
    /// The two iovecs REGISTER points the kernel at (kept alive here).
    iov: [libc::iovec; 2],
}

impl Entry {
    fn new(payload_bytes: usize) -> Box<Entry> {
        let mut e = Box::new(Entry {
            header: Box::default(),
            payload: vec![0u8; payload_bytes],
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2],
        });
        e.iov[0] = libc::iovec {
            iov_base: (&mut *e.header as *mut UringReqHeader).cast(),
            iov_len: size_of::<UringReqHeader>(),
        };
        e.iov[1] = libc::iovec {
            iov_base: e.payload.as_mut_ptr().cast(),
            iov_len: e.payload.len(),
        };
        e
    }
}

fn cmd_bytes(qid: u16, commit_id: u64) -> [u8; 80] {
    let req = UringCmdReq {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 6],
    };
    let mut cmd = [0u8; 80];
    cmd[..size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
    cmd
}

fn register_sqe(fd: i32, qid: u16, ent: &Entry, tag: u64) -> squeue::Entry128 {
    let mut sqe = opcode::UringCmd80::new(types::Fd(fd), FUSE_IO_URING_CMD_REGISTER)
        .cmd(cmd_bytes(qid, 0))
        .addr(Some(ent.iov.as_ptr() as u64))
        .build()
        .user_data(tag);
    // SAFETY: `Entry128` is `#[repr(C)]` and starts with the kernel's
    // `struct io_uring_sqe`, whose `len` (u32) is at byte 24 of that ABI;
    // the write stays inside the 128-byte value we own.
    unsafe {
        let p = (&mut sqe as *mut squeue::Entry128).cast::<u8>();
        std::ptr::write_unaligned(p.add(SQE_LEN_OFFSET).cast::<u32>(), REGISTER_IOVECS);
    }
    sqe
}

fn commit_sqe(fd: i32, qid: u16, commit_id: u64, tag: u64) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
        .cmd(cmd_bytes(qid, commit_id))
        .build()
        .user_data(tag)
}

/// Serve one entry whose request just arrived; leaves the reply in it.
fn serve_entry(ent: &mut Entry, handler: &Handler, s: &Session, out: &mut ReplyBuf) -> u64 {
    let h = InHeader::read_from(&ent.header.in_out).unwrap_or_default();
    let io = ent.header.ring_ent_in_out;
    let commit_id = io.commit_id;
    let len = (io.payload_sz as usize).min(ent.payload.len());
    let reply = serve_raw(
        handler,
        s,
        &h,
        Some(&ent.header.op_in),
        &ent.payload[..len],
        out,
    );
    let err = match reply {
        Reply::Send(e) => e,
        // No ring request goes without a reply (FORGET comes on /dev/fuse);
        // the entry must be committed all the same.
        Reply::None => 0,
    };
    out.finish(h.unique, err);
    let payload = if err == 0 { out.payload() } else { &[][..] };
    let n = payload.len().min(ent.payload.len());
    debug_assert_eq!(n, payload.len(), "reply larger than the ring payload");
    ent.payload[..n].copy_from_slice(&payload[..n]);
    ent.header.in_out[..out.header().len()].copy_from_slice(out.header());
    ent.header.ring_ent_in_out.payload_sz = n as u32;
    commit_id
}

/// The queue thread for CPU `qid`.
fn queue_thread(fd: &OwnedFd, qid: u16, handler: &Handler, s: &Session) -> io::Result<()> {
    let cpu = qid as usize;
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            // An offline CPU: serve its queue from wherever we run.
            tracing::debug!(cpu, error = %e, "cannot pin queue thread");
        }
    }
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
        .setup_single_issuer()
        // A request's arrival completes an entry through task work; run it
        // when this thread waits in `submit_and_wait` (always, between
        // requests) instead of interrupting it (docs/FUSE.md).
        .setup_defer_taskrun()
        .build((QUEUE_DEPTH * 2).next_power_of_two() as u32)?;
    let payload_bytes = (s.max_write as usize).max(MIN_READ_BUFFER);
    let mut ents: Vec<Box<Entry>> = (0..QUEUE_DEPTH)
        .map(|_| Entry::new(payload_bytes))
        .collect();
    let raw = fd.as_raw_fd();
    for (i, e) in ents.iter().enumerate() {
        let sqe = register_sqe(raw, qid, e, i as u64);
        // SAFETY: the entry's buffers and iovecs live in `ents` (boxed,
        // never moved or freed) until this function returns, which is
        // after the kernel has completed every command naming them.
        unsafe { ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("submission queue full"))?;
    }
    let mut out = ReplyBuf::with_capacity(payload_bytes + 64);
    let mut live = QUEUE_DEPTH;
    // Completions of one wakeup (at most every entry), reused: no
    // allocation per wakeup.
    let mut done: Vec<(u64, i32)> = Vec::with_capacity(QUEUE_DEPTH);
    let mut me = handler.upkeep().register();
    while live > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                me.woken();
                continue;
            }
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(tag, res) in &done {
            let i = tag as usize;
            if res < 0 {
                live -= 1;
                match -res {
                    libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => continue,
                    e => {
                        let err = io::Error::from_raw_os_error(e);
                        tracing::error!(qid, error = %err, "io_uring queue entry failed");
                        return Err(err);
                    }
                }
            }
            me.started();
            let commit_id = serve_entry(&mut ents[i], handler, s, &mut out);
            me.finished();
            let sqe = commit_sqe(raw, qid, commit_id, tag);
            // SAFETY: as for REGISTER: the entry's buffers stay alive and
            // untouched by us until this command completes.
            unsafe { ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("submission queue full"))?;
        }
    }
    Ok(())
}

/// Serve on one pinned io_uring thread per possible CPU, beside
/// `dev_threads` `/dev/fuse` workers (FORGET, INTERRUPT, and whatever the
/// kernel sends before the rings are ready), until unmount. Any thread
/// that dies ends the session at once (a CPU whose queue nobody serves
/// would hang every request made on it).
pub fn run(
    fd: Arc<OwnedFd>,
    handler: Arc<Handler>,
    s: Arc<Session>,
    dev_threads: usize,
) -> io::Result<()> {
    let cpus = possible_cpus()?;
    let mut set = Workers::default();
    for &cpu in &cpus {
        let qid = u16::try_from(cpu).map_err(|_| io::Error::other("too many CPUs"))?;
        let (fd, handler, s) = (fd.clone(), handler.clone(), s.clone());
        set.spawn(format!("lanefs-uring-{cpu}"), move || {
            queue_thread(&fd, qid, &handler, &s)
        })?;
    }
    crate::transport_dev::spawn_workers(&mut set, &fd, &handler, &s, dev_threads)?;
    let result = set.wait();
    handler.destroy();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn register_sqe_carries_two_iovecs_and_the_queue() {
        let e = Entry::new(MIN_READ_BUFFER);
        let sqe = register_sqe(7, 3, &e, 11);
        // SAFETY: Entry128 is 128 bytes of plain data (repr(C)).
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(bytes[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(i32::from_ne_bytes(bytes[4..8].try_into().unwrap()), 7, "fd");
        assert_eq!(
            u64::from_ne_bytes(bytes[16..24].try_into().unwrap()),
            e.iov.as_ptr() as u64
        );
        assert_eq!(
            u32::from_ne_bytes(bytes[24..28].try_into().unwrap()),
            REGISTER_IOVECS
        );
        // cmd area starts at byte 48: fuse_uring_cmd_req.qid at +16.
        assert_eq!(
            u16::from_ne_bytes(bytes[64..66].try_into().unwrap()),
            3,
            "qid"
        );
        assert_eq!(e.iov[0].iov_len, 288);
    }
}
