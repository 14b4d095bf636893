//! Reading captures and key logs with the field's tools (issue 35): the
//! frames and bytes tshark reads from a `path --pcap` capture, the labels
//! of an NSS key log, and the HTTP request paths tshark shows once a key
//! log decrypts a TLS or QUIC capture (tests/observe.rs,
//! tests/path_pcap.rs, tests/path_pcap_engines.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// The TLS 1.3 secrets a key log must hold for tshark to decrypt a TLS
/// 1.3 or QUIC connection's handshake and traffic.
pub const TLS13: [&str; 4] = [
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
];

/// The labels of a key log's lines, and the client randoms they name;
/// panics on a line that is not an NSS key log line.
pub fn labels(keylog: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let text = std::fs::read_to_string(keylog).unwrap_or_else(|e| panic!("{keylog:?}: {e}"));
    let (mut labels, mut randoms) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 3, "not an NSS key log line: {line:?}");
        assert_eq!(f[1].len(), 64, "a client random is 32 bytes: {line:?}");
        assert!(f[2].len() >= 64, "a secret is at least 32 bytes: {line:?}");
        labels.insert(f[0].to_string());
        randoms.insert(f[1].to_string());
    }
    (labels, randoms)
}

/// What tshark reads of one interface of a capture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Frames.
    pub frames: u64,
    /// Their bytes (`frame.len`: the IP packet, LINKTYPE_RAW).
    pub bytes: u64,
    /// Frames whose comment marks a drop.
    pub drops: u64,
    /// Frames tshark decoded as IPv4.
    pub ipv4: u64,
}

/// Per interface id (0 up, 1 down), what `tshark -r` reads of `files`.
pub fn counts(files: &[String]) -> BTreeMap<u32, Counts> {
    let mut per = BTreeMap::new();
    for f in files {
        let out = Command::new(super::tool("tshark"))
            .args(["-r", f, "-T", "fields", "-E", "separator=|"])
            .args(["-e", "frame.interface_id", "-e", "frame.len"])
            .args(["-e", "ip.version", "-e", "frame.comment"])
            .output()
            .expect("run tshark");
        assert!(
            out.status.success(),
            "tshark -r {f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: Vec<&str> = line.split('|').collect();
            assert_eq!(v.len(), 4, "{line}");
            let e: &mut Counts = per.entry(v[0].parse().unwrap()).or_default();
            e.frames += 1;
            e.bytes += v[1].parse::<u64>().unwrap();
            e.drops += u64::from(v[3].contains(tlslab_path::DROP_COMMENT));
            // An ICMP error quotes an inner IP header: "4,4".
            e.ipv4 += u64::from(v[2].starts_with('4'));
        }
    }
    per
}

/// Both interfaces added together.
pub fn total(files: &[String]) -> Counts {
    counts(files)
        .values()
        .fold(Counts::default(), |a, c| Counts {
            frames: a.frames + c.frames,
            bytes: a.bytes + c.bytes,
            drops: a.drops + c.drops,
            ipv4: a.ipv4 + c.ipv4,
        })
}

/// `tshark -r PCAP -o tls.keylog_file:KEYS ARGS`, its stdout.
pub fn decrypted(pcap: &Path, keys: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(super::tool("tshark"));
    cmd.args(["-r", pcap.to_str().unwrap(), "-o"])
        .arg(format!("tls.keylog_file:{}", keys.display()))
        .args(args);
    super::expect_ok(&super::run(cmd, LIMIT))
}

/// The request URIs of the HTTP/1.1 requests tshark decrypts (`extra`:
/// e.g. `-d tcp.port==8443,tls` for a port tshark does not take for TLS).
pub fn http1_uris(pcap: &Path, keys: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = extra.to_vec();
    args.extend([
        "-Y",
        "http.request",
        "-T",
        "fields",
        "-e",
        "http.request.uri",
    ]);
    decrypted(pcap, keys, &args)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Decodes QPACK header blocks with pylsqpack (which aioquic installs):
/// tshark prints every HTTP/3 frame payload of a packet with a HEADERS
/// frame (hex); each is tried as a header block (a static-table-only
/// block decodes alone) and the `:path` values found are printed.
const QPACK_SCRIPT: &str = r#"
import sys
from pylsqpack import Decoder
for tok in sys.stdin.read().split():
    try:
        _, headers = Decoder(4096, 16).feed_header(0, bytes.fromhex(tok.replace(":", "")))
    except Exception:
        continue
    for k, v in headers:
        if k == b":path":
            print(v.decode())
"#;

/// The `:path` of the HTTP/3 requests tshark decrypts: the payloads of
/// its HEADERS frames (type 1), decoded with pylsqpack, since Wireshark
/// 4.0 (Debian 12) does not decode QPACK. Wireshark 4.0 dissects the
/// HTTP/3 frames of the first QUIC connection of a capture only.
pub fn h3_paths(pcap: &Path, keys: &Path) -> Vec<String> {
    let blocks = decrypted(
        pcap,
        keys,
        &[
            "-Y",
            "http3.frame_type == 1",
            "-T",
            "fields",
            "-e",
            "http3.frame_payload",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator= ",
        ],
    );
    let mut py = Command::new("python3");
    py.args(["-c", QPACK_SCRIPT]);
    let out = super::run_with_input(py, blocks.as_bytes(), LIMIT);
    super::expect_ok(&out).lines().map(str::to_string).collect()
}
