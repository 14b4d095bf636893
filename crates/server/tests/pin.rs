//! Pinning the runtime's threads (its own test binary, so no other server's
//! threads share the process).

mod common;

use common::*;
use nix::sched::{CpuSet, sched_getaffinity};
use nix::unistd::Pid;
use tlslab_server::{Content, Server};

fn server_threads() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = entry.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "tlslab-server" {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        out.push((dir.display().to_string(), allowed));
    }
    out
}

#[test]
fn every_runtime_thread_is_pinned_to_the_given_cpus() {
    let allowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
    let cpu = (0..CpuSet::count())
        .rev()
        .find(|c| allowed.is_set(*c).unwrap())
        .unwrap();
    let g = generated();
    let mut cfg = plain_only(config(&g, Content::Empty));
    cfg.threads = 2;
    cfg.pin_cpus = Some(vec![cpu]);
    let server = Server::start(cfg).unwrap();
    let (status, _, _) = plain_get(server.http_addr().unwrap(), "/dyn?work=20000");
    assert_eq!(status, 200);
    // The two workers and the blocking-pool thread that ran /dyn's work.
    let threads = server_threads();
    assert_eq!(threads.len(), 3, "{threads:?}");
    for (t, list) in &threads {
        assert_eq!(list, &cpu.to_string(), "{t}");
    }
    assert!(server.cpu_time() >= std::time::Duration::from_millis(20));
    server.shutdown();
    assert!(server_threads().is_empty());
}
