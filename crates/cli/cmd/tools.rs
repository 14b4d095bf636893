//! The small tools: `tlslab fileset` (a workload's files for other
//! servers) and `tlslab relay` (a user-space WAN path).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::args::tools::{FilesetArgs, FilesetWorkload, RelayArgs};
use crate::usage::{bail, usage};

/// The file tree `tlslab fileset` writes: `(url path, size)` sorted by path,
/// the logged paths that cannot become files, and the `load` flags that
/// request them.
struct FilesetFiles {
    /// Each file's URL path and size in bytes.
    pub files: Vec<(String, u64)>,
    /// Replay only: logged paths left out (not plain absolute paths).
    pub skipped: Vec<String>,
    /// The `tlslab load` flags that request these files.
    pub load_hint: String,
}

/// Lists the files `tlslab fileset` writes, after checking its flags: the
/// run step, which reads the e-commerce model or the access log.
fn fileset_files(a: &FilesetArgs) -> anyhow::Result<FilesetFiles> {
    use FilesetWorkload as W;
    if a.workload_config.is_some() && a.workload != W::Ecommerce {
        return bail("--workload-config needs --workload ecommerce");
    }
    if a.access_log.is_some() && a.workload != W::Replay {
        return bail("--access-log needs --workload replay");
    }
    match a.workload {
        W::Specweb96 => Ok(FilesetFiles {
            files: tlslab_workload::specweb96::files()
                .into_iter()
                .map(|f| (f.path, f.size as u64))
                .collect(),
            skipped: Vec::new(),
            load_hint: "--workload specweb96".into(),
        }),
        W::Ecommerce => {
            use tlslab_workload::ecommerce::{Config, Generator, PathStyle};
            let mut model = match &a.workload_config {
                Some(path) => {
                    Config::load(path).map_err(|e| usage(format!("--workload-config: {e}")))?
                }
                None => Config::default(),
            };
            model.paths = PathStyle::Files;
            let generator =
                Generator::new(model).map_err(|e| usage(format!("--workload-config: {e}")))?;
            Ok(FilesetFiles {
                files: generator.files(),
                skipped: Vec::new(),
                load_hint: "--workload ecommerce --workload-config FILE (with paths = \"files\")"
                    .into(),
            })
        }
        W::Replay => {
            use tlslab_workload::replay::{PathMode, ReplayPlan};
            let Some(log) = &a.access_log else {
                return bail(
                    "--workload replay needs --access-log FILE, the access log whose paths to write",
                );
            };
            let (entries, _) = crate::flags::load::parse_log(log, false)?;
            let (files, skipped) = ReplayPlan::new(&entries, PathMode::Original).file_tree();
            Ok(FilesetFiles {
                files,
                skipped,
                load_hint: format!(
                    "--workload replay --access-log {} --replay-paths original",
                    log.display()
                ),
            })
        }
    }
}

/// Runs `tlslab fileset`.
pub fn fileset(a: &FilesetArgs) -> anyhow::Result<ExitCode> {
    use tlslab_workload::fileset::{Overwrite, write_sized};
    let files = fileset_files(a)?;
    let overwrite = if a.force {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    };
    let written = write_sized(
        &a.out,
        files.files.iter().map(|(p, n)| (p.as_str(), *n)),
        overwrite,
    )
    .map_err(|e| match e {
        tlslab_workload::Error::Exists { .. } => usage(format!("{e} (--force overwrites)")),
        tlslab_workload::Error::Invalid(_) => usage(e),
        other => anyhow::Error::new(other),
    })?;
    let bytes: u64 = files.files.iter().map(|(_, n)| n).sum();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "wrote {} files, {bytes} bytes, under {}",
        written.len(),
        a.out.display()
    )?;
    if !files.skipped.is_empty() {
        writeln!(
            out,
            "skipped {} logged paths that cannot be files (e.g. {}); a replay with \
             --replay-paths original gets 404 for them",
            files.skipped.len(),
            files.skipped[0]
        )?;
    }
    writeln!(
        out,
        "serve them with nginx `root {0};`, Apache `DocumentRoot {0}` or `tlslab serve --root {0}`; \
         load them with `tlslab load https://HOST:PORT {1}`",
        a.out.display(),
        files.load_hint
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Turns `tlslab relay`'s flags into a relay configuration; resolves
/// the upstream name once, here.
fn relay_config(a: &RelayArgs) -> anyhow::Result<tlslab_relay::RelayConfig> {
    use std::net::ToSocketAddrs as _;
    let upstream = a
        .upstream
        .to_socket_addrs()
        .map_err(|e| usage(format!("--upstream {}: {e} (write HOST:PORT)", a.upstream)))?
        .next()
        .ok_or_else(|| {
            usage(format!(
                "--upstream {}: the name has no address",
                a.upstream
            ))
        })?;
    let bandwidth = match &a.bandwidth {
        Some(b) => Some(
            b.parse::<tlslab_relay::Bandwidth>()
                .map_err(|e| usage(format!("--bandwidth: {e}")))?,
        ),
        None => None,
    };
    let conditions = tlslab_relay::Conditions {
        delay: a.delay,
        jitter: a.jitter,
        bandwidth,
        loss: tlslab_relay::parse_loss(&a.loss).map_err(|e| usage(format!("--loss: {e}")))?,
        loss_delay: a.loss_delay,
    };
    conditions.validate().map_err(usage)?;
    let cfg = tlslab_relay::RelayConfig {
        listen: a.listen,
        upstream,
        conditions,
        seed: a.seed,
        idle_timeout: a.idle_timeout,
        max_queued: tlslab_relay::parse_size(&a.max_queued)
            .map_err(|e| usage(format!("--max-queued: {e}")))?,
    };
    cfg.validate()
        .map_err(|e| usage(format!("--idle-timeout/--max-queued: {e}")))?;
    Ok(cfg)
}

/// Runs `tlslab relay` until SIGINT or SIGTERM.
pub fn relay(a: &RelayArgs) -> anyhow::Result<ExitCode> {
    let cfg = relay_config(a)?;
    let (upstream, conditions) = (cfg.upstream, cfg.conditions);
    let relay = tlslab_relay::RelayThread::spawn(cfg).map_err(|e| match e {
        tlslab_relay::Error::Bind(..) => usage(format!("--listen: {e}")),
        other => anyhow::Error::new(other),
    })?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "relay listening on {}", relay.local_addr())?;
        writeln!(out, "relay: to {upstream}; {conditions}")?;
        out.flush()?;
    }
    tlslab_server::wait_for_signal().context("waiting for SIGINT/SIGTERM")?;
    let s = relay.stop();
    println!(
        "relay: {} connections ({} upstream failures), {} bytes up, {} bytes down, \
         {} segments, {} lost (delayed as retransmitted)",
        s.connections, s.upstream_failures, s.bytes_up, s.bytes_down, s.segments, s.lost
    );
    Ok(ExitCode::SUCCESS)
}
