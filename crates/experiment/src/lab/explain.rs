//! `tlslab lab --explain`: each cell's CPU per request, server-observed
//! and client-observed, split into the crypto meter's time, kernel time
//! and the remainder, with syscalls, writes and allocations per request.
//!
//! The three time parts add up to the CPU total by construction (the
//! remainder is what is left), so the split is checked against figures
//! that are not: the metered crypto must fit in the user time, no part may
//! exceed the total, and perf's task clock (the kernel's own count of the
//! threads' time on a CPU) must agree with the `/proc` total within 10 %.
//! A check that fails is a warning in the report, not a corrected number.

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_report::{columns, header};
use tlslab_schema::costs::{CellCosts, CostSplit, Explain, WindowCosts};

use super::{LabReport, Mode, find};
use crate::rig::Measured;

/// How far perf's task clock may be from the `/proc` CPU time before the
/// split is flagged: 10 %.
const TASK_CLOCK_TOLERANCE: f64 = 0.10;

/// Turns the probes on for this process (before any server or load
/// runtime starts, so that their threads are probed) and says what works.
pub(super) fn enable() -> Explain {
    let p = tlslab_runtime::costs::enable();
    Explain {
        syscalls_unavailable: p.syscalls_unavailable().map(str::to_string),
        allocations_unavailable: p.allocations_unavailable().map(str::to_string),
    }
}

/// The split of a measured cell: the server's over the whole run, per
/// request served; the client's over its window, per request completed.
/// `None` if the probes were not on when either side's threads started.
pub(super) fn cell_costs(m: &Measured) -> Option<CellCosts> {
    let run = &m.run;
    let server = run.costs?.to_schema(run.crypto.crypto_time());
    let client = m.report.client_cpu.costs.as_ref()?;
    Some(CellCosts {
        server: split(&server, run.served),
        client: split(client, m.report.requests.completed),
    })
}

/// Per-request figures of `w` over `requests`, with the checks that
/// failed as warnings. All NaN (and a warning) without a request.
pub(crate) fn split(w: &WindowCosts, requests: u64) -> CostSplit {
    let n = requests as f64;
    let per = |x: f64| if requests > 0 { x / n } else { f64::NAN };
    let us = |s: f64| per(s * 1e6);
    let (user, kernel, crypto) = (us(w.user_s), us(w.sys_s), us(w.crypto_s));
    let cpu = user + kernel;
    let task_clock = w.task_clock_s.map(us);
    let mut warnings = Vec::new();
    if requests == 0 {
        warnings.push("no requests: nothing to divide by".to_string());
    }
    for (part, x) in [("crypto", crypto), ("kernel", kernel)] {
        if x > cpu {
            warnings.push(format!(
                "the {part} part ({x:.1} µs/req) is larger than the CPU total ({cpu:.1} µs/req)"
            ));
        }
    }
    if crypto > user && crypto <= cpu {
        warnings.push(format!(
            "the crypto meter's {crypto:.1} µs/req exceeds the user time ({user:.1} µs/req): \
             its wall clock counted time off the CPU, or crypto on threads outside the set"
        ));
    }
    if let Some(tc) = task_clock
        && cpu > 0.0
        && ((tc - cpu) / cpu).abs() > TASK_CLOCK_TOLERANCE
    {
        warnings.push(format!(
            "perf's task clock ({tc:.1} µs/req) is {:.0} % off the /proc CPU time \
             ({cpu:.1} µs/req), more than {:.0} % (the scheduler bills a thread for the switch \
             to it, dearer from another process, and the task clock does not: was the machine \
             busy?)",
            (tc - cpu).abs() / cpu * 100.0,
            TASK_CLOCK_TOLERANCE * 100.0
        ));
    }
    CostSplit {
        requests,
        cpu_us: cpu,
        user_us: user,
        kernel_us: kernel,
        crypto_us: crypto,
        remainder_us: cpu - crypto - kernel,
        task_clock_us: task_clock,
        syscalls: w.syscalls.map(|c| per(c as f64)),
        writes: w.writes.map(|c| per(c as f64)),
        allocations: w.allocations.map(|c| per(c as f64)),
        allocated_bytes: w.allocated_bytes.map(|c| per(c as f64)),
        warnings,
    }
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("n/a".to_string(), |v| format!("{v:.decimals$}"))
}

fn row(cell: [&str; 3], side: &str, c: &CostSplit) -> Vec<String> {
    let mut r: Vec<String> = cell.iter().map(|s| s.to_string()).collect();
    r.push(side.into());
    r.extend([c.cpu_us, c.crypto_us, c.kernel_us, c.remainder_us].map(|x| format!("{x:.1}")));
    r.push(opt(c.task_clock_us, 1));
    r.push(opt(c.syscalls, 1));
    r.push(opt(c.writes, 2));
    r.push(opt(c.allocations, 1));
    r.push(opt(c.allocated_bytes, 0));
    r
}

/// The `--explain` section of the lab's text: a second table, what each
/// column measures, what was unavailable, and the checks that failed.
pub(super) fn render(r: &LabReport, s: &mut String) {
    use std::fmt::Write;
    let Some(ex) = &r.explain else {
        return;
    };
    let _ = writeln!(
        s,
        "\nWhere the CPU per request went (--explain), µs and counts per request. server: the \
         server worker's threads over the cell's whole run (warm-up included) ÷ requests served; \
         client: the load engine's threads over the cell's window ÷ requests completed.\n\
         CPU = crypto (the crypto meter) + kernel (system time) + remainder (user time outside \
         the meter: HTTP, TLS framing, the runtime, allocation). task clock: perf's count of the \
         same CPU time, a check on /proc's."
    );
    let mut rows = vec![header(
        "cell|version|key|side|CPU|crypto|kernel|remainder|task clock|syscalls|writes|allocs|alloc B",
    )];
    let mut warnings = Vec::new();
    for c in &r.cells {
        let Some(costs) = &c.costs else {
            continue;
        };
        let cell = [
            c.mode.label(),
            c.version.as_deref().unwrap_or("-"),
            c.key.as_deref().unwrap_or("-"),
        ];
        for (side, split) in [("server", &costs.server), ("client", &costs.client)] {
            rows.push(row(cell, side, split));
            warnings.extend(split.warnings.iter().map(|w| {
                format!(
                    "! {} {} {} {side}: {w}",
                    cell[0],
                    cell[1].trim_matches('-'),
                    cell[2].trim_matches('-')
                )
            }));
        }
    }
    s.push_str(&columns(
        "",
        &[-24, -8, -11, -6, 8, 8, 8, 10, 11, 9, 7, 7, 8],
        &rows,
    ));
    if let Some(why) = &ex.syscalls_unavailable {
        let _ = writeln!(s, "syscalls, writes, task clock: unavailable ({why})");
    }
    if let Some(why) = &ex.allocations_unavailable {
        let _ = writeln!(s, "allocations: unavailable ({why})");
    }
    let _ = writeln!(
        s,
        "writes: write, writev, sendto, sendmsg and sendmmsg calls. allocs: alloc, alloc_zeroed \
         and realloc calls and the bytes they asked for; a count, not a time (allocation time is \
         in the remainder, and in kernel time for page faults). QUIC cells: packet protection is \
         quinn's, outside the crypto meter, so it is in the remainder."
    );
    if let Some(ka) = find(
        &r.cells,
        Mode::TlsKeepAlive,
        Some(Version::Tls13),
        Some(KeyType::EcdsaP256.name()),
    )
    .and_then(|c| c.costs.as_ref())
    .and_then(|c| c.server.writes)
    {
        let _ = writeln!(
            s,
            "TLS 1.3 keep-alive: the server made {ka:.2} write syscalls per response."
        );
    }
    for w in warnings {
        let _ = writeln!(s, "{w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> WindowCosts {
        WindowCosts {
            user_s: 0.030,
            sys_s: 0.010,
            crypto_s: 0.012,
            task_clock_s: Some(0.0405),
            syscalls: Some(4_000),
            writes: Some(1_000),
            allocations: Some(25_000),
            allocated_bytes: Some(3_000_000),
        }
    }

    #[test]
    fn per_request_parts_add_up_to_the_cpu_time() {
        let c = split(&window(), 1_000);
        assert_eq!(c.requests, 1_000);
        assert!((c.cpu_us - 40.0).abs() < 1e-9, "{c:?}");
        assert!((c.user_us - 30.0).abs() < 1e-9, "{c:?}");
        assert!((c.kernel_us - 10.0).abs() < 1e-9, "{c:?}");
        assert!((c.crypto_us - 12.0).abs() < 1e-9, "{c:?}");
        assert!((c.remainder_us - 18.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.syscalls, Some(4.0));
        assert_eq!(c.writes, Some(1.0));
        assert_eq!(c.allocations, Some(25.0));
        assert_eq!(c.allocated_bytes, Some(3_000.0));
        assert!(c.warnings.is_empty(), "{c:?}");
        let unavailable = WindowCosts {
            syscalls: None,
            allocations: None,
            task_clock_s: None,
            ..window()
        };
        let c = split(&unavailable, 1_000);
        assert_eq!(
            (c.syscalls, c.allocations, c.task_clock_us),
            (None, None, None)
        );
        assert!(c.warnings.is_empty(), "{c:?}");
    }

    #[test]
    fn failed_checks_are_warnings_not_corrections() {
        // Crypto above the user time but within the total.
        let w = WindowCosts {
            crypto_s: 0.035,
            ..window()
        };
        let c = split(&w, 1_000);
        assert!((c.remainder_us + 5.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.warnings.len(), 1, "{c:?}");
        assert!(c.warnings[0].contains("exceeds the user time"), "{c:?}");
        // A part larger than the whole.
        let w = WindowCosts {
            crypto_s: 0.050,
            ..window()
        };
        let c = split(&w, 1_000);
        assert!(
            c.warnings[0].contains("crypto part (50.0 µs/req) is larger than the CPU total"),
            "{c:?}"
        );
        // The task clock 20 % off the /proc figure.
        let w = WindowCosts {
            task_clock_s: Some(0.048),
            ..window()
        };
        let c = split(&w, 1_000);
        assert!(c.warnings[0].contains("20 % off"), "{c:?}");
        // Within 10 %: no warning.
        let w = WindowCosts {
            task_clock_s: Some(0.0372),
            ..window()
        };
        assert!(split(&w, 1_000).warnings.is_empty());
    }

    #[test]
    fn no_request_is_a_warning_and_no_number() {
        let c = split(&window(), 0);
        assert!(c.cpu_us.is_nan() && c.syscalls.is_some_and(f64::is_nan));
        assert_eq!(c.warnings, ["no requests: nothing to divide by"]);
    }
}
