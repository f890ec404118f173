//! Logging of a backgrounded daemon to syslog/journald: each `tracing`
//! event becomes one datagram on the system log socket (`/dev/log`, which
//! journald and every syslog daemon serve), in the local syslog format
//! `<PRI>lanefs[PID]: message`, facility `daemon`, severity from the
//! event's level. `LANEFS_SYSLOG_SOCKET` names another socket (tests).
//! When the socket cannot be reached a line is dropped (a daemon has no
//! other place to say so).
//!
//! Locks: none of its own; the socket is shared (`Arc<UnixDatagram>`, each
//! `send_to` is one atomic datagram). Each event gets its own buffer.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Arc;

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

/// Environment variable naming the socket to log to instead of `/dev/log`.
pub const SYSLOG_SOCKET_ENV: &str = "LANEFS_SYSLOG_SOCKET";
/// The system log socket.
const DEV_LOG: &str = "/dev/log";
/// syslog facility `daemon` (3), shifted as in `<PRI>`.
const FACILITY_DAEMON: u8 = 3 << 3;
/// Longest message sent (the rest is cut; journald takes far more, but
/// classic syslog daemons cut at a few KiB anyway).
const MESSAGE_BYTES_MAX: usize = 8192;

/// Where events go: the socket and its path.
#[derive(Clone)]
pub struct Syslog {
    sock: Arc<UnixDatagram>,
    path: PathBuf,
}

impl Syslog {
    /// The socket from `LANEFS_SYSLOG_SOCKET`, else `/dev/log`.
    pub fn from_env() -> io::Result<Syslog> {
        let path = std::env::var_os(SYSLOG_SOCKET_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEV_LOG));
        Ok(Syslog {
            sock: Arc::new(UnixDatagram::unbound()?),
            path,
        })
    }
}

/// syslog severity of a `tracing` level.
fn severity(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// One datagram: `<PRI>lanefs[PID]: text`.
pub fn format_line(level: &Level, pid: u32, text: &[u8]) -> Vec<u8> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let mut v = format!("<{}>lanefs[{pid}]: ", FACILITY_DAEMON | severity(level)).into_bytes();
    v.extend_from_slice(&text[..text.len().min(MESSAGE_BYTES_MAX)]);
    v
}

/// The writer of one event: collects its text, sends it when dropped.
pub struct EventWriter {
    log: Syslog,
    level: Level,
    buf: Vec<u8>,
}

impl io::Write for EventWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = format_line(&self.level, std::process::id(), &self.buf);
        let _ = self.log.sock.send_to(&line, &self.log.path);
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = EventWriter;
    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            log: self.clone(),
            level: Level::INFO,
            buf: Vec::new(),
        }
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> EventWriter {
        EventWriter {
            log: self.clone(),
            level: *meta.level(),
            buf: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_facility_severity_and_pid() {
        assert_eq!(
            format_line(&Level::ERROR, 42, b"boom\n"),
            b"<27>lanefs[42]: boom".to_vec()
        );
        assert_eq!(
            format_line(&Level::INFO, 7, b"x"),
            b"<30>lanefs[7]: x".to_vec()
        );
        assert_eq!(format_line(&Level::DEBUG, 7, b"x")[..4], *b"<31>");
    }

    #[test]
    fn an_event_is_one_datagram() {
        let dir = std::env::temp_dir().join(format!("lanefs-syslog-ut-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        let log = Syslog {
            sock: Arc::new(UnixDatagram::unbound().unwrap()),
            path: path.clone(),
        };
        {
            use std::io::Write;
            let mut w = log.make_writer();
            w.write_all(b"part one, ").unwrap();
            w.write_all(b"part two\n").unwrap();
        }
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(got.ends_with("]: part one, part two"), "{got}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
