//! One started peer: spawn, wait for its port, pin, meter, kill on drop.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tlslab_runtime::{CpuPin, CpuTime};

use crate::error::Error;

/// A port on 127.0.0.1 that was free a moment ago (bind port 0, read it,
/// release it): for peers that cannot be told to pick their own.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Waits until a TCP connect to `addr` succeeds; false after `limit`.
pub fn wait_for_port(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Waits for `child` at most `limit`, then kills it. `None`: it was killed.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Starts a peer on a free loopback port: `start(port)` up to `attempts`
/// times, on a new port whenever the last one was taken meanwhile
/// ([`Error::port_in_use`]); any other error ends the attempts.
pub fn start_on_free_port<T>(
    attempts: usize,
    mut start: impl FnMut(u16) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut last = None;
    for _ in 0..attempts.max(1) {
        let port = free_port().map_err(|source| Error::Io {
            what: "cannot bind a loopback port at",
            path: "127.0.0.1:0".into(),
            source,
        })?;
        match start(port) {
            Ok(t) => return Ok(t),
            Err(e) if e.port_in_use() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

/// stdout read line by line on a thread (for programs that print where
/// they listen).
struct Lines {
    rx: Receiver<String>,
    all: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

/// A child process in a process group of its own, with its output in a
/// file; on drop the whole group is killed (SIGKILL, or SIGTERM first with
/// [`graceful_drop`](Proc::graceful_drop)) and the child reaped.
pub struct Proc {
    child: Child,
    name: String,
    log: File,
    log_path: Option<PathBuf>,
    lines: Option<Lines>,
    pin: Option<CpuPin>,
    graceful: bool,
    reaped: bool,
}

impl Proc {
    /// Spawns `cmd` (stdin closed) with stdout and stderr appended to
    /// `log`, or to an anonymous temporary file when `None`.
    pub fn spawn(cmd: Command, name: &str, log: Option<&Path>) -> Result<Proc, Error> {
        Proc::start(cmd, name, log, false)
    }

    /// Spawns `cmd` (stdin closed) with its stdout lines collected
    /// ([`next_line`](Proc::next_line)) and stderr in an anonymous
    /// temporary file.
    pub fn spawn_lines(cmd: Command, name: &str) -> Result<Proc, Error> {
        Proc::start(cmd, name, None, true)
    }

    fn start(mut cmd: Command, name: &str, log: Option<&Path>, lines: bool) -> Result<Proc, Error> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { what, path, source }
        };
        let file = match log {
            Some(p) => File::options()
                .create(true)
                .append(true)
                .read(true)
                .open(p)
                .map_err(io("cannot create", p))?,
            None => tempfile::tempfile().map_err(io("cannot create", &std::env::temp_dir()))?,
        };
        let dup = || {
            file.try_clone()
                .map_err(io("cannot reopen", Path::new(name)))
        };
        cmd.stdin(Stdio::null()).stderr(dup()?).process_group(0);
        if lines {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(dup()?);
        }
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            name: format!("{name} ({cmd:?})"),
            source,
        })?;
        let lines = child.stdout.take().map(|out| {
            let (tx, rx) = channel();
            let all = Arc::new(Mutex::new(Vec::new()));
            let keep = Arc::clone(&all);
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    keep.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(line.clone());
                    let _ = tx.send(line);
                }
            });
            Lines {
                rx,
                all,
                reader: Some(reader),
            }
        });
        Ok(Proc {
            child,
            name: name.to_string(),
            log: file,
            log_path: log.map(Path::to_path_buf),
            lines,
            pin: None,
            graceful: false,
            reaped: false,
        })
    }

    /// Pins every thread of the process tree to `cpus` (nothing for an
    /// empty list), and again whenever [`wait_port`](Proc::wait_port)
    /// succeeds, so threads started meanwhile are pinned too.
    pub fn pin(&mut self, cpus: &[usize]) -> Result<(), Error> {
        if cpus.is_empty() {
            return Ok(());
        }
        let pin = CpuPin::new(cpus)?;
        for pid in self.tree() {
            pin.pin_process(pid)?;
        }
        self.pin = Some(pin);
        Ok(())
    }

    /// Waits until `addr` accepts TCP connections, at most `limit`; an
    /// error carries what the peer wrote.
    pub fn wait_port(&mut self, addr: SocketAddr, limit: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.try_status() {
                return Err(Error::Exited {
                    name: self.name.clone(),
                    status,
                    log: self.log_text().trim().to_string(),
                });
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                if let Some(pin) = &self.pin {
                    for pid in self.tree() {
                        pin.pin_process(pid)?;
                    }
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(Error::NotListening {
            name: self.name.clone(),
            addr,
            secs: limit.as_secs(),
            log: self.log_text().trim().to_string(),
        })
    }

    /// On drop, SIGTERM first and up to 5 s for a clean exit (so the child
    /// can remove its temporary files) before SIGKILL.
    pub fn graceful_drop(mut self) -> Proc {
        self.graceful = true;
        self
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name it was started under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file, if one was named.
    pub fn log_path(&self) -> Option<&Path> {
        self.log_path.as_deref()
    }

    /// Whether it has exited (and how), without waiting.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        let s = self.child.try_wait().ok().flatten();
        self.reaped |= s.is_some();
        s
    }

    /// Everything in the log file (stderr; stdout too unless collected
    /// as lines).
    pub fn log_text(&self) -> String {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        // Positioned reads: the child shares this file's offset.
        while let Ok(n) = self.log.read_at(&mut chunk, buf.len() as u64) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The next stdout line, waiting at most until `deadline` (`None` as
    /// well when stdout is not collected as lines).
    pub fn next_line(&self, deadline: Instant) -> Option<String> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines.as_ref()?.rx.recv_timeout(left).ok()
    }

    /// Every stdout line so far (when collected as lines).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.lines.as_ref().map_or_else(Vec::new, |l| {
            l.all.lock().unwrap_or_else(|e| e.into_inner()).clone()
        })
    }

    /// The command and what it printed, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}\n--- stdout\n{}\n--- stderr\n{}",
            self.name,
            self.stdout_lines().join("\n"),
            self.log_text()
        )
    }

    /// Sends `sig` to the process (not its group).
    pub fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
    }

    /// The process and its descendants (children first found in
    /// `/proc/*/stat`), the process first.
    pub fn tree(&self) -> Vec<u32> {
        tree(self.pid())
    }

    /// CPU time used so far by the live threads of the process tree.
    pub fn cpu_time(&self) -> CpuTime {
        self.tree()
            .into_iter()
            .map(tlslab_runtime::process_cpu)
            .fold(CpuTime::default(), |a, b| a + b)
    }

    /// Resident set size of the process tree (`VmRSS` summed), KiB.
    pub fn rss_kib(&self) -> u64 {
        self.tree().into_iter().map(rss_kib).sum()
    }

    /// Waits at most `limit` for it to exit by itself (SIGKILL to the
    /// group at the limit), then collects the rest of its output.
    pub fn wait(mut self, limit: Duration) -> Finished {
        let status = wait_timeout(&mut self.child, limit);
        self.reaped = true;
        if let Some(l) = self.lines.as_mut().and_then(|l| l.reader.take()) {
            let _ = l.join();
        }
        Finished {
            status,
            stdout: self.stdout_lines().join("\n"),
            stderr: self.log_text(),
        }
    }

    /// SIGTERM, then wait at most `limit` (SIGKILL after it).
    pub fn terminate(self, limit: Duration) -> Finished {
        self.signal(Signal::SIGTERM);
        self.wait(limit)
    }

    /// SIGKILL to the group, and reap.
    pub fn kill(self) -> Finished {
        self.kill_group(Signal::SIGKILL);
        self.wait(Duration::from_secs(5))
    }

    fn kill_group(&self, sig: Signal) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), sig);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.reaped || self.try_status().is_some() {
            return;
        }
        if self.graceful {
            self.kill_group(Signal::SIGTERM);
            if wait_timeout(&mut self.child, Duration::from_secs(5)).is_some() {
                return;
            }
        }
        self.kill_group(Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A process that has exited (or was killed).
#[derive(Debug)]
pub struct Finished {
    /// Exit status; `None` if it had to be killed at the time limit.
    pub status: Option<ExitStatus>,
    /// All of stdout (when collected as lines).
    pub stdout: String,
    /// Everything in the log file.
    pub stderr: String,
}

/// `root` and its descendants, from the parent ids in `/proc/*/stat`.
fn tree(root: u32) -> Vec<u32> {
    let mut children: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if let Some(ppid) = parent(&stat) {
            children.push((ppid, pid));
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(children.iter().filter(|(pp, _)| *pp == p).map(|(_, c)| *c));
        i += 1;
    }
    out
}

/// The parent id in a `/proc/PID/stat` line (after the command name,
/// which may hold spaces and parentheses).
fn parent(stat: &str) -> Option<u32> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `VmRSS` of `/proc/PID/status`, KiB (0 if gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn parent_is_read_after_odd_command_names() {
        assert_eq!(parent("42 (a (b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parent("garbage"), None);
    }

    #[test]
    fn a_peer_that_exits_at_start_is_reported_with_its_log() {
        let mut p = Proc::spawn(sh("echo bad config >&2; exit 3"), "peer", None).unwrap();
        let err = p
            .wait_port(
                SocketAddr::from(([127, 0, 0, 1], 1)),
                Duration::from_secs(5),
            )
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("peer exited at start") && msg.contains("bad config"),
            "{msg}"
        );
        assert!(!err.port_in_use());
    }

    #[test]
    fn a_peer_that_never_listens_times_out() {
        // Port 1 (tcpmux), which nothing here serves: a free ephemeral port
        // may be taken by a concurrent test within the 300 ms, and then
        // the wait succeeds (a flake seen once in three workspace runs).
        let port = 1;
        let mut p = Proc::spawn(sh("sleep 30"), "sleeper", None).unwrap();
        let t = Instant::now();
        let err = p
            .wait_port(
                SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_millis(300),
            )
            .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(3));
        assert!(err.to_string().contains("did not listen"), "{err}");
    }

    #[test]
    fn drop_kills_the_whole_group_and_the_tree_is_metered() {
        let p = Proc::spawn(sh("sleep 30 & while :; do :; done"), "busy", None).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let tree = p.tree();
        assert!(tree.len() >= 2, "{tree:?}");
        assert!(
            p.cpu_time().total() >= Duration::from_millis(50),
            "{:?}",
            p.cpu_time()
        );
        assert!(p.rss_kib() > 0);
        drop(p);
        std::thread::sleep(Duration::from_millis(100));
        for pid in &tree[1..] {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(
                state.is_empty() || state.contains(") Z"),
                "{pid} lives: {state}"
            );
        }
    }

    #[test]
    fn lines_are_collected_and_stderr_lands_in_the_file() {
        let p = Proc::spawn_lines(sh("echo one; echo two; echo oops >&2"), "talker").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(p.next_line(deadline).as_deref(), Some("one"));
        let f = p.wait(Duration::from_secs(5));
        assert!(f.status.unwrap().success());
        assert_eq!(f.stdout, "one\ntwo");
        assert_eq!(f.stderr.trim(), "oops");
    }

    #[test]
    fn a_busy_port_is_retried_on_a_new_one() {
        let mut seen = Vec::new();
        let got = start_on_free_port(3, |port| {
            seen.push(port);
            if seen.len() < 2 {
                Err(Error::NotListening {
                    name: "x".into(),
                    addr: SocketAddr::from(([127, 0, 0, 1], port)),
                    secs: 1,
                    log: "bind: Address already in use".into(),
                })
            } else {
                Ok(port)
            }
        })
        .unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(got, seen[1]);
    }

    #[test]
    fn pinning_restricts_the_peer() {
        let cpu = *tlslab_runtime::allowed_cpus().last().unwrap();
        let mut p = Proc::spawn(sh("sleep 30"), "pinned", None).unwrap();
        p.pin(&[cpu]).unwrap();
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        assert_eq!(list, cpu.to_string());
        assert!(p.pin(&[100_000]).is_err());
    }
}
