//! A directory of per-connection qlog files (`load --h3 --qlog DIR`,
//! `serve --h3 --qlog DIR`), capped by count and by bytes so that a long
//! run cannot fill the disk.
//!
//! quinn-proto's qlog streamer writes JSON-SEQ (RFC 7464, what qvis reads
//! as `.sqlog`): each record is the byte 0x1E, one line of JSON and a
//! newline, written in several `write` calls. A [`QlogFile`] gathers a
//! record and writes it with one `write` on an unbuffered file once its
//! newline arrives, so a file always ends at a whole record, even when the
//! process is killed, and records of the file are never cut in the middle
//! by the byte cap: at the cap a file simply stops (it is counted as
//! truncated), and later connections get no file (counted as skipped).
//!
//! This module knows nothing of QUIC: the engines hand a [`QlogFile`] to
//! quinn's `QlogConfig` as its writer.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What was written, as the reports give it.
pub use tlslab_schema::transport::Qlog;

/// The default of `--qlog-max-files`.
pub const DEFAULT_MAX_FILES: u64 = 100;
/// The default of `--qlog-max-bytes`: 256 MiB across all files.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// The file name extension qvis reads as JSON-SEQ qlog.
pub const EXTENSION: &str = "sqlog";

/// How much a [`QlogDir`] may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QlogLimits {
    /// At most this many files (connections); later connections are
    /// skipped (`--qlog-max-files`).
    pub max_files: u64,
    /// At most this many bytes across all files (`--qlog-max-bytes`).
    pub max_bytes: u64,
}

impl Default for QlogLimits {
    fn default() -> Self {
        QlogLimits {
            max_files: DEFAULT_MAX_FILES,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// `--qlog DIR` with its caps: where and how much to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QlogOptions {
    /// The directory (created if missing).
    pub dir: PathBuf,
    /// The caps.
    pub limits: QlogLimits,
}

/// What a [`QlogDir`] has written so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QlogCounts {
    /// Files created (one per connection logged).
    pub files: u64,
    /// Connections that got no file: beyond `max_files`, after the byte
    /// cap was reached, or whose file could not be created.
    pub skipped: u64,
    /// Bytes written across all files.
    pub bytes: u64,
    /// Files that stopped early (at a record boundary) at the byte cap.
    pub truncated: u64,
}

#[derive(Debug, Default)]
struct Shared {
    files: AtomicU64,
    skipped: AtomicU64,
    bytes: AtomicU64,
    truncated: AtomicU64,
    /// Whether a file could not be created or written (warned once).
    warned: AtomicBool,
    /// Whether a record did not fit under the byte cap: no new files.
    full: AtomicBool,
}

/// A directory that receives one qlog file per connection.
#[derive(Debug)]
pub struct QlogDir {
    dir: PathBuf,
    role: &'static str,
    limits: QlogLimits,
    shared: Arc<Shared>,
}

impl QlogDir {
    /// The directory `dir` (created if missing) for files named
    /// `<role>-<label>.sqlog`. Fails if `dir` cannot be created or is not
    /// a writable directory, or if a limit is 0.
    pub fn create(dir: &Path, role: &'static str, limits: QlogLimits) -> io::Result<QlogDir> {
        if limits.max_files == 0 || limits.max_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a qlog limit of 0 logs nothing; give --qlog-max-files and --qlog-max-bytes above 0 \
                 (or drop --qlog)",
            ));
        }
        std::fs::create_dir_all(dir)?;
        // Writable? Try now, not at the first connection.
        let probe = dir.join(format!(".{role}-qlog-probe-{}", std::process::id()));
        File::create(&probe)?;
        std::fs::remove_file(&probe)?;
        Ok(QlogDir {
            dir: dir.to_path_buf(),
            role,
            limits,
            shared: Arc::default(),
        })
    }

    /// [`QlogDir::create`] from [`QlogOptions`].
    pub fn open(o: &QlogOptions, role: &'static str) -> io::Result<QlogDir> {
        Self::create(&o.dir, role, o.limits)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limits.
    pub fn limits(&self) -> QlogLimits {
        self.limits
    }

    /// What was written so far, as the reports give it (`load`'s
    /// `transport.qlog`, `serve`'s summary).
    pub fn report(&self) -> Qlog {
        let c = self.counts();
        Qlog {
            dir: self.dir.display().to_string(),
            files: c.files,
            skipped: c.skipped,
            bytes: c.bytes,
            truncated: c.truncated,
            max_files: self.limits.max_files,
            max_bytes: self.limits.max_bytes,
        }
    }

    /// The file for the next connection, `<role>-<label>.sqlog` (an
    /// existing file of that name is replaced), or `None` when `max_files`
    /// are open already, once a file has stopped at the byte cap, or when
    /// the file cannot be created: that connection is counted as skipped.
    pub fn next(&self, label: &str) -> Option<QlogFile> {
        let s = &self.shared;
        let room = !s.full.load(Ordering::Relaxed)
            && s.files
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < self.limits.max_files).then_some(n + 1)
                })
                .is_ok();
        if !room {
            s.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let path = self.dir.join(format!("{}-{label}.{EXTENSION}", self.role));
        match File::create(&path) {
            Ok(file) => Some(QlogFile {
                file,
                path,
                record: Vec::with_capacity(256),
                max_bytes: self.limits.max_bytes,
                shared: self.shared.clone(),
                stopped: false,
            }),
            Err(e) => {
                s.files.fetch_sub(1, Ordering::Relaxed);
                s.skipped.fetch_add(1, Ordering::Relaxed);
                self.warn_once(&path, &e);
                None
            }
        }
    }

    fn warn_once(&self, path: &Path, e: &io::Error) {
        warn_once(&self.shared, path, e);
    }

    /// The counts so far.
    pub fn counts(&self) -> QlogCounts {
        let s = &self.shared;
        QlogCounts {
            files: s.files.load(Ordering::Relaxed),
            skipped: s.skipped.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            truncated: s.truncated.load(Ordering::Relaxed),
        }
    }
}

fn warn_once(s: &Shared, path: &Path, e: &io::Error) {
    if !s.warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "qlog {}: {e}; this connection's qlog is incomplete or missing (later errors are not \
             reported)",
            path.display()
        );
    }
}

/// One connection's qlog file: a writer that writes whole JSON-SEQ records.
#[derive(Debug)]
pub struct QlogFile {
    file: File,
    path: PathBuf,
    /// The record being gathered, up to its newline.
    record: Vec<u8>,
    max_bytes: u64,
    shared: Arc<Shared>,
    /// At the byte cap, or after a write error: nothing more is written.
    stopped: bool,
}

/// The JSON-SEQ record separator (RFC 7464).
const RS: u8 = 0x1E;

impl QlogFile {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the gathered record if the byte cap leaves room for it.
    fn commit(&mut self) {
        let record = std::mem::take(&mut self.record);
        if self.stopped || record.is_empty() {
            self.record = record;
            self.record.clear();
            return;
        }
        let len = record.len() as u64;
        let s = &self.shared;
        let fits = s
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b + len <= self.max_bytes).then_some(b + len)
            })
            .is_ok();
        if !fits {
            self.stopped = true;
            s.full.store(true, Ordering::Relaxed);
            s.truncated.fetch_add(1, Ordering::Relaxed);
        } else if let Err(e) = self.file.write_all(&record) {
            self.stopped = true;
            warn_once(s, &self.path, &e);
        }
        self.record = record;
        self.record.clear();
    }
}

impl Write for QlogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A separator with a record pending: the pending one never got its
        // newline (the streamer failed half-way); drop it, keep the file valid.
        if buf.first() == Some(&RS) {
            self.record.clear();
        }
        self.record.extend_from_slice(buf);
        // Compact JSON holds no raw newline: one ends the record.
        if buf.last() == Some(&b'\n') && self.record.first() == Some(&RS) {
            self.commit();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(path: &Path) -> Vec<String> {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(bytes.first(), Some(&RS), "a JSON-SEQ file starts with 0x1E");
        bytes
            .split(|b| *b == RS)
            .skip(1)
            .map(|r| String::from_utf8(r.to_vec()).unwrap())
            .collect()
    }

    /// Writes a record the way qlog's streamer does: three writes.
    fn record(f: &mut QlogFile, json: &str) {
        f.write_all(&[RS]).unwrap();
        // serde_json writes in pieces.
        let (a, b) = json.split_at(json.len() / 2);
        f.write_all(a.as_bytes()).unwrap();
        f.write_all(b.as_bytes()).unwrap();
        f.write_all(b"\n").unwrap();
    }

    #[test]
    fn whole_records_reach_the_file_at_once_and_a_half_written_one_is_dropped() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("q");
        let dir = QlogDir::create(&d, "client", QlogLimits::default()).unwrap();
        let mut f = dir.next("0-1").unwrap();
        record(&mut f, r#"{"qlog_version":"0.3"}"#);
        // Already on disk, without a flush or a drop.
        assert_eq!(records(f.path()), vec!["{\"qlog_version\":\"0.3\"}\n"]);
        // A record whose newline never came, then a whole one.
        f.write_all(&[RS]).unwrap();
        f.write_all(b"{\"half\":").unwrap();
        record(&mut f, r#"{"time":1.5}"#);
        assert_eq!(
            records(f.path()),
            vec!["{\"qlog_version\":\"0.3\"}\n", "{\"time\":1.5}\n"]
        );
        assert_eq!(f.path(), d.join("client-0-1.sqlog"));
        let c = dir.counts();
        assert_eq!((c.files, c.skipped, c.truncated), (1, 0, 0));
        assert_eq!(c.bytes, std::fs::metadata(f.path()).unwrap().len());
    }

    #[test]
    fn beyond_max_files_connections_are_skipped_and_counted() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("q");
        let limits = QlogLimits {
            max_files: 2,
            ..QlogLimits::default()
        };
        let dir = QlogDir::create(&d, "server", limits).unwrap();
        let got: Vec<bool> = (1..=5)
            .map(|i| dir.next(&i.to_string()).is_some())
            .collect();
        assert_eq!(got, [true, true, false, false, false]);
        let c = dir.counts();
        assert_eq!((c.files, c.skipped), (2, 3));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
    }

    #[test]
    fn the_byte_cap_stops_a_file_at_a_record_boundary_and_skips_later_connections() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("q");
        let one = format!("{}{}\n", RS as char, r#"{"n":1}"#).len() as u64;
        let limits = QlogLimits {
            max_files: 10,
            max_bytes: 2 * one + 3,
        };
        let dir = QlogDir::create(&d, "client", limits).unwrap();
        let mut f = dir.next("a").unwrap();
        for _ in 0..3 {
            record(&mut f, r#"{"n":1}"#);
        }
        assert_eq!(records(f.path()).len(), 2, "the third record does not fit");
        let c = dir.counts();
        assert_eq!((c.bytes, c.truncated), (2 * one, 1));
        // The cap is reached: later connections get no file.
        assert!(dir.next("b").is_none());
        let c = dir.counts();
        assert_eq!((c.files, c.skipped, c.truncated), (1, 1, 1));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    }

    #[test]
    fn a_zero_limit_or_an_unwritable_dir_is_an_error() {
        let e = QlogDir::create(
            Path::new("/tmp"),
            "client",
            QlogLimits {
                max_files: 0,
                max_bytes: 1,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("--qlog-max-files"), "{e}");
        assert!(
            QlogDir::create(
                Path::new("/proc/version/x"),
                "client",
                QlogLimits::default()
            )
            .is_err()
        );
    }
}
