//! The load engine's cells: embedded servers (one per certificate key type,
//! loopback, one worker pinned to the server CPU) and one `tlslab load` run
//! per cell, pinned to the client CPU.

use std::collections::BTreeMap;

use tlslab_crypto::pki;
use tlslab_crypto::provider::Algorithms;
use tlslab_load::{Arrivals, OpenLoop};
use tlslab_report::study::{Cell, CellMetrics};
use tlslab_server::{Content, Server};

use super::matrix::{CellSpec, Matrix};
use super::session::{Session, StudyError, flag_duration, now_ms};
use crate::pin::Placement;
use crate::rig::{self, Rig};

struct Embedded {
    server: Server,
    rig: Rig,
}

/// Embedded servers, started on first use and kept for the whole study
/// (their session caches persist across cells, as a real server's would).
pub struct LoadRig {
    placement: Placement,
    servers: BTreeMap<String, Embedded>,
}

impl LoadRig {
    /// No server yet.
    pub fn new(placement: Placement) -> LoadRig {
        LoadRig {
            placement,
            servers: BTreeMap::new(),
        }
    }

    fn server(&mut self, spec: &CellSpec) -> Result<&Embedded, StudyError> {
        let name = spec.server_key();
        if !self.servers.contains_key(&name) {
            let generated = pki::generate_chain(spec.key, spec.intermediate, &[])
                .map_err(crate::Error::from)?;
            let rig = Rig::new(generated, self.placement.clone())?;
            let mut serve = rig.server(Content::Specweb96);
            serve.tls.cert_compression = spec.cert_compression.clone();
            let server = Server::start(serve).map_err(crate::Error::from)?;
            self.servers.insert(name.clone(), Embedded { server, rig });
        }
        Ok(&self.servers[&name])
    }

    /// Runs one cell and returns it (not yet in the document).
    pub fn run(&mut self, spec: &CellSpec, repeat: u32) -> Result<Cell, StudyError> {
        let id = format!("{}-r{repeat}", spec.point);
        let emb = self.server(spec)?;
        let upstream = emb
            .server
            .https_addr()
            .unwrap_or_else(|| ([127, 0, 0, 1], 0).into());
        // With a round-trip time, through the path emulator.
        let path = match spec.rtt {
            Some(rtt) => Some(super::pq::RttPath::start(rtt, upstream, &id)?),
            None => None,
        };
        let url = match &path {
            Some(p) => format!("https://127.0.0.1:{}{}", p.addr().port(), spec.path),
            None => format!("https://localhost:{}{}", upstream.port(), spec.path),
        };
        let mut load = emb.rig.cell_load(
            &url,
            spec.cell,
            spec.clients,
            spec.versions.clone(),
            spec.requests_per_conn,
            spec.reuse,
        )?;
        load.warmup = spec.warmup;
        load.cert_compression = spec.cert_compression.clone();
        load.mss = spec.mss;
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
        let started = now_ms();
        let m = rig::measure(&emb.server, &load, &id);
        if let Some(p) = path {
            p.stop();
        }
        let m = m?;
        let mut metrics = CellMetrics::from_load(&m.report);
        metrics.server_cpu_us_per_request = m.server_cpu_us_per_request;
        metrics.server_busy = m.server_busy;
        metrics.server_sign_us = m.server_sign.map(|(us, _)| us);
        Ok(Cell {
            id,
            point: spec.point.clone(),
            factors: spec.factors.clone(),
            repeat,
            order: 0,
            command_line: command_line(spec, &self.placement),
            started_unix_ms: started,
            metrics,
            load: serde_json::to_value(&m.report).ok(),
        })
    }

    /// Runs every cell of `m` not yet in the session's document, repeats
    /// interleaved (round 1 over every point, then round 2, …).
    pub fn run_matrix(&mut self, s: &mut Session, m: &Matrix) -> Result<(), StudyError> {
        let points = m.points();
        for p in &points {
            if let Some(why) = p.excluded()
                && !s.doc.notes.contains(&why)
            {
                s.doc.notes.push(why);
            }
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
                let c = self.run(p, repeat)?;
                s.push(c)?;
            }
        }
        Ok(())
    }

    /// Stops the servers.
    pub fn shutdown(self) {
        for (_, e) in self.servers {
            e.server.shutdown();
        }
    }
}

/// An equivalent pair of command lines (certificates, server, load) for a
/// cell: what to type to reproduce it outside the experiment.
pub fn command_line(spec: &CellSpec, placement: &Placement) -> String {
    let taskset = |cpus: &[usize]| {
        if cpus.is_empty() {
            String::new()
        } else {
            format!(
                "taskset -c {} ",
                cpus.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
    };
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
            spec.cert_compression
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(",")
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
    if let Some(m) = spec.mss {
        load.push_str(&format!(" --mss {m}"));
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
         --key {dir}/{} --listen 127.0.0.1:8443 --threads 1{comp} & {relay}{load}",
        taskset(&placement.server),
        pki::CHAIN_FILE,
        pki::KEY_FILE,
    )
}
