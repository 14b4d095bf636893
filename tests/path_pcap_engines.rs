//! The capture of the packet-level path (`tlslab path --pcap`) from the
//! engines that run across one (issue 35): `pcap=FILE` in the `--path SPEC`
//! of `lab`, `probe` and `cluster` (one path, one capture of the whole
//! run), and `experiment run --pcap DIR` (a path per cell, a capture per
//! cell: `DIR/CELL.pcapng`). Each capture, read back with tshark, holds
//! exactly the packets the forwarder counted, and the engine's output
//! names it. The runs need root and tshark: `#[ignore]`, run by .ci/run
//! with `--ignored` (loud skips without them, failures under CI=true);
//! the usage checks run everywhere.
//!
//! Addresses: 10.201.0.1/2, inside the namespaces each run creates.

mod common;

use std::path::Path;
use std::time::Duration;

use common::netpath::root_tempdir;
use common::tshark::{Counts, counts, total};
use common::{args_with, assert_usage_error, num, run_tlslab, show};

const LIMIT: Duration = Duration::from_secs(300);

/// Root and tshark, or a loud skip.
fn tools(test: &str) -> Option<tempfile::TempDir> {
    let dir = root_tempdir(test)?;
    common::require("tshark").then_some(dir)
}

/// A path report (`tlslab path --json`'s `PathReport`, an engine's
/// `wan_path`): its capture is the file `file`, and the capture's frames
/// and bytes per direction are what the forwarder released and dropped
/// (tshark's count against the forwarder's; nothing is dropped on these
/// paths, so the bytes are the forwarded bytes).
fn assert_capture_is_the_forwarders(what: &str, r: &serde_json::Value, file: &Path) {
    let files = [file.display().to_string()];
    assert_eq!(r["pcap"]["files"], serde_json::json!(files), "{what}: {r}");
    assert_eq!(num(r, "pcap/missed"), 0.0, "{what}: {r}");
    assert_eq!(num(r, "pcap/not_kept"), 0.0, "{what}: {r}");
    let got = counts(&files);
    for (iface, d) in [(0, "up"), (1, "down")] {
        let c = got.get(&iface).copied().unwrap_or_default();
        let n = |k: &str| num(r, &format!("{d}/{k}")) as u64;
        let dropped = n("dropped_queue") + n("dropped_loss") + n("dropped_write");
        assert_eq!(dropped, 0, "{what} {d}: {r}");
        assert_eq!(c.frames, n("packets_forwarded"), "{what} {d} packets");
        assert_eq!(c.bytes, n("bytes_forwarded"), "{what} {d} bytes");
        assert!(c.frames > 0 && c.ipv4 == c.frames, "{what} {d}: {c:?}");
    }
    let t = total(&files);
    assert_eq!(t.frames, num(r, "pcap/packets") as u64, "{what}");
    assert_eq!(t.bytes, num(r, "pcap/bytes") as u64, "{what}");
}

/// The `pcap: N packets (B bytes` line of a text report, as numbers.
fn pcap_line(text: &str) -> Counts {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("pcap: "))
        .unwrap_or_else(|| panic!("no pcap: line in {text}"));
    let mut w = line.split(' ');
    let frames = w.next().unwrap().parse().unwrap();
    let bytes = w.nth(1).unwrap().trim_start_matches('(').parse().unwrap();
    Counts {
        frames,
        bytes,
        ..Counts::default()
    }
}

#[test]
#[ignore = "root, TUN devices, tshark; run by .ci/run with --ignored"]
fn probe_across_a_path_captures_it_with_pcap_in_the_spec() {
    let Some(dir) = tools("probe_across_a_path_captures_it_with_pcap_in_the_spec") else {
        return;
    };
    let pcap = dir.path().join("probe.pcapng");
    let db = dir.path().join("probe.sqlite");
    let spec = format!("delay=2ms,pcap={}", pcap.display());
    let line = "probe --path SPEC --rounds 2 --interval 200ms --db DB";
    let a = args_with(line, &[("SPEC", &spec), ("DB", db.to_str().unwrap())]);
    let out = run_tlslab(&a, LIMIT);
    assert!(out.status.success(), "{}", show(&out));
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // The first line says where the capture goes; the report what it holds.
    assert!(
        err.contains(&format!("capturing every packet to {}", pcap.display())),
        "{err}"
    );
    let said = pcap_line(&text);
    let t = total(&[pcap.display().to_string()]);
    assert_eq!((t.frames, t.bytes), (said.frames, said.bytes), "{text}");
    // The forwarder's own lines: "forwarded N packets (B bytes) of M in".
    let (mut frames, mut bytes) = (0, 0);
    for l in text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("forwarded "))
    {
        let w: Vec<&str> = l.split(' ').collect();
        frames += w[0].parse::<u64>().unwrap();
        bytes += w[2].trim_start_matches('(').parse::<u64>().unwrap();
    }
    assert_eq!((t.frames, t.bytes), (frames, bytes), "{text}");
    assert!(t.frames > 20, "{text}");
}

#[test]
#[ignore = "root, TUN devices, tshark; run by .ci/run with --ignored"]
fn lab_and_cluster_across_a_path_capture_the_whole_run() {
    let Some(dir) = tools("lab_and_cluster_across_a_path_capture_the_whole_run") else {
        return;
    };
    for (name, line) in [
        ("lab", "lab --quick --cell 1s -c 2 --path SPEC --json J"),
        (
            "cluster",
            "cluster --quick --cell 600ms -c 1 --node-count 2 --mechanism tls13-ticket \
             --reuse 80 --policy session --path SPEC --json J",
        ),
    ] {
        let pcap = dir.path().join(format!("{name}.pcapng"));
        let json = dir.path().join(format!("{name}.json"));
        let spec = format!("delay=1ms,pcap={}", pcap.display());
        let a = args_with(line, &[("SPEC", &spec), ("J", json.to_str().unwrap())]);
        let out = run_tlslab(&a, LIMIT);
        assert!(out.status.success(), "{name}: {}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("one capture of every cell"), "{name}: {err}");
        let v = common::load_json(&json);
        let r = &v["wan_path"];
        assert_capture_is_the_forwarders(name, r, &pcap);
        // The text report gives the same counts.
        let said = pcap_line(&text);
        assert_eq!(said.frames, num(r, "pcap/packets") as u64, "{name}: {text}");
        assert_eq!(said.bytes, num(r, "pcap/bytes") as u64, "{name}: {text}");
        eprintln!("{name}: {} packets captured", said.frames);
    }
}

#[test]
#[ignore = "root, TUN devices, tshark; run by .ci/run with --ignored"]
fn experiment_pcap_writes_one_capture_per_packet_path_cell() {
    let Some(dir) = tools("experiment_pcap_writes_one_capture_per_packet_path_cell") else {
        return;
    };
    let caps = dir.path().join("caps");
    let out_dir = dir.path().join("s3");
    let line = "experiment run seed003-table2 --quick --path-kind packet --no-progress --pcap CAPS \
                --out OUT";
    let a = args_with(
        line,
        &[
            ("CAPS", caps.to_str().unwrap()),
            ("OUT", out_dir.to_str().unwrap()),
        ],
    );
    let out = run_tlslab(&a, LIMIT);
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let doc = common::load_json(&out_dir.join("results.json"));
    let cells = doc["cells"].as_array().unwrap();
    // 2 RTTs × (2 TLS versions and HTTP/3), each on a path of its own:
    // six captures.
    assert_eq!(cells.len(), 6, "{doc}");
    let mut files = Vec::new();
    for c in cells {
        let id = c["id"].as_str().unwrap();
        let file = caps.join(format!("{id}.pcapng"));
        let r = &doc["engine_report"]["probe"][id]["packet_path"];
        assert_capture_is_the_forwarders(id, r, &file);
        // Its line in the progress names the cell and the file.
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("{id}: pcap: "))
                    && l.contains(&*file.to_string_lossy())),
            "{id}: {err}"
        );
        files.push(file);
    }
    let mut in_dir: Vec<_> = std::fs::read_dir(&caps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    in_dir.sort();
    files.sort();
    assert_eq!(in_dir, files, "one file per cell, nothing else");
}

#[test]
fn pcap_without_a_packet_path_is_a_usage_error() {
    let dir = common::tempdir();
    let caps = dir.path().join("caps");
    let out = dir.path().join("out");
    let caps_s = caps.to_str().unwrap();
    let out_s = out.to_str().unwrap();
    // seed003-table2 over the relay (the default) and a study with no
    // round trips have no packets to capture.
    for study in ["seed003-table2", "seed000-reuse"] {
        assert_usage_error(
            &[
                "experiment",
                "run",
                study,
                "--quick",
                "--pcap",
                caps_s,
                "--out",
                out_s,
            ],
            "--pcap captures the packet-level path",
            LIMIT,
        );
    }
    // pcap-size and pcap-files without pcap=FILE in a spec.
    for cmd in ["lab", "cluster"] {
        assert_usage_error(
            &[cmd, "--path", "delay=1ms,pcap-size=2MB"],
            "need a capture file",
            LIMIT,
        );
    }
    assert!(
        !caps.exists() && !out.exists(),
        "no work before the usage error"
    );
}
