//! What the crates' hardening tests share (probe's exporter, dispatch): a
//! slowloris of many clients against a loopback server, and the summary of
//! the real clients' times beside it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A slow client closed within this time counts as closed in time.
pub const CLOSED_WITHIN: Duration = Duration::from_secs(3);
/// A slow client still open after this time gives up (and is not counted).
const GIVE_UP: Duration = Duration::from_secs(8);
/// The gap between a slow client's bytes.
const BYTE_EVERY: Duration = Duration::from_millis(200);

/// Slow clients that each write one byte every 200 ms, watching for the
/// server's close between bytes.
pub struct Slowloris {
    tasks: Vec<JoinHandle<()>>,
    closed_in_time: Arc<AtomicU64>,
}

impl Slowloris {
    /// Starts `n` slow clients against `addr`; client byte `i` is
    /// `byte(i)`. A client whose connect fails is not counted.
    pub fn start(addr: SocketAddr, n: usize, byte: fn(usize) -> u8) -> Slowloris {
        let closed_in_time = Arc::new(AtomicU64::new(0));
        let tasks = (0..n)
            .map(|_| {
                let closed_in_time = closed_in_time.clone();
                tokio::spawn(async move {
                    let Ok(mut s) = TcpStream::connect(addr).await else {
                        return;
                    };
                    let start = Instant::now();
                    let mut buf = [0u8; 256];
                    for i in 0.. {
                        if s.write_all(&[byte(i)]).await.is_err() {
                            break;
                        }
                        // An answer (a 408 or 503, an alert) is followed by
                        // the close; a read error or EOF is the close.
                        if let Ok(Ok(0) | Err(_)) =
                            tokio::time::timeout(BYTE_EVERY, s.read(&mut buf)).await
                        {
                            break;
                        }
                        if start.elapsed() > GIVE_UP {
                            return;
                        }
                    }
                    if start.elapsed() < CLOSED_WITHIN {
                        closed_in_time.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Slowloris {
            tasks,
            closed_in_time,
        }
    }

    /// Waits for every slow client; how many the server closed within
    /// [`CLOSED_WITHIN`].
    pub async fn closed_in_time(self) -> u64 {
        for t in self.tasks {
            let _ = t.await;
        }
        self.closed_in_time.load(Ordering::Relaxed)
    }
}

/// The real clients' times: how many were served, the median and the
/// slowest. Panics on no times (the test served no one).
pub fn served(mut times: Vec<Duration>) -> (usize, Duration, Duration) {
    times.sort();
    (times.len(), times[times.len() / 2], times[times.len() - 1])
}
