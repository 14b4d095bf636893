//! Named network namespaces (`ip netns`): creating them, entering them from
//! a thread, removing them, and finding the ones a crashed run left.
//!
//! A namespace is named `tlslab-path-<pid>-<start>-<n>-<side>`, where
//! `<start>` is the process's start time in clock ticks (field 22 of
//! `/proc/<pid>/stat`), so a reused pid does not make a stale namespace look
//! alive.

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;

use nix::sched::{CloneFlags, setns};

use crate::error::Error;

/// The prefix of every namespace this crate creates.
pub const PREFIX: &str = "tlslab-path-";

/// Where `ip netns` keeps its bind mounts.
pub const NETNS_DIR: &str = "/run/netns";

/// Runs `ip ARGS`, with its stderr in the error.
pub(crate) fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip").args(args).output().map_err(Error::os(
        "cannot run `ip` (iproute2)",
        "; install iproute2 (apt-get install iproute2)",
    ))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Setup(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Returns true if and only if this process may create namespaces and
/// network devices: effective root, or CAP_NET_ADMIN and CAP_SYS_ADMIN
/// (bits 12 and 21 of `CapEff`).
pub fn privileged() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let caps = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0);
    caps & (1 << 12) != 0 && caps & (1 << 21) != 0
}

/// The start time of process `pid` in clock ticks since boot, if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The name prefix of this process's namespaces: `tlslab-path-<pid>-<start>-`.
pub(crate) fn own_prefix() -> String {
    let pid = std::process::id();
    format!("{PREFIX}{pid}-{}-", start_time(pid).unwrap_or(0))
}

/// Namespaces named by this crate whose process is gone (or is another
/// process with the same pid).
pub fn stale() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            let Some(rest) = name.strip_prefix(PREFIX) else {
                return false;
            };
            let mut f = rest.split('-');
            let (Some(pid), Some(start)) = (f.next(), f.next()) else {
                return false;
            };
            let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
                return false;
            };
            start_time(pid) != Some(start)
        })
        .collect();
    out.sort();
    out
}

/// A stale namespace [`cleanup_stale`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    /// Its name.
    pub name: String,
    /// The processes that were still inside it, ended with SIGKILL.
    pub killed: Vec<u32>,
}

/// The processes inside the named namespace (`ip netns pids NAME`).
pub fn pids(name: &str) -> Result<Vec<u32>, Error> {
    let out = Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map_err(Error::os(
            "cannot run `ip` (iproute2)",
            "; install iproute2 (apt-get install iproute2)",
        ))?;
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "ip netns pids {name}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// Returns true if and only if process `pid` is gone (or a zombie: dead,
/// waiting for a parent that may never reap it).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X"),
    }
}

/// Removes the stale namespaces ([`stale`]): first it ends the processes
/// still inside each (the commands of a run killed with `kill -9`, and
/// their children) with SIGKILL, then removes the namespace. Returns what
/// it removed.
pub fn cleanup_stale() -> Result<Vec<Removed>, Error> {
    let mut removed = Vec::new();
    // Another run's start may remove the same namespace at the same time:
    // one that is gone by the time of an error is not an error.
    let vanished = |name: &str| !std::path::Path::new(NETNS_DIR).join(name).exists();
    for name in stale() {
        let killed = match pids(&name) {
            Ok(p) => p,
            Err(_) if vanished(&name) => continue,
            Err(e) => return Err(e),
        };
        for &p in &killed {
            if let Ok(pid) = i32::try_from(p) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !killed.iter().all(|&p| gone(p)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        match ip(&["netns", "del", &name]) {
            Ok(()) => {}
            Err(_) if vanished(&name) => continue,
            Err(e) => return Err(e),
        }
        removed.push(Removed { name, killed });
    }
    Ok(removed)
}

/// A named namespace this process created; removed on drop.
#[derive(Debug)]
pub(crate) struct Netns {
    name: String,
}

impl Netns {
    pub(crate) fn add(name: String) -> Result<Netns, Error> {
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn file(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            tracing::warn!("cannot remove network namespace {}: {e}", self.name);
        }
    }
}

/// Moves the calling thread into the namespace at `file` (for sockets it
/// creates afterwards; sockets keep the namespace they were made in).
pub fn enter(file: &std::path::Path) -> Result<(), Error> {
    let f = File::open(file).map_err(Error::os(
        format!("cannot open the namespace {}", file.display()),
        " (has the path stopped?)",
    ))?;
    setns(f, CloneFlags::CLONE_NEWNET)
        .map_err(|e| Error::os(format!("setns({})", file.display()), "")(e.into()))
}
