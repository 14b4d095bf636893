//! quic-floor: server CPU per full handshake for TCP + TLS 1.3 (tokio-rustls),
//! quinn and s2n-quic, on one certificate, one key-exchange group and one
//! single-threaded tokio runtime per process. See README.md.

mod common;
mod quic;
mod tcp;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use common::{Group, Params, Suite};

const USAGE: &str = "\
usage:
  quic-floor gen-cert --dir DIR
      write a self-signed ECDSA P-256 certificate for \"localhost\" into DIR
  quic-floor server --engine tcp|quinn|s2n|s2n-tls --port PORT --cert-dir DIR
                    [--group G] [--suite S] [--warmup W] --handshakes N [--new-tokens K]
      serve on 127.0.0.1:PORT (TCP or UDP); close each connection right after
      its handshake; after W handshakes open a CPU window, after W+N print
      `engine=.. handshakes=N cpu_us=.. us_per_handshake=..` and exit 0.
      s2n = s2n-quic with its rustls provider, s2n-tls = with s2n-tls.
      --new-tokens K (quinn only): NEW_TOKEN frames per connection (quinn's
      default: 2).
  quic-floor client --engine tcp|quinn --port PORT --cert-dir DIR
                    [--group G] [--suite S] --connections N [--concurrency C]
      N full handshakes (fresh connection, no resumption), C at a time; the
      quinn client drives both QUIC servers. Exit 1 if any handshake failed.
  --group x25519|x25519mlkem768 (default x25519) and --suite aes256gcm|aes128gcm
  (default aes256gcm, rustls' first choice) must match on server and client:
  each side offers only that group and suite.
defaults: --warmup 0, --concurrency 1";

struct Args {
    cmd: String,
    engine: Option<String>,
    port: Option<u16>,
    dir: Option<PathBuf>,
    params: Params,
    warmup: u64,
    count: Option<u64>,
    concurrency: u64,
    new_tokens: Option<u32>,
}

fn parse(argv: &[String]) -> Result<Args> {
    let Some(cmd) = argv.first() else {
        bail!("missing subcommand")
    };
    let mut a = Args {
        cmd: cmd.clone(),
        engine: None,
        port: None,
        dir: None,
        params: Params {
            group: Group::X25519,
            suite: Suite::Aes256Gcm,
        },
        warmup: 0,
        count: None,
        concurrency: 1,
        new_tokens: None,
    };
    let mut it = argv[1..].iter();
    while let Some(flag) = it.next() {
        let Some(v) = it.next() else {
            bail!("{flag} needs a value")
        };
        let num = |v: &str| -> Result<u64> {
            v.parse()
                .map_err(|_| anyhow::anyhow!("{flag} wants a number, got {v:?}"))
        };
        match flag.as_str() {
            "--engine" => a.engine = Some(v.clone()),
            "--port" => {
                a.port = Some(
                    v.parse()
                        .map_err(|_| anyhow::anyhow!("--port wants 1..65535, got {v:?}"))?,
                )
            }
            "--dir" | "--cert-dir" => a.dir = Some(PathBuf::from(v)),
            "--group" => a.params.group = Group::parse(v)?,
            "--suite" => a.params.suite = Suite::parse(v)?,
            "--warmup" => a.warmup = num(v)?,
            "--handshakes" | "--connections" => a.count = Some(num(v)?),
            "--concurrency" => a.concurrency = num(v)?.max(1),
            "--new-tokens" => {
                a.new_tokens = Some(
                    v.parse()
                        .map_err(|_| anyhow::anyhow!("--new-tokens wants a count, got {v:?}"))?,
                )
            }
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

fn need<T: Clone>(v: &Option<T>, flag: &str) -> Result<T> {
    v.clone()
        .ok_or_else(|| anyhow::anyhow!("{flag} is required"))
}

/// Everything checked before any work; an error here is a usage error (exit 2).
enum Job {
    GenCert(PathBuf),
    Server(String, u16, PathBuf, Params, u64, u64, Option<u32>),
    Client(String, u16, PathBuf, Params, u64, u64),
}

fn job(a: &Args) -> Result<Job> {
    match a.cmd.as_str() {
        "gen-cert" => Ok(Job::GenCert(need(&a.dir, "--dir")?)),
        "server" => {
            let engine = need(&a.engine, "--engine")?;
            if !["tcp", "quinn", "s2n", "s2n-tls"].contains(&engine.as_str()) {
                bail!("--engine {engine:?}: use tcp, quinn, s2n or s2n-tls");
            }
            let n = need(&a.count, "--handshakes")?;
            if n == 0 {
                bail!("--handshakes must be at least 1");
            }
            Ok(Job::Server(
                engine,
                need(&a.port, "--port")?,
                need(&a.dir, "--cert-dir")?,
                a.params,
                a.warmup,
                n,
                a.new_tokens,
            ))
        }
        "client" => {
            let engine = need(&a.engine, "--engine")?;
            if !["tcp", "quinn", "quic"].contains(&engine.as_str()) {
                bail!("--engine {engine:?}: the client is tcp or quinn");
            }
            Ok(Job::Client(
                engine,
                need(&a.port, "--port")?,
                need(&a.dir, "--cert-dir")?,
                a.params,
                need(&a.count, "--connections")?,
                a.concurrency,
            ))
        }
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            std::process::exit(0);
        }
        other => bail!("unknown subcommand {other:?}"),
    }
}

async fn run(job: Job) -> Result<()> {
    match job {
        Job::GenCert(dir) => common::gen_cert(&dir),
        Job::Server(engine, port, dir, p, warmup, n, new_tokens) => {
            let id = common::load_identity(&dir)?;
            match engine.as_str() {
                "tcp" => tcp::serve(port, &id, p, common::Window::new("tcp", p, warmup, n)).await,
                "quinn" => {
                    let w = common::Window::new("quinn", p, warmup, n);
                    quic::serve_quinn(port, &id, p, new_tokens, w).await
                }
                "s2n" => {
                    let w = common::Window::new("s2n", p, warmup, n);
                    quic::serve_s2n(port, &id, p, quic::S2nTls::Rustls, w).await
                }
                _ => {
                    let w = common::Window::new("s2n-tls", p, warmup, n);
                    quic::serve_s2n(port, &id, p, quic::S2nTls::S2nTls, w).await
                }
            }
        }
        Job::Client(engine, port, dir, p, n, c) => {
            let id = common::load_identity(&dir)?;
            let t0 = std::time::Instant::now();
            let (ok, failed) = if engine == "tcp" {
                tcp::client(port, &id, p, n, c).await?
            } else {
                quic::client(port, &id, p, n, c).await?
            };
            let (u, s) = common::process_cpu();
            println!(
                "client engine={engine} group={} suite={} ok={ok} failed={failed} wall_s={:.3} client_cpu_us={}",
                p.group.name(),
                p.suite.name(),
                t0.elapsed().as_secs_f64(),
                u + s
            );
            if failed > 0 {
                bail!("{failed} of {n} handshakes failed");
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let job = match parse(&argv).and_then(|a| job(&a)) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: {e:#}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // One thread for every engine: the figure is CPU per handshake on one core.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(job)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
