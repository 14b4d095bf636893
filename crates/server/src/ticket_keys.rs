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

use crate::error::{Error, Result};

/// How often the file's metadata is checked.
const POLL: Duration = Duration::from_secs(1);

fn read(path: &Path) -> Result<Vec<KeyMaterial>> {
    let shown = path.display().to_string();
    // Bounded: the file may be anything (issue 20).
    let bytes = tlslab_workload::input::read_capped(path, tlslab_workload::input::MAX_CONFIG_FILE)
        .map_err(|source| Error::TicketKeyFile {
            path: path.to_path_buf(),
            source,
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
    let mut hup =
        signal(SignalKind::hangup()).map_err(Error::setup("cannot install the SIGHUP handler"))?;
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

/// The cluster's ticket keys in Redis (`--ticket-keys redis://…`).
#[derive(Debug)]
pub(crate) struct RedisKeys {
    pub(crate) client: redis::Client,
    /// The Redis key of the versioned key set; the lock is `{key}:lock`.
    pub(crate) key: String,
    pub(crate) rotation: Duration,
}

/// The poll interval for a rotation period: 1/24 of it, within 50 ms..30 s.
pub(crate) fn poll_interval(rotation: Duration) -> Duration {
    (rotation / 24).clamp(Duration::from_millis(50), Duration::from_secs(30))
}

/// One version of the cluster's key set as stored in Redis:
/// `b"TLK1" | version u64 | encrypt u8 | created_ms u64 | n u8 | n × 80 bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    version: u64,
    encrypt: usize,
    created_ms: u64,
    keys: Vec<KeyMaterial>,
}

impl State {
    fn encode(&self) -> Vec<u8> {
        let mut v = b"TLK1".to_vec();
        v.extend_from_slice(&self.version.to_be_bytes());
        v.push(self.encrypt as u8);
        v.extend_from_slice(&self.created_ms.to_be_bytes());
        v.push(self.keys.len() as u8);
        for k in &self.keys {
            v.extend_from_slice(&k.0);
        }
        v
    }

    fn decode(b: &[u8]) -> Option<State> {
        let rest = b.strip_prefix(b"TLK1")?;
        let version = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        let encrypt = usize::from(*rest.get(8)?);
        let created_ms = u64::from_be_bytes(rest.get(9..17)?.try_into().ok()?);
        let n = usize::from(*rest.get(17)?);
        let body = rest.get(18..)?;
        if body.len() != n * tlslab_crypto::ticket_keys::KEY_LEN || encrypt >= n {
            return None;
        }
        let keys = parse_key_file(body, "redis").ok()?;
        Some(State {
            version,
            encrypt,
            created_ms,
            keys,
        })
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Keeps `ring` in step with the key set in Redis until shutdown; one node
/// at a time (holder of `{key}:lock`) creates and rotates it:
/// every `rotation` it publishes a new key that only decrypts, and two poll
/// intervals later (when every node has polled it) makes it the encrypting
/// key, keeping the previous one to decrypt. Without Redis the ring keeps
/// its keys (local ones if it never had the cluster's) and a warning is
/// logged once per outage. Key bytes are never logged.
pub(crate) fn spawn_redis(
    keys: RedisKeys,
    ring: Arc<TicketKeyRing>,
    mut shutdown: watch::Receiver<bool>,
) {
    let poll = poll_interval(keys.rotation);
    let node = format!("{}-{}", std::process::id(), unix_ms());
    let lock = format!("{}:lock", keys.key);
    tokio::spawn(async move {
        let mut conn: Option<redis::aio::MultiplexedConnection> = None;
        let mut warned = false;
        let mut tick = tokio::time::interval(poll);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            if conn.is_none() {
                let c = tokio::time::timeout(
                    Duration::from_secs(1),
                    keys.client.get_multiplexed_async_connection(),
                )
                .await;
                conn = match c {
                    Ok(Ok(c)) => Some(c),
                    _ => None,
                };
            }
            let Some(c) = conn.as_mut() else {
                keep_keys(&mut warned, &ring, "is unreachable");
                continue;
            };
            let step = tokio::time::timeout(
                Duration::from_secs(1),
                redis_step(c, &keys, &lock, &node, &ring, poll),
            )
            .await;
            match step {
                Ok(Ok(())) => {
                    if warned {
                        tracing::info!(
                            version = ring.version(),
                            "Redis is back for the ticket keys"
                        );
                    }
                    warned = false;
                }
                Ok(Err(e)) => {
                    conn = None;
                    keep_keys(&mut warned, &ring, &format!("failed ({e})"));
                }
                Err(_) => {
                    conn = None;
                    keep_keys(&mut warned, &ring, "timed out");
                }
            }
        }
    });
}

/// Warns, once until Redis is back, that the keys in use are kept.
fn keep_keys(warned: &mut bool, ring: &TicketKeyRing, why: &str) {
    if !std::mem::replace(warned, true) {
        tracing::warn!(
            version = ring.version(),
            "Redis {why} for the ticket keys; keeping the keys in use"
        );
    }
}

async fn redis_step(
    c: &mut redis::aio::MultiplexedConnection,
    keys: &RedisKeys,
    lock: &str,
    node: &str,
    ring: &TicketKeyRing,
    poll: Duration,
) -> redis::RedisResult<()> {
    use redis::AsyncCommands;
    let raw: Option<Vec<u8>> = c.get(&keys.key).await?;
    let state = raw.as_deref().and_then(State::decode);
    let now = unix_ms();
    // A fresh key, in case this node creates or rotates the set.
    let Ok(fresh) = KeyMaterial::generate() else {
        tracing::warn!("the system random generator failed; ticket keys not rotated this time");
        return Ok(());
    };
    let lock_ms = (poll * 10).as_millis() as u64;
    let take_lock = |c: &mut redis::aio::MultiplexedConnection| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(lock).arg(node).arg("NX").arg("PX").arg(lock_ms);
        let mut c = c.clone();
        async move {
            cmd.query_async::<Option<String>>(&mut c)
                .await
                .map(|r| r.is_some())
        }
    };
    let next = match &state {
        None => {
            if raw.is_some() {
                tracing::warn!("the ticket keys in Redis do not decode; replacing them");
            }
            take_lock(c).await?.then(|| State {
                version: 1,
                encrypt: 0,
                created_ms: now,
                keys: vec![fresh],
            })
        }
        Some(s) if s.encrypt == 0 && now >= s.created_ms + keys.rotation.as_millis() as u64 => {
            take_lock(c).await?.then(|| {
                let mut ks = vec![fresh];
                ks.extend(s.keys.iter().take(2).cloned());
                State {
                    version: s.version + 1,
                    encrypt: 1,
                    created_ms: now,
                    keys: ks,
                }
            })
        }
        Some(s) if s.encrypt > 0 && now >= s.created_ms + 2 * poll.as_millis() as u64 => {
            let holder: Option<String> = c.get(lock).await?;
            let mine = holder.as_deref() == Some(node) || take_lock(c).await?;
            mine.then(|| State {
                version: s.version + 1,
                encrypt: 0,
                created_ms: now,
                keys: s.keys.iter().take(2).cloned().collect(),
            })
        }
        Some(_) => None,
    };
    let current = match next {
        Some(n) => {
            let _: () = c.set(&keys.key, n.encode()).await?;
            tracing::info!(
                version = n.version,
                keys = n.keys.len(),
                phase = if n.encrypt == 0 {
                    "switched"
                } else {
                    "published"
                },
                "ticket keys rotated in Redis by this node"
            );
            Some(n)
        }
        None => state,
    };
    if let Some(s) = current
        && s.version != ring.version()
        && let Err(e) = ring.install(&s.keys, s.encrypt, s.version)
    {
        tracing::warn!("ticket keys from Redis not installed: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sets_round_trip_and_garbage_is_refused() {
        let s = State {
            version: 7,
            encrypt: 1,
            created_ms: 123_456,
            keys: vec![
                KeyMaterial::generate().unwrap(),
                KeyMaterial::generate().unwrap(),
            ],
        };
        let enc = s.encode();
        assert_eq!(State::decode(&enc), Some(s.clone()));
        assert_eq!(State::decode(&enc[..enc.len() - 1]), None);
        assert_eq!(State::decode(b"TLK1"), None);
        assert_eq!(State::decode(b"nonsense"), None);
        let mut bad = enc.clone();
        bad[12] = 9; // encrypt index beyond the keys
        assert_eq!(State::decode(&bad), None);
    }

    #[test]
    fn polls_are_a_24th_of_the_rotation_within_bounds() {
        assert_eq!(
            poll_interval(Duration::from_secs(12 * 3600)),
            Duration::from_secs(30)
        );
        assert_eq!(
            poll_interval(Duration::from_secs(24)),
            Duration::from_secs(1)
        );
        assert_eq!(
            poll_interval(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
    }
}
