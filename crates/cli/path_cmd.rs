//! `tlslab path`: a packet-level WAN path between a server command and a
//! client command, each in a network namespace of its own (crates/path).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tlslab_path::{Path, PathConfig, PathHandle};

use crate::config::usage;

/// `tlslab path`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab path --delay 25ms --rate 10mbit --ready-port 8443 -- \\\n      \
    tlslab serve --https 0.0.0.0:8443 --cert c.pem --key k.pem ::: \\\n      \
    sh -c 'curl -k https://$TLSLAB_PATH_SERVER:8443/'\n  \
    tlslab path --delay 10ms        (no command: hold the path until Ctrl-C; enter it with\n                                   \
    ip netns exec NAME ..., the names are printed)\n  \
    tlslab path --cleanup           (remove namespaces left by runs that died)\n\n\
    The server command runs in the server namespace (10.201.0.1), then the client command in \
    the client namespace (10.201.0.2); both see TLSLAB_PATH_SERVER and TLSLAB_PATH_CLIENT. \
    The only link between them is a TUN device in each namespace (MTU 1500) and tlslab's \
    forwarder, so the kernel's own TCP (connect, slow start with initcwnd 10, loss recovery) \
    and UDP run over the emulated path. --delay is one way (RTT = up + down delay). A link \
    is a mahimahi delivery trace: one millisecond timestamp per 1504-byte delivery \
    opportunity, repeating; --rate generates a constant one. Per direction, a packet meets \
    loss, then the link's drop-tail queue, then the delay. When the client exits, the server \
    gets SIGTERM, the path is removed and its counters are printed on stderr. Needs root (or \
    CAP_NET_ADMIN and CAP_SYS_ADMIN); without it, use `tlslab relay` (unprivileged, TCP only, \
    delays whole flights rather than packets). Exit status: the client's, or 1.")]
pub struct PathArgs {
    /// One-way delay in each direction (RTT = 2 x this), e.g. 25ms, 500us.
    #[arg(long, default_value = "0ms", value_name = "DURATION")]
    pub delay: String,

    /// Each packet's delay varies uniformly within +/- this, without reordering (see --reorder).
    #[arg(long, default_value = "0ms", value_name = "DURATION")]
    pub jitter: String,

    /// With --jitter: let packets overtake each other (netem's behaviour).
    #[arg(long)]
    pub reorder: bool,

    /// Bottleneck rate in each direction, in tc's units (10mbit, 1gbit, 125kbps) [default: none].
    #[arg(long, value_name = "RATE", conflicts_with_all = ["uplink_trace", "downlink_trace"])]
    pub rate: Option<String>,

    /// The client → server link as a mahimahi trace file (ms timestamps, one per 1504-byte
    /// delivery opportunity).
    #[arg(long, value_name = "FILE")]
    pub uplink_trace: Option<PathBuf>,

    /// The server → client link as a mahimahi trace file.
    #[arg(long, value_name = "FILE")]
    pub downlink_trace: Option<PathBuf>,

    /// The bottleneck's drop-tail queue, in packets (100pkt) or bytes (64kB).
    #[arg(long, default_value = "1000pkt", value_name = "SIZE")]
    pub queue: String,

    /// Random loss in each direction, as 1% or 0.01.
    #[arg(long, default_value = "0%", value_name = "PERCENT")]
    pub loss: String,

    /// Gilbert-Elliott burst loss instead of --loss: p,r[,loss-in-bad[,loss-in-good]]
    /// (e.g. 1%,30%; bad defaults to 100%, good to 0%).
    #[arg(long, value_name = "P,R[,BAD[,GOOD]]", conflicts_with = "loss")]
    pub ge: Option<String>,

    /// Client → server overrides, as key=value pairs: delay=5ms,rate=1mbit,loss=2%,queue=50pkt,
    /// trace=FILE,jitter=1ms,ge=1%/30% (applied after the flags above).
    #[arg(long, value_name = "SPEC")]
    pub up: Option<String>,

    /// Server → client overrides (as --up).
    #[arg(long, value_name = "SPEC")]
    pub down: Option<String>,

    /// TCP congestion control in both namespaces: one of net.ipv4.tcp_allowed_congestion_control
    /// (e.g. reno, bbr) [default: the kernel's].
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,

    /// Seed of the loss and jitter draws, so runs repeat.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Pin the two forwarder threads to these CPUs (comma-separated) [default: not pinned].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,

    /// Start the client only once the server accepts TCP on 10.201.0.1:PORT.
    #[arg(long, value_name = "PORT")]
    pub ready_port: Option<u16>,

    /// How long to wait for --ready-port.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub ready_timeout: Duration,

    /// Also write the forwarder's counters as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Remove the namespaces of runs that died (kill -9, power loss) and exit.
    #[arg(long)]
    pub cleanup: bool,

    /// SERVER_CMD ::: CLIENT_CMD, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The flags as one path configuration (a usage error if any is bad).
pub fn config(a: &PathArgs) -> anyhow::Result<PathConfig> {
    let mut c = PathConfig {
        seed: a.seed,
        cpus: a.cpus.clone(),
        ..PathConfig::default()
    };
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

fn spawn(ns: &str, argv: &[String]) -> anyhow::Result<Child> {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(argv)
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
        for n in gone {
            println!("path: removed the stale namespace {n}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = config(&a)?;
    let commands = split_commands(&a.command)?;
    if let Some(f) = &a.json
        && let Some(dir) = f.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(usage(format!(
            "--json: the directory {} does not exist",
            dir.display()
        )));
    }

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
            let mut kids = Children(Vec::new());
            kids.0
                .push(("server".into(), spawn(h.server_netns(), &srv)?));
            if let Some(port) = a.ready_port {
                wait_ready(&h, port, a.ready_timeout, &mut kids.0[0].1)?;
            }
            kids.0
                .push(("client".into(), spawn(h.client_netns(), &cli)?));
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
