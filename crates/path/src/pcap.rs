//! `pcap=FILE` (`tlslab path --pcap FILE`): every packet the forwarder
//! forwards or drops, in both directions, in a pcapng file.
//!
//! The file has two interfaces, `up` (id 0, client → server) and `down`
//! (id 1), both LINKTYPE_RAW (101: the TUN devices carry bare IP packets,
//! so tshark decodes IPv4 directly) with nanosecond timestamps taken by the
//! forwarder: at the release for a forwarded packet, at the arrival for a
//! dropped one. A dropped packet carries a comment (`tlslab-path dropped:
//! loss`, `… queue full`, `… TUN write refused`).
//!
//! The forwarder never waits on the disk: it hands each packet (the buffer
//! it already owns) to a writer thread over a bounded queue and counts what
//! did not fit as missed. The writer writes through a 1 MiB buffer and, at
//! `pcap-size`, moves to the next of `pcap-files` ring files (`FILE`,
//! `FILE.1`, …, then `FILE` again, as tcpdump's `-C`/`-W`); with one file
//! it stops capturing at the cap. Its CPU is in the report
//! ([`PcapReport`]).

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use serde::Serialize;
use tlslab_runtime::thread_cpu_time;

use crate::error::Error;
use crate::model::DropCause;
use crate::spec::PcapConfig;

/// The comment on a dropped packet's record starts with this.
pub const DROP_COMMENT: &str = "tlslab-path dropped";
/// Records waiting for the writer at most; beyond, the forwarder counts
/// the packet as missed rather than wait.
const QUEUE: usize = 16_384;
/// The writer's buffer.
const BUFFER: usize = 1 << 20;

/// What the capture wrote.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PcapReport {
    /// The files that hold the capture, oldest first.
    pub files: Vec<String>,
    /// Packets handed to the writer (forwarded and dropped, both
    /// directions).
    pub packets: u64,
    /// Their IP bytes.
    pub bytes: u64,
    /// Of them, dropped packets (their records carry a comment).
    pub dropped_marked: u64,
    /// Of them, the ones not in the files: overwritten in the ring, or left
    /// out once a single file reached its cap (or after a write error).
    pub not_kept: u64,
    /// Packets the forwarder could not hand to the writer (its queue was
    /// full; the forwarder does not wait): a complete capture has 0.
    pub missed: u64,
    /// Bytes in the files.
    pub file_bytes: u64,
    /// The writer thread's CPU time (ms).
    pub writer_cpu_ms: f64,
    /// Its CPU per packet record (ns).
    pub writer_cpu_per_packet_ns: f64,
    /// A write error that ended the capture early, if any.
    pub error: Option<String>,
}

impl std::fmt::Display for PcapReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pcap: {} packets ({} bytes, {} of them drops) in {}; writer CPU {:.1} ms \
             ({:.0} ns per packet)",
            self.packets,
            self.bytes,
            self.dropped_marked,
            self.files.join(", "),
            self.writer_cpu_ms,
            self.writer_cpu_per_packet_ns
        )?;
        if self.not_kept > 0 {
            write!(
                f,
                "\n  WARNING: {} packets are not in the capture (the ring overwrote them or the \
                 file reached pcap-size); raise --pcap-size or --pcap-files",
                self.not_kept
            )?;
        }
        if self.missed > 0 {
            write!(
                f,
                "\n  WARNING: {} packets were missed: the writer fell behind the forwarder",
                self.missed
            )?;
        }
        if let Some(e) = &self.error {
            write!(f, "\n  WARNING: the capture stopped early: {e}")?;
        }
        Ok(())
    }
}

/// Why a record is in the capture.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mark {
    Forwarded,
    Dropped(DropCause),
    WriteRefused,
}

impl Mark {
    fn comment(self) -> Option<&'static str> {
        match self {
            Mark::Forwarded => None,
            Mark::Dropped(DropCause::Loss) => Some("tlslab-path dropped: loss"),
            Mark::Dropped(DropCause::Queue) => Some("tlslab-path dropped: queue full"),
            Mark::WriteRefused => Some("tlslab-path dropped: TUN write refused"),
        }
    }
}

struct Record {
    ns: u64,
    iface: u32,
    mark: Mark,
    data: Vec<u8>,
}

/// One direction's hand-off to the writer (held by its forwarder).
pub(crate) struct Tap {
    tx: SyncSender<Record>,
    iface: u32,
    missed: Arc<AtomicU64>,
}

impl Tap {
    /// Hands a packet to the writer, stamped `ns` after the path's epoch;
    /// never waits.
    pub(crate) fn put(&self, ns: u64, mark: Mark, data: Vec<u8>) {
        let r = Record {
            ns,
            iface: self.iface,
            mark,
            data,
        };
        match self.tx.try_send(r) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.missed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The writer thread.
pub(crate) struct Writer {
    handle: Option<JoinHandle<PcapReport>>,
    missed: Arc<AtomicU64>,
}

impl Writer {
    /// Creates the first file (so a bad name fails before the path is
    /// built) and starts the writer; returns it and the two taps (up,
    /// down). `epoch` is the wall-clock time of the path's epoch.
    pub(crate) fn start(cfg: &PcapConfig, epoch: SystemTime) -> Result<(Writer, [Tap; 2]), Error> {
        let first = cfg.ring_file(0).expect("a capture file");
        let file = create(&first)?;
        let (tx, rx) = sync_channel(QUEUE);
        let missed = Arc::new(AtomicU64::new(0));
        let base = epoch
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_nanos() as u64;
        let cfg = cfg.clone();
        let handle = std::thread::Builder::new()
            .name("tlslab-path-pcap".into())
            .spawn(move || write_all(&cfg, file, rx, base))
            .map_err(Error::os("pcap writer thread", ""))?;
        let tap = |iface| Tap {
            tx: tx.clone(),
            iface,
            missed: missed.clone(),
        };
        let taps = [tap(0), tap(1)];
        Ok((
            Writer {
                handle: Some(handle),
                missed,
            },
            taps,
        ))
    }

    /// Waits for the writer to drain (after the taps are dropped) and
    /// reports.
    pub(crate) fn finish(mut self) -> Option<PcapReport> {
        self.join()
    }

    fn join(&mut self) -> Option<PcapReport> {
        let mut r = self.handle.take()?.join().ok()?;
        r.missed = self.missed.load(Ordering::Relaxed);
        Some(r)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

fn create(path: &Path) -> Result<File, Error> {
    File::create(path).map_err(Error::os(
        format!("cannot create the capture file {}", path.display()),
        " (does its directory exist, and may it be written?)",
    ))
}

type Out = PcapNgWriter<BufWriter<File>>;

/// Starts a pcapng section with the two interfaces.
fn open(file: File) -> std::io::Result<(Out, u64)> {
    let mut w = PcapNgWriter::new(BufWriter::with_capacity(BUFFER, file)).map_err(io)?;
    let mut n = 28; // The section header PcapNgWriter::new wrote.
    for (name, desc) in [
        ("up", "tlslab path: client -> server"),
        ("down", "tlslab path: server -> client"),
    ] {
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::RAW,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
                InterfaceDescriptionOption::IfDescription(Cow::Borrowed(desc)),
                // Nanoseconds (10^-9), as pcap-file writes them.
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        n += w.write_pcapng_block(idb).map_err(io)? as u64;
    }
    Ok((w, n))
}

fn io(e: pcap_file::PcapError) -> std::io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        e => std::io::Error::other(e.to_string()),
    }
}

/// The most bytes a record of `len` packet bytes takes: the block's 32,
/// the padded data, and a padded comment option with its end marker.
fn bound(len: usize) -> u64 {
    32 + len as u64 + 3 + 4 + 64 + 4
}

/// The file being written: the writer, its bytes so far and its records.
struct Current {
    w: Out,
    bytes: u64,
    records: u64,
}

fn write_all(cfg: &PcapConfig, file: File, rx: Receiver<Record>, base: u64) -> PcapReport {
    let cpu0 = thread_cpu_time();
    let mut report = PcapReport::default();
    // The files closed so far: (file, records, bytes), oldest first.
    let mut ring: Vec<(PathBuf, u64, u64)> = Vec::new();
    let mut index = 0u32;
    let fail = |report: &mut PcapReport, i: u32, e: std::io::Error| {
        report.error = Some(format!("{}: {e}", display(cfg, i)));
    };
    let mut out = match open(file) {
        Ok((w, bytes)) => Some(Current {
            w,
            bytes,
            records: 0,
        }),
        Err(e) => {
            fail(&mut report, 0, e);
            None
        }
    };
    while let Ok(r) = rx.recv() {
        let len = r.data.len();
        let comment = r.mark.comment();
        report.packets += 1;
        report.bytes += len as u64;
        report.dropped_marked += u64::from(comment.is_some());
        if out
            .as_ref()
            .is_some_and(|c| c.bytes + bound(len) > cfg.size)
        {
            // Full: close it, then the next ring file or the end.
            let mut c = out.take().expect("checked");
            if let Err(e) = c.w.get_mut().flush() {
                fail(&mut report, index, e);
            }
            ring.push((cfg.ring_file(index).expect("a file"), c.records, c.bytes));
            if cfg.files > 1 && report.error.is_none() {
                index = (index + 1) % cfg.files;
                let next = cfg.ring_file(index).expect("a file");
                // Reusing a ring file: the records in it are gone.
                if let Some(i) = ring.iter().position(|(f, _, _)| *f == next) {
                    report.not_kept += ring.remove(i).1;
                }
                match File::create(&next).and_then(open) {
                    Ok((w, bytes)) => {
                        out = Some(Current {
                            w,
                            bytes,
                            records: 0,
                        })
                    }
                    Err(e) => fail(&mut report, index, e),
                }
            }
        }
        let Some(c) = out.as_mut() else {
            report.not_kept += 1;
            continue;
        };
        let epb = EnhancedPacketBlock {
            interface_id: r.iface,
            timestamp: Duration::from_nanos(base.saturating_add(r.ns)),
            original_len: len as u32,
            data: Cow::Owned(r.data),
            options: comment
                .map(|t| vec![EnhancedPacketOption::Comment(Cow::Borrowed(t))])
                .unwrap_or_default(),
        };
        match c.w.write_pcapng_block(epb) {
            Ok(k) => {
                c.bytes += k as u64;
                c.records += 1;
            }
            Err(e) => {
                fail(&mut report, index, io(e));
                report.not_kept += 1;
                out = None;
            }
        }
    }
    if let Some(mut c) = out.take() {
        if let Err(e) = c.w.get_mut().flush() {
            fail(&mut report, index, e);
        }
        ring.push((cfg.ring_file(index).expect("a file"), c.records, c.bytes));
    }
    report.files = ring
        .iter()
        .map(|(f, _, _)| f.display().to_string())
        .collect();
    report.file_bytes = ring.iter().map(|(_, _, b)| b).sum();
    let cpu = thread_cpu_time().saturating_sub(cpu0);
    report.writer_cpu_ms = cpu.as_secs_f64() * 1e3;
    report.writer_cpu_per_packet_ns = if report.packets > 0 {
        cpu.as_nanos() as f64 / report.packets as f64
    } else {
        0.0
    };
    report
}

fn display(cfg: &PcapConfig, i: u32) -> String {
    cfg.ring_file(i)
        .map(|f| f.display().to_string())
        .unwrap_or_default()
}
