//! `--log FILE`: one CSV row per request, written by a thread of its own.
//!
//! Clients hand records to a [`CsvSink`], which queues them on a bounded
//! channel. When the writer falls behind, the queue fills and `record`
//! blocks: the load slows down rather than a row being dropped.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use serde::Serialize;

use crate::record::RequestRecord;

/// The columns of the request log, in order: the 24 of layout 1, then the
/// handshake's wire figures ([`WIRE_COLUMNS`]), so that a merge of agents
/// keeps them.
pub const CSV_COLUMNS: [&str; 33] = [
    "t_start_us",
    "client",
    "conn",
    "req_on_conn",
    "target",
    "status",
    "error",
    "connect_us",
    "handshake_us",
    "kind",
    "offered",
    "version",
    "suite",
    "group",
    "hs_bytes_out",
    "hs_bytes_in",
    "round_trips",
    "ttfb_us",
    "transfer_us",
    "total_us",
    "body_bytes",
    "hrr",
    "early_data",
    "retry",
    "hs_records_out",
    "hs_records_in",
    "cert_bytes",
    "cert_compressed_bytes",
    "cert_compression",
    "tcp_data_segs_in",
    "tcp_data_segs_out",
    "tcp_rcv_mss",
    "tcp_total_retrans",
];

/// The columns a log of layout 1 lacks: empty where the handshake's wire
/// figures were not measured (or on rows without a handshake).
pub const WIRE_COLUMNS: usize = 9;

/// Records queued between the clients and the writer thread.
const QUEUE: usize = 16 * 1024;

/// One row, borrowing from the record. Field order is [`CSV_COLUMNS`].
#[derive(Serialize)]
struct Row<'a> {
    t_start_us: u64,
    client: u32,
    conn: u64,
    req_on_conn: u32,
    target: &'a str,
    status: Option<u16>,
    error: &'a str,
    connect_us: Option<u64>,
    handshake_us: Option<u64>,
    kind: &'a str,
    offered: u8,
    version: &'a str,
    suite: &'a str,
    group: &'a str,
    hs_bytes_out: Option<u64>,
    hs_bytes_in: Option<u64>,
    round_trips: Option<u32>,
    ttfb_us: Option<u64>,
    transfer_us: Option<u64>,
    total_us: u64,
    body_bytes: u64,
    hrr: u8,
    early_data: &'a str,
    retry: u8,
    hs_records_out: Option<u32>,
    hs_records_in: Option<u32>,
    cert_bytes: Option<u32>,
    cert_compressed_bytes: Option<u32>,
    cert_compression: &'a str,
    tcp_data_segs_in: Option<u32>,
    tcp_data_segs_out: Option<u32>,
    tcp_rcv_mss: Option<u32>,
    tcp_total_retrans: Option<u32>,
}

impl<'a> Row<'a> {
    fn new(r: &'a RequestRecord, targets: &'a [String]) -> Self {
        let h = r.handshake.as_ref();
        let w = h.and_then(|h| h.wire.as_ref());
        let tcp = w.and_then(|w| w.tcp.as_ref());
        Row {
            t_start_us: r.t_start_us,
            client: r.client,
            conn: r.conn,
            req_on_conn: r.req_on_conn,
            target: targets.get(r.target as usize).map_or("?", String::as_str),
            status: r.status,
            error: r.error.as_deref().unwrap_or(""),
            connect_us: r.connect_us,
            handshake_us: h.map(|h| h.duration_us),
            kind: h.map_or("none", |h| h.kind.name()),
            offered: h.map_or(0, |h| u8::from(h.offered)),
            version: h.map_or("", |h| &h.version),
            suite: h.map_or("", |h| &h.suite),
            group: h.map_or("", |h| &h.group),
            hs_bytes_out: h.map(|h| h.bytes_out),
            hs_bytes_in: h.map(|h| h.bytes_in),
            round_trips: h.map(|h| h.round_trips),
            ttfb_us: r.ttfb_us,
            transfer_us: r.transfer_us,
            total_us: r.total_us,
            body_bytes: r.body_bytes,
            hrr: h.map_or(0, |h| u8::from(h.hrr)),
            early_data: h.map_or("", |h| h.early_data.name()),
            retry: u8::from(r.retry),
            hs_records_out: w.map(|w| w.records_out),
            hs_records_in: w.map(|w| w.records_in),
            cert_bytes: w.and_then(|w| w.cert_bytes),
            cert_compressed_bytes: w.and_then(|w| w.cert_compressed_bytes),
            cert_compression: w.and_then(|w| w.cert_compression.as_deref()).unwrap_or(""),
            tcp_data_segs_in: tcp.map(|t| t.data_segs_in),
            tcp_data_segs_out: tcp.map(|t| t.data_segs_out),
            tcp_rcv_mss: tcp.map(|t| t.rcv_mss),
            tcp_total_retrans: tcp.map(|t| t.total_retrans),
        }
    }
}

/// The sending half of a request log: cheap to clone, one per client task.
#[derive(Clone, Debug)]
pub struct CsvSink {
    tx: SyncSender<RequestRecord>,
}

impl CsvSink {
    /// Queues one row, blocking while the queue is full. Returns false if
    /// and only if the writer has stopped (after a write error, which
    /// [`CsvLog::finish`] reports).
    pub fn record(&self, r: RequestRecord) -> bool {
        self.tx.send(r).is_ok()
    }
}

/// The writing half of a request log, owning the writer thread.
#[derive(Debug)]
pub struct CsvLog {
    path: PathBuf,
    handle: JoinHandle<std::io::Result<u64>>,
}

impl CsvLog {
    /// Creates (truncates) `path`, writes the header, and starts the writer
    /// thread. `targets` are the URLs that [`RequestRecord::target`] indexes.
    pub fn create(path: &Path, targets: Vec<String>) -> Result<(CsvLog, CsvSink)> {
        let err = |source| Error::Log {
            path: path.display().to_string(),
            source,
        };
        let file = File::create(path).map_err(err)?;
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(BufWriter::with_capacity(256 * 1024, file));
        w.write_record(CSV_COLUMNS)
            .and_then(|()| w.flush().map_err(csv::Error::from))
            .map_err(|e| err(csv_io(e)))?;
        let (tx, rx) = sync_channel(QUEUE);
        let handle = std::thread::Builder::new()
            .name("tlslab-csv-log".into())
            .spawn(move || write_rows(w, rx, targets))
            .map_err(err)?;
        Ok((
            CsvLog {
                path: path.to_path_buf(),
                handle,
            },
            CsvSink { tx },
        ))
    }

    /// Waits until every [`CsvSink`] is dropped and all queued rows are
    /// written and flushed. Returns the number of rows written.
    pub fn finish(self) -> Result<u64> {
        let path = self.path.display().to_string();
        match self.handle.join() {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(source)) => Err(Error::Log { path, source }),
            Err(_) => Err(Error::LogWriterLost { path }),
        }
    }
}

fn csv_io(e: csv::Error) -> std::io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("{other:?}")),
    }
}

fn write_rows(
    mut w: csv::Writer<BufWriter<File>>,
    rx: Receiver<RequestRecord>,
    targets: Vec<String>,
) -> std::io::Result<u64> {
    let mut rows = 0u64;
    // Ends when every sender is gone.
    for r in rx {
        w.serialize(Row::new(&r, &targets)).map_err(csv_io)?;
        rows += 1;
    }
    w.flush()?;
    let inner = w
        .into_inner()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    inner.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(rows)
}

/// Errors from report sinks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CSV log file could not be created or written.
    #[error(
        "request log {path}: {source}; check that the directory exists, is writable and has space"
    )]
    Log {
        /// The log file.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The CSV writer thread stopped abnormally.
    #[error("request log {path}: the writer thread stopped unexpectedly; the log is incomplete")]
    LogWriterLost {
        /// The log file.
        path: String,
    },
    /// The HdrHistogram interval log (`--hdr-log`) could not be written.
    #[error(
        "HdrHistogram log {path}: {problem}; check that the directory exists, is writable and has space"
    )]
    HdrLog {
        /// The log file.
        path: String,
        /// What failed.
        problem: String,
    },
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::record;
    use crate::record::HandshakeKind;

    #[test]
    fn one_row_per_record_with_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let (log, sink) = CsvLog::create(&path, vec!["https://h:1/a,b \"q\"".into()]).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        let kind = (i % 3 == 0).then_some(HandshakeKind::Resumed);
                        assert!(sink.record(record(t, i, kind)));
                    }
                })
            })
            .collect();
        drop(sink);
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(log.finish().unwrap(), 20_000);

        let mut rd = csv::Reader::from_path(&path).unwrap();
        let header: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header, CSV_COLUMNS);
        let rows: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 20_000);
        let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        for r in &rows {
            assert_eq!(r.len(), CSV_COLUMNS.len());
            assert_eq!(&r[col("target")], "https://h:1/a,b \"q\"");
        }
        let resumed = rows.iter().filter(|r| &r[col("kind")] == "resumed").count();
        let none = rows.iter().filter(|r| &r[col("kind")] == "none").count();
        assert_eq!(resumed + none, 20_000);
        assert_eq!(resumed, 4 * 1667);
        let r0 = rows.iter().find(|r| &r[col("kind")] == "resumed").unwrap();
        assert_eq!(&r0[col("offered")], "1");
        assert_eq!(&r0[col("version")], "TLSv1.3");
        assert_eq!(&r0[col("round_trips")], "1");
        let plain = rows.iter().find(|r| &r[col("kind")] == "none").unwrap();
        assert_eq!(&plain[col("handshake_us")], "");
    }

    #[test]
    fn empty_log_has_header_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let (log, sink) = CsvLog::create(&path, vec![]).unwrap();
        drop(sink);
        assert_eq!(log.finish().unwrap(), 0);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim_end(), CSV_COLUMNS.join(","));
    }

    #[test]
    fn unwritable_path_names_file_and_fix() {
        let err = CsvLog::create(Path::new("/nonexistent-dir/x.csv"), vec![]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent-dir/x.csv"), "{msg}");
        assert!(msg.contains("directory exists"), "{msg}");
    }
}
