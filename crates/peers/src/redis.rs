//! redis-server on a loopback port, persistence off, in a directory of
//! its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::Error;
use crate::proc::{Proc, start_on_free_port};
use crate::tool::need_tool;

/// redis-server's command line for a cache on 127.0.0.1:`port` with
/// persistence off and its files in `dir` (also what `tlslab peers
/// redis-args` prints for bench/redis.sh).
pub fn args(port: u16, dir: &Path) -> Vec<std::ffi::OsString> {
    let mut a: Vec<std::ffi::OsString> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .into_iter()
        .chain(["--save", "", "--appendonly", "no", "--dir"])
        .map(Into::into)
        .collect();
    a.push(dir.into());
    a
}

/// A running redis-server, killed on drop; [`restart`](Redis::restart)
/// brings it back on the same port.
pub struct Redis {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    cpus: Vec<usize>,
    proc: Option<Proc>,
}

impl Redis {
    /// Finds redis-server and starts it on a free port (up to 3), pinned
    /// to `cpus`, with its files and log in `dir`.
    pub fn start(dir: &Path, cpus: &[usize]) -> Result<Redis, Error> {
        let bin = need_tool("redis-server")?;
        start_on_free_port(3, |port| {
            let mut r = Redis {
                bin: bin.clone(),
                dir: dir.to_path_buf(),
                port,
                cpus: cpus.to_vec(),
                proc: None,
            };
            r.restart()?;
            Ok(r)
        })
    }

    /// (Re)starts it on its port, waiting up to 10 s until it accepts.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.proc = None;
        let mut cmd = Command::new(&self.bin);
        cmd.args(args(self.port, &self.dir));
        let mut proc = Proc::spawn(cmd, "redis-server", Some(&self.dir.join("redis.log")))?;
        proc.pin(&self.cpus)?;
        proc.wait_port(self.addr(), Duration::from_secs(10))?;
        self.proc = Some(proc);
        Ok(())
    }

    /// Kills it (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(p) = self.proc.take() {
            p.kill();
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// The process, while it runs.
    pub fn proc(&self) -> Option<&Proc> {
        self.proc.as_ref()
    }
}
