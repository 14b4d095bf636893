//! TLS key logs in the NSS key log format (`--keylog FILE`, or the
//! `SSLKEYLOGFILE` environment variable as curl honours it), which
//! Wireshark/tshark read to decrypt a capture.
//!
//! rustls's own `KeyLogFile` reads only `SSLKEYLOGFILE` and buffers; this
//! one takes an explicit path, creates the file mode 0600 (it holds the
//! connections' secrets) and appends. Lines are gathered in memory and
//! written, whole lines in one `write`, every [`FLUSH_EVERY`] by a
//! background thread, at once when [`MAX_PENDING`] bytes wait, when the
//! log is dropped, and by [`flush_all`] (the binary calls it as it
//! exits): a handshake costs no system call, which keeps the key log's
//! cost to `load` within 2 % per handshake (BENCHMARKS.md; a `write` per
//! line cost 6 %). A crash (not an exit) loses at most the last
//! [`FLUSH_EVERY`] of lines.
//! rustls calls it for TCP and QUIC alike (QUIC's handshake and traffic
//! secrets are the TLS 1.3 ones: `CLIENT_HANDSHAKE_TRAFFIC_SECRET`,
//! `SERVER_HANDSHAKE_TRAFFIC_SECRET`, `CLIENT_TRAFFIC_SECRET_0`,
//! `SERVER_TRAFFIC_SECRET_0`, and `CLIENT_EARLY_TRAFFIC_SECRET` for 0-RTT).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::{Error, Result};

/// The environment variable curl, Firefox and Chrome read for a key log.
pub const ENV: &str = "SSLKEYLOGFILE";

/// Where the key log goes: `flag` if given, else `SSLKEYLOGFILE` if set
/// and not empty, else nowhere.
pub fn path_from(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// How long a logged line may wait in memory before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// Bytes of lines that may wait; past this a line is written at once.
pub const MAX_PENDING: usize = 64 * 1024;

/// Every key log opened, for [`flush_all`].
static OPEN: Mutex<Vec<Weak<KeyLogFile>>> = Mutex::new(Vec::new());

/// Writes the lines every open key log holds: call it before the process
/// exits.
pub fn flush_all() {
    let logs: Vec<_> = OPEN.lock().iter().filter_map(Weak::upgrade).collect();
    for log in logs {
        log.flush();
    }
}

/// A key log appending NSS key log lines to a file.
#[derive(Debug)]
pub struct KeyLogFile {
    path: PathBuf,
    /// The file, and the lines not written yet.
    file: Mutex<(File, String)>,
}

impl KeyLogFile {
    /// Opens `path` for appending, creating it with mode 0600.
    pub fn open(path: &Path) -> Result<Arc<KeyLogFile>> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::File {
                path: path.display().to_string(),
                problem: format!(
                    "cannot open the key log for appending: {e}; give a writable path to --keylog \
                     (or SSLKEYLOGFILE)"
                ),
            })?;
        let log = Arc::new(KeyLogFile {
            path: path.to_path_buf(),
            file: Mutex::new((file, String::new())),
        });
        let weak: Weak<KeyLogFile> = Arc::downgrade(&log);
        {
            let mut open = OPEN.lock();
            open.retain(|w| w.strong_count() > 0);
            open.push(weak.clone());
        }
        // Writes what waits every FLUSH_EVERY, and stops with the log.
        let _ = std::thread::Builder::new()
            .name("tlslab-keylog".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(FLUSH_EVERY);
                    let Some(log) = weak.upgrade() else { return };
                    log.flush();
                }
            });
        Ok(log)
    }

    /// Writes the lines gathered so far (one `write`).
    pub fn flush(&self) {
        let mut g = self.file.lock();
        let (file, pending) = &mut *g;
        if pending.is_empty() {
            return;
        }
        // One write of whole lines on an O_APPEND file: lines of
        // concurrent connections (and processes) do not interleave.
        if let Err(e) = file.write_all(pending.as_bytes()) {
            tracing::warn!("key log {}: {e}", self.path.display());
        }
        pending.clear();
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for KeyLogFile {
    fn drop(&mut self) {
        self.flush();
    }
}

/// One NSS key log line: `LABEL <client random hex> <secret hex>\n`.
pub fn line(label: &str, client_random: &[u8], secret: &[u8]) -> String {
    let mut s = String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
    push_line(&mut s, label, client_random, secret);
    s
}

/// Appends [`line()`] to `s`.
fn push_line(s: &mut String, label: &str, client_random: &[u8], secret: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hex = |s: &mut String, bytes: &[u8]| {
        for b in bytes {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 0xf)] as char);
        }
    };
    s.push_str(label);
    s.push(' ');
    hex(s, client_random);
    s.push(' ');
    hex(s, secret);
    s.push('\n');
}

impl rustls::KeyLog for KeyLogFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let full = {
            let mut g = self.file.lock();
            push_line(&mut g.1, label, client_random, secret);
            g.1.len() >= MAX_PENDING
        };
        if full {
            self.flush();
        }
    }

    fn will_log(&self, _label: &str) -> bool {
        true
    }
}

/// Opens the key log at `path` as rustls takes it; `None` gives rustls's
/// no-op log.
pub fn open(path: Option<&Path>) -> Result<Arc<dyn rustls::KeyLog>> {
    Ok(match path {
        Some(p) => KeyLogFile::open(p)? as Arc<dyn rustls::KeyLog>,
        None => Arc::new(rustls::NoKeyLog),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use rustls::KeyLog;

    use super::*;

    #[test]
    fn key_log_lines_are_nss_format_appended_to_a_0600_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.log");
        std::fs::write(&p, "# kept\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let log = KeyLogFile::open(&p).unwrap();
        log.log("CLIENT_RANDOM", &[0xab; 32], &[0x01, 0xff]);
        flush_all();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            text,
            format!("# kept\nCLIENT_RANDOM {} 01ff\n", "ab".repeat(32))
        );
        let q = dir.path().join("new.log");
        let _ = KeyLogFile::open(&q).unwrap();
        let mode = std::fs::metadata(&q).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a new key log must be private");
    }

    #[test]
    fn lines_wait_at_most_flush_every_or_max_pending() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.log");
        let log = KeyLogFile::open(&p).unwrap();
        let read = || std::fs::read_to_string(&p).unwrap();
        log.log("CLIENT_HANDSHAKE_TRAFFIC_SECRET", &[5; 32], &[6]);
        std::thread::sleep(FLUSH_EVERY * 3);
        assert_eq!(
            read(),
            format!("CLIENT_HANDSHAKE_TRAFFIC_SECRET {} 06\n", "05".repeat(32))
        );
        // Past MAX_PENDING bytes: written at once.
        let n = MAX_PENDING / 100 + 1;
        for _ in 0..n {
            log.log("EXPORTER_SECRET", &[1; 32], &[2; 48]);
        }
        assert!(read().lines().count() > 1, "nothing written at MAX_PENDING");
        // The last reference's drop writes the rest (the background thread,
        // or another test's flush_all, may hold one for a moment).
        drop(log);
        let t = std::time::Instant::now();
        while read().lines().count() < n + 1 && t.elapsed() < FLUSH_EVERY * 5 {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(read().lines().count(), n + 1, "the drop writes the rest");
    }

    #[test]
    fn an_unwritable_key_log_path_is_an_error_naming_the_flag() {
        let e = KeyLogFile::open(Path::new("/nonexistent-dir/keys.log")).unwrap_err();
        assert!(e.to_string().contains("--keylog"), "{e}");
    }
}
