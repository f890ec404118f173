//! What every transport worker shares: serving one raw request under a
//! panic guard (decode included), and the supervision of the worker
//! threads, so that a worker that dies is noticed at once.
//!
//! A panic while decoding or serving one request is caught and answered
//! `EIO` ([`serve_raw`]); the worker goes on. A worker that ends anyway
//! (an I/O error on its fd or ring, or a panic outside the request guard)
//! reports on the [`Workers`] channel, and [`Workers::wait`] returns that
//! error at once, without waiting for the others: the session ends, the
//! daemon detaches the mount and exits non-zero. A session is never left
//! half-served (one CPU's io_uring queue, or one of N `/dev/fuse` workers,
//! gone while the rest answer).
//!
//! # Locking rules
//!
//! None: the channel (`std::sync::mpsc`) is the only shared state; each
//! worker owns its sender.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

use crate::dispatch::{dispatch, Reply, Session};
use crate::handler::Handler;
use crate::proto::{InHeader, FUSE_BATCH_FORGET, FUSE_FORGET, FUSE_LOOKUP};
use crate::wire::{self, Op, ReplyBuf};

/// Environment variable naming a file name whose LOOKUP makes the worker
/// thread serving it panic *outside* the request guard: a stand-in for a
/// transport failure, to test that a dead worker ends the session loudly.
/// Read only by `lanefs mount` (`HandlerConfig::with_env_faults`).
pub const FAULT_WORKER_PANIC_NAME_ENV: &str = "LANEFS_FAULT_WORKER_PANIC_NAME";

/// Decode and serve one request (`op_arg`: the ring entry's separate
/// argument, `None` on `/dev/fuse`), leaving the reply payload in `out`.
/// A malformed request is answered `EINVAL` (a malformed FORGET or
/// BATCH_FORGET is dropped: they take no reply); a panic anywhere in
/// decoding or serving is logged and answered `EIO`.
pub fn serve_raw(
    handler: &Handler,
    s: &Session,
    h: &InHeader,
    op_arg: Option<&[u8]>,
    body: &[u8],
    out: &mut ReplyBuf,
) -> Reply {
    let op = match catch_unwind(AssertUnwindSafe(|| wire::decode(h, op_arg, body))) {
        Ok(Ok(op)) => op,
        Ok(Err(_)) => {
            out.clear();
            if takes_no_reply(h.opcode) {
                tracing::error!(
                    opcode = h.opcode,
                    "malformed request; dropped (takes no reply)"
                );
                return Reply::None;
            }
            tracing::error!(opcode = h.opcode, "malformed request; answered EINVAL");
            return Reply::Send(-libc::EINVAL);
        }
        Err(_) => {
            out.clear();
            if takes_no_reply(h.opcode) {
                tracing::error!(opcode = h.opcode, "request decoding panicked; dropped");
                return Reply::None;
            }
            tracing::error!(opcode = h.opcode, "request decoding panicked; answered EIO");
            return Reply::Send(-libc::EIO);
        }
    };
    if let (Some(bad), Op::Lookup { name }) = (&handler.config().fault_worker_panic_name, &op) {
        if h.opcode == FUSE_LOOKUP && bad.as_slice() == *name {
            // Deliberately outside every guard: this kills the worker.
            panic!(
                "fault injection: worker dies on lookup of {:?}",
                String::from_utf8_lossy(name)
            );
        }
    }
    dispatch(handler, s, h, op, out)
}

/// FORGET and BATCH_FORGET take no reply, even when malformed: the
/// kernel does not wait for one (a reply to their `unique` is an error
/// the kernel reports back on the write; until the request fuzz test a
/// short FORGET was answered `EINVAL`).
fn takes_no_reply(opcode: u32) -> bool {
    matches!(opcode, FUSE_FORGET | FUSE_BATCH_FORGET)
}

/// How one worker ended.
type Exit = (String, io::Result<()>);

/// The worker threads of one session.
pub struct Workers {
    tx: mpsc::Sender<Exit>,
    rx: mpsc::Receiver<Exit>,
    started: usize,
}

impl Default for Workers {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel();
        Workers { tx, rx, started: 0 }
    }
}

impl Workers {
    /// Start a worker thread named `name` running `f`; its end (return
    /// value, or a panic) is reported to [`Workers::wait`].
    pub fn spawn(
        &mut self,
        name: String,
        f: impl FnOnce() -> io::Result<()> + Send + 'static,
    ) -> io::Result<()> {
        let tx = self.tx.clone();
        let shown = name.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            let r = match catch_unwind(AssertUnwindSafe(f)) {
                Ok(r) => r,
                Err(_) => Err(io::Error::other(format!("FUSE worker {shown} panicked"))),
            };
            let _ = tx.send((shown, r));
        })?;
        self.started += 1;
        Ok(())
    }

    /// Wait until every worker has ended cleanly (the session's end:
    /// unmount), or until the first one fails: that error is logged and
    /// returned at once, while the others may still be running (the
    /// caller tears the session down).
    pub fn wait(self) -> io::Result<()> {
        let Workers { tx, rx, started } = self;
        drop(tx);
        for _ in 0..started {
            match rx.recv() {
                Ok((_, Ok(()))) => {}
                Ok((name, Err(e))) => {
                    tracing::error!(worker = %name, error = %e, "FUSE worker died; ending the session");
                    return Err(io::Error::other(format!("worker {name}: {e}")));
                }
                Err(_) => break,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_worker_is_reported_before_the_others_end() {
        let mut w = Workers::default();
        let (hold_tx, hold_rx) = mpsc::channel::<()>();
        // One worker that would serve forever (until the test ends).
        w.spawn("slow".into(), move || {
            let _ = hold_rx.recv();
            Ok(())
        })
        .unwrap();
        w.spawn("dies".into(), || panic!("boom")).unwrap();
        let err = w.wait().unwrap_err();
        assert!(err.to_string().contains("dies"), "{err}");
        drop(hold_tx);
    }

    #[test]
    fn clean_ends_are_ok() {
        let mut w = Workers::default();
        for i in 0..3 {
            w.spawn(format!("w{i}"), || Ok(())).unwrap();
        }
        assert!(w.wait().is_ok());
        let mut w = Workers::default();
        w.spawn("io".into(), || Err(io::Error::other("ring failed")))
            .unwrap();
        assert!(w.wait().unwrap_err().to_string().contains("ring failed"));
    }
}
