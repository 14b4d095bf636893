//! TLS key logs in the NSS key log format (`--keylog FILE`, or the
//! `SSLKEYLOGFILE` environment variable as curl honours it), which
//! Wireshark/tshark read to decrypt a capture.
//!
//! rustls's own `KeyLogFile` reads only `SSLKEYLOGFILE` and buffers; this
//! one takes an explicit path, creates the file mode 0600 (it holds the
//! connections' secrets), appends, and writes each line with one `write`
//! call on an unbuffered file, so a crash loses no line already logged.
//! rustls calls it for TCP and QUIC alike (QUIC's handshake and traffic
//! secrets are the TLS 1.3 ones: `CLIENT_HANDSHAKE_TRAFFIC_SECRET`,
//! `SERVER_HANDSHAKE_TRAFFIC_SECRET`, `CLIENT_TRAFFIC_SECRET_0`,
//! `SERVER_TRAFFIC_SECRET_0`, and `CLIENT_EARLY_TRAFFIC_SECRET` for 0-RTT).

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A key log appending NSS key log lines to a file.
#[derive(Debug)]
pub struct KeyLogFile {
    path: PathBuf,
    file: Mutex<File>,
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
        Ok(Arc::new(KeyLogFile {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        }))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One NSS key log line: `LABEL <client random hex> <secret hex>\n`.
pub fn line(label: &str, client_random: &[u8], secret: &[u8]) -> String {
    let mut s = String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
    s.push_str(label);
    s.push(' ');
    for b in client_random {
        let _ = write!(s, "{b:02x}");
    }
    s.push(' ');
    for b in secret {
        let _ = write!(s, "{b:02x}");
    }
    s.push('\n');
    s
}

impl rustls::KeyLog for KeyLogFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let l = line(label, client_random, secret);
        // One write of the whole line on an O_APPEND file: lines of
        // concurrent connections (and processes) do not interleave.
        if let Err(e) = self.file.lock().write_all(l.as_bytes()) {
            tracing::warn!("key log {}: {e}", self.path.display());
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
        // Written through at once, without a flush or a drop.
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
    fn an_unwritable_key_log_path_is_an_error_naming_the_flag() {
        let e = KeyLogFile::open(Path::new("/nonexistent-dir/keys.log")).unwrap_err();
        assert!(e.to_string().contains("--keylog"), "{e}");
    }
}
