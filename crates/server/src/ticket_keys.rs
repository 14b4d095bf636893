//! Loading and reloading the ticket keys of `--ticket-keys FILE`.
//!
//! The file is read at start (a bad file stops the start, naming the fix),
//! then again on SIGHUP and whenever its modification time or size changes
//! (checked every second). A reload that fails keeps the keys in use and
//! logs a warning; key bytes are never logged, only key names' count and
//! the version.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tlslab_crypto::ticket_keys::{KeyMaterial, TicketKeyRing, parse_key_file};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::{Error, Result};

/// How often the file's metadata is checked.
const POLL: Duration = Duration::from_secs(1);

fn read(path: &Path) -> Result<Vec<KeyMaterial>> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        Error::Config(format!(
            "--ticket-keys {shown}: cannot read it: {e}; make one with `openssl rand 80 > {shown}`"
        ))
    })?;
    Ok(parse_key_file(&bytes, &shown)?)
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The key ring of `path`, at version 1.
pub(crate) fn load(path: &Path, lifetime: Duration) -> Result<Arc<TicketKeyRing>> {
    let keys = read(path)?;
    Ok(TicketKeyRing::new(&keys, 0, 1, lifetime)?)
}

/// Re-reads `path` into `ring` on SIGHUP and when the file changes, until
/// shutdown. Call inside the server's runtime.
pub(crate) fn spawn_watch(
    path: PathBuf,
    ring: Arc<TicketKeyRing>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    let mut hup = signal(SignalKind::hangup())
        .map_err(|e| Error::Runtime(format!("cannot install the SIGHUP handler: {e}")))?;
    let mut loaded = read(&path).ok();
    tokio::spawn(async move {
        let mut last = stamp(&path);
        let mut tick = tokio::time::interval(POLL);
        loop {
            let why = tokio::select! {
                _ = hup.recv() => "SIGHUP",
                _ = tick.tick() => {
                    let now = stamp(&path);
                    if now == last { continue; }
                    "the file changed"
                }
                _ = shutdown.wait_for(|s| *s) => return,
            };
            last = stamp(&path);
            match read(&path) {
                Ok(keys) if loaded.as_ref() == Some(&keys) => {
                    tracing::debug!("ticket keys unchanged ({why})");
                }
                Ok(keys) => {
                    let version = ring.version() + 1;
                    match ring.install(&keys, 0, version) {
                        Ok(()) => {
                            loaded = Some(keys.clone());
                            tracing::info!(
                                keys = keys.len(),
                                version,
                                "ticket keys reloaded from {} ({why})",
                                path.display()
                            );
                        }
                        Err(e) => tracing::warn!("ticket keys not reloaded: {e}"),
                    }
                }
                Err(e) => {
                    tracing::warn!("ticket keys not reloaded ({why}), keeping the old ones: {e}")
                }
            }
        }
    });
    Ok(())
}
