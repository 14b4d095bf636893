//! Runs the load engine with idle TLS 1.3 keep-alive connections and exits
//! while they are open, so that a heap profiler reports what each of the
//! engine's connections holds as "leaked" at exit, by allocation site.
//!
//! Each client does what `tlslab load -c N --requests-per-conn 0
//! --think-time const:1h` does in `bench/peers.sh --sections conns`: a TLS
//! 1.3 handshake, one `GET` read to its end, then nothing. The server is
//! the one at `URL` (any certificate accepted), or else an in-process
//! `tlslab` server serving 4 KiB bodies, whose own allocations then show
//! in the profile too (under `tlslab_server` and `hyper::server` frames).
//! This binary uses the system allocator (the `tlslab` binary uses
//! mimalloc, which heap profilers do not see).
//!
//! ```text
//! cargo build --release -p tlslab-load --example idle_clients
//! target/release/tlslab serve --listen 127.0.0.1:8443 ... &   # or none
//! heaptrack target/release/examples/idle_clients 400 https://127.0.0.1:8443/4k.bin
//! heaptrack_print -f heaptrack.idle_clients.*.zst --print-leaks 1 | less
//! ```
//!
//! It prints how many requests completed; the bytes are the profiler's to
//! report (BENCHMARKS.md, "Memory per idle connection", has the table).

use std::str::FromStr;
use std::time::Duration;

use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_load::{LoadConfig, Target, ThinkTime, Trust};
use tlslab_server::{CertSource, Content, ServeConfig, Server, TlsSettings};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = match args.next().map(|a| a.parse()) {
        None => 400,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => usage(),
    };
    let url = args.next();
    let mut server = None;
    let (target, trust) = match url {
        Some(u) => match Target::from_str(&u) {
            Ok(t) => (t, Trust::Insecure),
            Err(e) => {
                eprintln!("{e}");
                usage()
            }
        },
        None => {
            let g = pki::generate(KeyType::EcdsaP256, &[]).expect("generate a certificate");
            let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
            tls.tickets = true;
            let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), Content::Empty, tls);
            cfg.threads = 1;
            let s = Server::start(cfg).expect("start the server");
            let addr = s.https_addr().expect("an HTTPS address");
            server = Some(s);
            let t = Target::from_str(&format!("https://localhost:{}/bytes/4096", addr.port()))
                .expect("a URL");
            (t, Trust::Roots(g.roots().expect("the generated CA")))
        }
    };
    let hold = Duration::from_secs(20);
    let mut cfg = LoadConfig::new(vec![target]);
    cfg.clients = n;
    cfg.duration = Some(hold);
    cfg.requests_per_conn = 0;
    cfg.versions = vec![Version::Tls13];
    cfg.trust = trust;
    cfg.think_time = ThinkTime::from_str("const:1h").expect("a think time");
    let engine = std::thread::spawn(move || tlslab_load::run(&cfg));
    // Every client has made its request and is thinking by now.
    std::thread::sleep(hold.mul_f64(0.7));
    if engine.is_finished() {
        match engine.join() {
            Ok(Err(e)) => eprintln!("the load run failed: {e}"),
            _ => eprintln!("the load run ended before the connections were held"),
        }
        std::process::exit(1);
    }
    let open = server.as_ref().map(|s| s.snapshot().open_connections);
    match open {
        Some(o) => println!("{n} clients idle, {o} connections open on the in-process server"),
        None => println!("{n} clients idle"),
    }
    // Exit with everything open: what the connections hold is "leaked".
    std::process::exit(0);
}

fn usage() -> ! {
    eprintln!("usage: idle_clients [CLIENTS] [URL]  (default 400 clients, an in-process server)");
    std::process::exit(2);
}
