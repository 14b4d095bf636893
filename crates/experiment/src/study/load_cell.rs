//! The load engine's cells: embedded servers (one per certificate key type,
//! loopback, one worker pinned to the server CPU; with an HTTP/3 listener
//! for QUIC cells) and one `tlslab load` run per cell (`load --h3 -m 1`
//! for QUIC cells), pinned to the client CPU.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tlslab_crypto::pki;
use tlslab_crypto::provider::Algorithms;
use tlslab_load::{Arrivals, LoadConfig, OpenLoop};
use tlslab_report::study::{Cell, CellMetrics, EngineReport, PathCell, PathCells, Verbatim};
use tlslab_server::{Content, Server};

use super::matrix::{CellSpec, Matrix};
use super::rtt_path::{PathKind, RttPath, Stopped, byte_check};
use super::session::{Session, StudyError, flag_duration, now_ms};
use crate::pin::Placement;
use crate::rig::{self, Rig, Transport};

struct Embedded {
    server: Server,
    rig: Rig,
}

/// Embedded servers, started on first use and kept for the whole study
/// (their session caches persist across cells, as a real server's would).
pub struct LoadRig {
    placement: Placement,
    servers: BTreeMap<String, Embedded>,
    /// Cells' packet-path reports not yet in the document, by cell id.
    paths: Vec<(String, PathCell)>,
    /// The capture file of the next packet-path cell (`--pcap DIR`).
    capture: Option<PathBuf>,
    /// What the captures of the cells run since the last call wrote.
    captured: Vec<String>,
}

impl LoadRig {
    /// No server yet.
    pub fn new(placement: Placement) -> LoadRig {
        LoadRig {
            placement,
            servers: BTreeMap::new(),
            paths: Vec::new(),
            capture: None,
            captured: Vec::new(),
        }
    }

    /// The cell's server: QUIC cells get servers of their own, with an
    /// HTTP/3 listener (TCP cells' servers have none, as before).
    fn server(&mut self, spec: &CellSpec) -> Result<&Embedded, StudyError> {
        let name = match spec.transport {
            Transport::Tcp => spec.server_key(),
            Transport::Quic => format!("{}/h3", spec.server_key()),
        };
        if !self.servers.contains_key(&name) {
            let generated = pki::generate_chain(spec.key, spec.intermediate, &[])
                .map_err(crate::Error::from)?;
            let emb = start(generated, self.placement.clone(), spec, None)?;
            self.servers.insert(name.clone(), emb);
        }
        Ok(&self.servers[&name])
    }

    /// Runs one cell and returns it (not yet in the document).
    pub fn run(&mut self, spec: &CellSpec, repeat: u32) -> Result<Cell, StudyError> {
        let id = format!("{}-r{repeat}", spec.point);
        if spec.rtt.is_some() && spec.wan == PathKind::Packet {
            return self.run_packet(spec, repeat, id);
        }
        if spec.rtt.is_some() && spec.transport == Transport::Quic {
            return Err(StudyError::Usage(format!(
                "{id}: a QUIC cell cannot cross tlslab relay (TCP only); run it over the \
                 packet-level path (--path-kind packet, root)"
            )));
        }
        let emb = self.server(spec)?;
        let upstream = spec
            .transport
            .listener(&emb.server)
            .unwrap_or(rig::LOOPBACK);
        // With a round-trip time, through `tlslab relay`.
        let path = match spec.rtt {
            Some(rtt) => Some(RttPath::relay(rtt, upstream, &id)?),
            None => None,
        };
        let url = match &path {
            Some(p) => p.url(upstream.port(), &spec.path),
            None => format!("https://localhost:{}{}", upstream.port(), spec.path),
        };
        let load = cell_load(&emb.rig, spec, repeat, &url)?;
        let started = now_ms();
        let m = rig::measure_over(&emb.server, &load, spec.transport, &id);
        if let Some(p) = path {
            p.stop()?;
        }
        Ok(self.cell(spec, repeat, id, started, &m?))
    }

    /// A cell across the packet-level path: a path of the cell's RTT, a
    /// server in its server namespace (a certificate naming the server's
    /// address there) and the load in its client namespace; the forwarder's
    /// report and its byte check against the load's sockets are kept for
    /// the document's `engine_report.path`.
    fn run_packet(&mut self, spec: &CellSpec, repeat: u32, id: String) -> Result<Cell, StudyError> {
        let path = RttPath::packet(spec.rtt.unwrap_or_default(), self.capture.take())?;
        let h = path.handle();
        let h = h.as_ref();
        let placement = self.placement.clone();
        let emb = rig::on_server(h, move || {
            let sans = rig::server_sans(h);
            let generated = pki::generate_chain(spec.key, spec.intermediate, &sans)?;
            start(generated, placement, spec, h)
        })?;
        let port = spec
            .transport
            .listener(&emb.server)
            .unwrap_or(rig::LOOPBACK)
            .port();
        let url = path.url(port, &spec.path);
        let m = cell_load(&emb.rig, spec, repeat, &url).and_then(|load| {
            let started = now_ms();
            rig::on_client(h, || {
                let m = rig::measure_over(&emb.server, &load, spec.transport, &id)?;
                Ok((started, m, super::rtt_path::timestamps_on()))
            })
            .map_err(StudyError::from)
        });
        emb.server.shutdown();
        let stopped = path.stop();
        let (started, m, timestamps) = m?;
        if let Stopped::Packet(report) = stopped? {
            if let Some(p) = &report.pcap {
                self.captured.push(format!("  {id}: {p}"));
            }
            let hs = &m.report.handshake;
            let bytes = |k: &tlslab_report::HandshakeKindSummary| {
                k.count as f64 * (k.bytes_out_mean.unwrap_or(0.0) + k.bytes_in_mean.unwrap_or(0.0))
            };
            let check = m.report.socket.as_ref().map(|sock| {
                byte_check(
                    &report,
                    sock,
                    timestamps,
                    bytes(&hs.full) + bytes(&hs.resumed),
                )
            });
            self.paths.push((
                id.clone(),
                PathCell {
                    byte_check: check,
                    // Plain counters and floats: serializing cannot fail.
                    packet_path: serde_json::to_value(&report).unwrap_or_default(),
                },
            ));
        }
        Ok(self.cell(spec, repeat, id, started, &m))
    }

    /// The document's cell of a measured run.
    fn cell(
        &self,
        spec: &CellSpec,
        repeat: u32,
        id: String,
        started: u64,
        m: &rig::Measured,
    ) -> Cell {
        let mut metrics = CellMetrics::from_load(&m.report);
        metrics.server_cpu_us_per_request = m.server_cpu_us_per_request;
        metrics.server_busy = m.server_busy;
        metrics.server_sign_us = m.server_sign.map(|(us, _)| us);
        if spec.transport == Transport::Quic {
            // quinn does not say which group was negotiated; `load --h3`
            // offered only the cell's, so every handshake used it.
            metrics.group = spec.group.clone();
        }
        Cell {
            id,
            point: spec.point.clone(),
            factors: spec.factors.clone(),
            repeat,
            order: 0,
            command_line: command_line(spec, &self.placement),
            started_unix_ms: started,
            metrics,
            load: Verbatim::new(m.report.clone()).ok(),
        }
    }

    /// Runs every cell of `m` not yet in the session's document, repeats
    /// interleaved (round 1 over every point, then round 2, …).
    pub fn run_matrix(&mut self, s: &mut Session, m: &Matrix) -> Result<(), StudyError> {
        let points = m.points();
        for why in points.iter().filter_map(CellSpec::excluded) {
            s.note(why);
        }
        self.run_cells(s, &points, m.repeats)
    }

    /// Runs `points` × `repeats` (interleaved), skipping cells the document
    /// already has and points that cannot run.
    pub fn run_cells(
        &mut self,
        s: &mut Session,
        points: &[CellSpec],
        repeats: u32,
    ) -> Result<(), StudyError> {
        for repeat in 1..=repeats {
            for p in points {
                if p.excluded().is_some() || s.has(&format!("{}-r{repeat}", p.point)) {
                    continue;
                }
                self.capture = s.capture(&format!("{}-r{repeat}", p.point));
                let c = self.run(p, repeat)?;
                for line in std::mem::take(&mut self.captured) {
                    s.say(&line);
                }
                s.push(c)?;
                let paths = std::mem::take(&mut self.paths);
                if !paths.is_empty() {
                    let engine = s
                        .doc
                        .engine_report
                        .get_or_insert_with(|| EngineReport::Path(PathCells::default()));
                    if let EngineReport::Path(m) = engine {
                        m.path.extend(paths);
                    }
                    s.save()?;
                }
            }
        }
        Ok(())
    }

    /// The packet-path reports of the cells run since the last call: (cell
    /// id, `{"packet_path": PathReport, "byte_check": ByteCheck}` as the
    /// document writes it).
    pub fn take_path_reports(&mut self) -> Vec<(String, serde_json::Value)> {
        std::mem::take(&mut self.paths)
            .into_iter()
            .filter_map(|(id, p)| Some((id, serde_json::to_value(p).ok()?)))
            .collect()
    }

    /// Stops the servers.
    pub fn shutdown(self) {
        for (_, e) in self.servers {
            e.server.shutdown();
        }
    }
}

/// An embedded server for `spec`'s chain (`generated`) and compression,
/// with an HTTP/3 listener on its TLS port for a QUIC cell; on `path`'s
/// server address, or loopback.
fn start(
    generated: pki::Generated,
    placement: Placement,
    spec: &CellSpec,
    path: Option<&tlslab_path::PathHandle>,
) -> Result<Embedded, crate::Error> {
    let rig = Rig::new(generated, placement)?;
    let mut serve = rig.server(Content::Specweb96);
    serve.tls.cert_compression = spec.cert_compression.clone();
    serve.https = Some(rig::server_bind(path));
    let server = spec.transport.start(serve)?;
    Ok(Embedded { server, rig })
}

/// The load of one cell against `url`.
fn cell_load(rig: &Rig, spec: &CellSpec, repeat: u32, url: &str) -> Result<LoadConfig, StudyError> {
    let mut load = rig.cell_load(
        url,
        spec.cell,
        spec.clients,
        spec.versions.clone(),
        spec.requests_per_conn,
        spec.reuse,
    )?;
    load.warmup = spec.warmup;
    load.cert_compression = spec.cert_compression.clone();
    // `--mss` is a TCP socket option (`load --h3` refuses it).
    load.mss = spec.mss.filter(|_| spec.transport == Transport::Tcp);
    if let Some(n) = spec.requests {
        load.requests = Some(n);
        load.duration = None;
    }
    if let Some(g) = &spec.group {
        load.algorithms = Algorithms {
            suites: None,
            groups: Some(vec![g.clone()]),
            ..Algorithms::default()
        };
    }
    if let Some(rate) = spec.rate {
        load.open_loop = Some(OpenLoop {
            rate,
            arrivals: Arrivals::Poisson,
            max_in_flight: 10_000,
        });
        load.seed = u64::from(repeat);
    }
    Ok(load)
}

/// An equivalent pair of command lines (certificates, server, load) for a
/// cell: what to type to reproduce it outside the experiment.
pub fn command_line(spec: &CellSpec, placement: &Placement) -> String {
    let taskset = Placement::taskset;
    let key = spec.key.name();
    let dir = match spec.intermediate {
        Some(m) => format!("certs-{key}-{}", m.name()),
        None => format!("certs-{key}"),
    };
    let certs_extra = spec.intermediate.map_or(String::new(), |m| {
        format!(" --intermediate-key {}", m.name())
    });
    let comp = if spec.cert_compression.is_empty() {
        String::new()
    } else {
        format!(
            " --cert-compression {}",
            crate::join(spec.cert_compression.iter().map(|c| c.name()), ",")
        )
    };
    let versions: Vec<&str> = spec.versions.iter().map(|v| v.short()).collect();
    let mut load = format!(
        "{}tlslab load https://localhost:8443{} --cacert {dir}/{} --tls {} -c {} --threads 1 \
         -d {} --warmup {} --requests-per-conn {} --reuse {}",
        taskset(&placement.client),
        spec.path,
        pki::CA_CERT_FILE,
        versions.join(","),
        spec.clients,
        flag_duration(spec.cell),
        flag_duration(spec.warmup),
        spec.requests_per_conn,
        tlslab_report::study::fmt_level(spec.reuse * 100.0),
    );
    if let Some(g) = &spec.group {
        load.push_str(&format!(" --group {g}"));
    }
    if let Some(r) = spec.rate {
        load.push_str(&format!(" --rate {r}"));
    }
    load.push_str(&comp);
    if let Some(m) = spec.mss.filter(|_| spec.transport == Transport::Tcp) {
        load.push_str(&format!(" --mss {m}"));
    }
    // Over QUIC: HTTP/3 to the server's UDP listener on the same port, one
    // stream in flight per connection.
    let h3 = if spec.transport == Transport::Quic {
        load.push_str(" --h3 -m 1");
        " --h3"
    } else {
        ""
    };
    if let Some(n) = spec.requests {
        load = load.replacen(
            &format!(" -d {}", flag_duration(spec.cell)),
            &format!(" -n {n}"),
            1,
        );
    }
    if let (Some(rtt), PathKind::Packet) = (spec.rtt, spec.wan) {
        // Across the packet path: the server listens on its address there.
        let load = load.replace("https://localhost:8443", "https://10.201.0.1:8443");
        return format!(
            "tlslab certs --key {key}{certs_extra} --san 10.201.0.1 --out {dir} && sudo tlslab \
             path --delay {}ms --cc reno -- {}tlslab serve --cert {dir}/{} --key-file {dir}/{} \
             --listen 10.201.0.1:8443{h3} --threads 1{comp} ::: {load}",
            rtt.as_millis() / 2,
            taskset(&placement.server),
            pki::CHAIN_FILE,
            pki::KEY_FILE,
        );
    }
    let relay = match spec.rtt {
        // The load above then targets the relay's port, 8444.
        Some(rtt) => {
            load = load.replace("https://localhost:8443", "https://127.0.0.1:8444");
            format!(
                "tlslab relay --listen 127.0.0.1:8444 --upstream 127.0.0.1:8443 --delay {}ms & ",
                rtt.as_millis() / 2
            )
        }
        None => String::new(),
    };
    format!(
        "tlslab certs --key {key}{certs_extra} --out {dir} && {}tlslab serve --cert {dir}/{} \
         --key-file {dir}/{} --listen 127.0.0.1:8443{h3} --threads 1{comp} & {relay}{load}",
        taskset(&placement.server),
        pki::CHAIN_FILE,
        pki::KEY_FILE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn quic_cells_have_h3_command_lines_without_mss() {
        let mut tcp = CellSpec::new("pq-x", Duration::from_secs(1));
        tcp.mss = Some(1460);
        let mut quic = tcp.clone();
        quic.transport = Transport::Quic;
        let placement = Placement::split();
        let t = command_line(&tcp, &placement);
        assert!(t.contains(" --mss 1460") && !t.contains("--h3"), "{t}");
        // The spec's MSS is never passed to `load --h3` (it refuses it).
        let q = command_line(&quic, &placement);
        assert!(!q.contains("--mss"), "{q}");
        crate::assert_has(&q, &["--listen 127.0.0.1:8443 --h3 --threads 1"]);
        assert!(q.ends_with(" --h3 -m 1"), "{q}");
        quic.rtt = Some(Duration::from_millis(100));
        quic.wan = PathKind::Packet;
        let p = command_line(&quic, &placement);
        crate::assert_has(
            &p,
            &[
                "tlslab path --delay 50ms",
                "--listen 10.201.0.1:8443 --h3 --threads 1",
                "https://10.201.0.1:8443/",
                "--h3 -m 1",
            ],
        );
    }
}
