//! Waiting for the signal that ends `tlslab serve`.

use tokio::signal::unix::{SignalKind, signal};

use crate::error::{Error, Result};

/// The signal that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// Blocks the calling thread until SIGINT or SIGTERM arrives. Works from
/// synchronous code and from inside another runtime alike (it waits on a
/// thread of its own).
pub fn wait_for_signal() -> Result<Signal> {
    std::thread::Builder::new()
        .name("tlslab-signal".into())
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(Error::setup("cannot start the signal waiter"))?;
            rt.block_on(async {
                let err = Error::setup::<std::io::Error>("cannot install a signal handler");
                let mut int = signal(SignalKind::interrupt()).map_err(err)?;
                let mut term = signal(SignalKind::terminate()).map_err(err)?;
                tokio::select! {
                    _ = int.recv() => Ok(Signal::Interrupt),
                    _ = term.recv() => Ok(Signal::Terminate),
                }
            })
        })
        .map_err(Error::setup("cannot start the signal waiter"))?
        .join()
        .map_err(|_| Error::Setup {
            what: "the signal waiter panicked",
            source: None,
        })?
}
