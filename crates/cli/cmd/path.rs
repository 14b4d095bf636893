//! `tlslab path`: a packet-level WAN path between a server command and a
//! client command, each in a network namespace of its own (crates/path).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tlslab_path::{Path, PathConfig, PathHandle};

use crate::args::tools::PathArgs;
use crate::usage::usage;

/// The flags as one path configuration (a usage error if any is bad).
pub fn config(a: &PathArgs) -> anyhow::Result<PathConfig> {
    let mut c = PathConfig {
        seed: a.seed,
        cpus: a.cpus.clone(),
        ..PathConfig::default()
    };
    c.pcap.file.clone_from(&a.pcap);
    let mut set = |k: &str, v: &str| c.set(k, v).map_err(|e| usage(format!("--{k}: {e}")));
    set("delay", &a.delay)?;
    set("jitter", &a.jitter)?;
    set("reorder", if a.reorder { "on" } else { "off" })?;
    set("queue", &a.queue)?;
    set("loss", &a.loss)?;
    if let Some(ge) = &a.ge {
        set("ge", ge)?;
    }
    if let Some(cc) = &a.cc {
        set("cc", cc)?;
    }
    if let Some(r) = &a.rate {
        set("rate", r)?;
    }
    if let Some(t) = &a.uplink_trace {
        set("up.trace", &t.to_string_lossy())?;
    }
    if let Some(t) = &a.downlink_trace {
        set("down.trace", &t.to_string_lossy())?;
    }
    set("pcap-size", &a.pcap_size)?;
    set("pcap-files", &a.pcap_files.to_string())?;
    for (side, spec) in [("up", &a.up), ("down", &a.down)] {
        for part in spec
            .iter()
            .flat_map(|s| s.split(','))
            .filter(|p| !p.is_empty())
        {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| usage(format!("--{side} {part:?}: write key=value")))?;
            c.set(&format!("{side}.{}", k.trim()), v.trim())
                .map_err(|e| usage(format!("--{side}: {e}")))?;
        }
    }
    c.validate().map_err(usage)?;
    Ok(c)
}

/// Splits `SERVER ::: CLIENT`.
fn split_commands(cmd: &[String]) -> anyhow::Result<Option<(Vec<String>, Vec<String>)>> {
    if cmd.is_empty() {
        return Ok(None);
    }
    let Some(i) = cmd.iter().position(|a| a == ":::") else {
        return Err(usage(
            "separate the server and the client command with :::, e.g. \
             tlslab path --delay 25ms -- tlslab serve ... ::: tlslab load ...",
        ));
    };
    let (srv, cli) = (cmd[..i].to_vec(), cmd[i + 1..].to_vec());
    if srv.is_empty() || cli.is_empty() {
        return Err(usage(
            "both the server command and the client command are needed around :::",
        ));
    }
    Ok(Some((srv, cli)))
}

/// Children that are ended on every way out (SIGTERM, then SIGKILL).
struct Children(Vec<(String, Child)>);

impl Children {
    fn end(&mut self) {
        for (_, c) in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (what, c) in &mut self.0 {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if matches!(c.try_wait(), Ok(None)) {
                eprintln!("tlslab path: the {what} did not stop on SIGTERM within 5 s; killing it");
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.end();
    }
}

/// Returns true if and only if util-linux's `setpriv` runs here.
fn have_setpriv() -> bool {
    Command::new("setpriv")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts `argv` inside namespace `ns`. With `setpriv`, the command gets
/// SIGKILL when this process dies (`--pdeathsig`, PR_SET_PDEATHSIG), so a
/// `kill -9` of `tlslab path` does not leave it running (the crate
/// forbids the unsafe `pre_exec` that would set it directly; `ip netns
/// exec` and `setpriv` each exec the next, so the flag lands on the
/// command itself). Its own children are ended by `--cleanup` (and the
/// next path's start), which kills every process left in a stale
/// namespace.
fn spawn(ns: &str, argv: &[String], pdeathsig: bool) -> anyhow::Result<Child> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]);
    if pdeathsig {
        cmd.args(["setpriv", "--pdeathsig", "KILL", "--"]);
    }
    cmd.args(argv)
        .env("TLSLAB_PATH_SERVER", tlslab_path::SERVER_IP.to_string())
        .env("TLSLAB_PATH_CLIENT", tlslab_path::CLIENT_IP.to_string())
        .spawn()
        .with_context(|| format!("cannot start `{}` (via ip netns exec)", argv.join(" ")))
}

/// Waits until the server accepts TCP on its own address (from a thread
/// inside the server namespace, so the check does not cross the path).
fn wait_ready(
    h: &PathHandle,
    port: u16,
    limit: Duration,
    server: &mut Child,
) -> anyhow::Result<()> {
    let h = h.clone();
    let addr = SocketAddr::new(h.server_ip(), port);
    let deadline = Instant::now() + limit;
    loop {
        let h2 = h.clone();
        let up = std::thread::spawn(move || {
            h2.enter_server().is_ok()
                && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })
        .join()
        .unwrap_or(false);
        if up {
            return Ok(());
        }
        if let Ok(Some(st)) = server.try_wait() {
            anyhow::bail!("the server command exited ({st}) before accepting on {addr}");
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the server did not accept on {addr} within {limit:?} (--ready-timeout); \
                 is it listening on 0.0.0.0 or {} at port {port}?",
                h.server_ip()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn describe(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => st.to_string(),
    }
}

/// Runs `tlslab path`.
pub fn run(a: PathArgs) -> anyhow::Result<ExitCode> {
    if a.cleanup {
        if !tlslab_path::privileged() {
            return Err(tlslab_path::Error::NotPermitted.into());
        }
        let gone = tlslab_path::cleanup_stale()?;
        if gone.is_empty() {
            println!("path: no stale namespaces");
        }
        for r in gone {
            println!(
                "path: removed the stale namespace {}{}",
                r.name,
                if r.killed.is_empty() {
                    String::new()
                } else {
                    format!(
                        " after killing the {} processes still in it ({})",
                        r.killed.len(),
                        r.killed
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                }
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = config(&a)?;
    let commands = split_commands(&a.command)?;

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("tlslab-path-signal".into())
            .spawn(move || {
                if tlslab_server::wait_for_signal().is_ok() {
                    stop.store(true, Ordering::SeqCst);
                }
            })
            .context("cannot start the signal waiter")?;
    }

    let path = Path::start(&cfg)?;
    let h = path.handle();
    eprintln!(
        "path: server {} in namespace {}, client {} in namespace {}; RTT {:?}; TCP congestion \
         control {}\n  up: {}\n  down: {}",
        h.server_ip(),
        h.server_netns(),
        h.client_ip(),
        h.client_netns(),
        cfg.rtt(),
        cfg.congestion_control
            .as_deref()
            .unwrap_or("the kernel's default"),
        cfg.up,
        cfg.down
    );
    let mut code = ExitCode::SUCCESS;
    match commands {
        None => {
            eprintln!("path: up; Ctrl-C (SIGINT) or SIGTERM removes it");
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Some((srv, cli)) => {
            let pdeathsig = have_setpriv();
            if !pdeathsig {
                eprintln!(
                    "path: WARNING: setpriv (util-linux) is missing: if tlslab path is killed \
                     with SIGKILL its commands keep running; `tlslab path --cleanup` ends them"
                );
            }
            let mut kids = Children(Vec::new());
            kids.0
                .push(("server".into(), spawn(h.server_netns(), &srv, pdeathsig)?));
            if let Some(port) = a.ready_port {
                wait_ready(&h, port, a.ready_timeout, &mut kids.0[0].1)?;
            }
            kids.0
                .push(("client".into(), spawn(h.client_netns(), &cli, pdeathsig)?));
            loop {
                if stop.load(Ordering::SeqCst) {
                    eprintln!("path: interrupted; stopping the commands");
                    code = ExitCode::from(1);
                    break;
                }
                if let Some(st) = kids.0[1].1.try_wait()? {
                    if !st.success() {
                        eprintln!("path: the client command ended with {}", describe(st));
                        code = ExitCode::from(st.code().map_or(1, |c| c.clamp(1, 255) as u8));
                    }
                    break;
                }
                if let Some(st) = kids.0[0].1.try_wait()? {
                    eprintln!(
                        "path: the server command ended with {} before the client",
                        describe(st)
                    );
                    code = ExitCode::from(1);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            kids.end();
        }
    }
    let report = path.stop()?;
    {
        let mut err = std::io::stderr().lock();
        writeln!(err, "{report}")?;
    }
    if let Some(f) = &a.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(f, text + "\n").with_context(|| format!("writing {}", f.display()))?;
    }
    Ok(code)
}
