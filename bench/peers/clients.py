"""The load generators and how each one is asked for each mode.

Modes:
  full13  new TLS 1.3 connection per request, full handshake
  res12   new TLS 1.2 connection per request, resuming a session
  res13   new TLS 1.3 connection per request, resuming a session
  ka      keep-alive: many 4 KiB requests per TLS 1.3 connection
  h2ka    keep-alive HTTP/2: many 4 KiB requests per TLS 1.3 connection,
          STREAMS streams in flight on each (tlslab load --h2 -m, h2load -m)

`build(...)` returns a tool's argv for a mode, or a string saying why the
tool cannot do the mode; `tlslab_args` builds tlslab load's, sized by
("d", seconds) or ("n", count). What a tool claims it did is parsed from its
output by `claims`, and checked against the server's access log by the
harness. (`full12` exists for tlslab load only: the server section.)
"""

import json
import os
import re

from servers import GROUPS_OPENSSL, GROUPS_RUSTLS, SUITES_RUSTLS, TLS13_SUITE_OPENSSL

CLIENTS = 32  # concurrent connections of the closed-loop tools
STREAMS = 10  # HTTP/2 streams in flight per connection (h2ka)
TOOLS = ["tlslab-load", "h2load", "wrk", "httperf", "openssl-s_time"]

MODE_TEXT = {
    "full12": "full TLS 1.2 handshake",
    "full13": "full TLS 1.3 handshake",
    "res12": "resumed TLS 1.2 handshake",
    "res13": "resumed TLS 1.3 handshake",
    "ka": "keep-alive 4 KiB request",
    "h2ka": f"keep-alive HTTP/2 4 KiB request (-m {STREAMS})",
}


def mode_version(mode):
    return "1.2" if mode in ("full12", "res12") else "1.3"


def tlslab_args(env, mode, url, size, clients=CLIENTS, json_path=None, extra=()):
    a = [env.tlslab, "load", url, "--insecure", "--threads", "1", "--no-progress",
         "--suite", SUITES_RUSTLS, "--group", GROUPS_RUSTLS, "-c", str(clients),
         "--tls", mode_version(mode), "--timeout", "30s"]
    a += {"full12": ["--reuse", "0"], "full13": ["--reuse", "0"], "res12": ["--reuse", "100"],
          "res13": ["--reuse", "100"], "ka": ["--requests-per-conn", "0"],
          "h2ka": ["--requests-per-conn", "0", "--h2", "-m", str(STREAMS)]}[mode]
    a += ["-d", f"{size[1]}s"] if size[0] == "d" else ["-n", str(size[1])]
    if json_path:
        a += ["--json", json_path]
    return a + list(extra)


def build(env, tool, mode, url, port, seconds, rate_hint, json_path):
    """argv for `tool` in `mode`, running about `seconds`; or a reason why not.
    `rate_hint` is a request rate the tool can roughly sustain, used to size
    tools that take a count rather than a duration."""
    n = max(CLIENTS * 4, int(rate_hint * seconds))
    if tool == "tlslab-load":
        return tlslab_args(env, mode, url, ("d", seconds), json_path=json_path)
    if tool == "h2load" and mode == "h2ka":
        return [env.tools["h2load"], "-t", "1", "--tls13-ciphers", TLS13_SUITE_OPENSSL,
                "--groups", GROUPS_OPENSSL, "-c", str(CLIENTS), "-m", str(STREAMS),
                "-D", str(seconds), url]
    if mode == "h2ka" and tool != "tlslab-load":
        return f"{tool} does not speak HTTP/2"
    if tool == "h2load":
        base = [env.tools["h2load"], "--h1", "-t", "1",
                "--tls13-ciphers", TLS13_SUITE_OPENSSL, "--groups", GROUPS_OPENSSL]
        if mode == "full13":
            # h2load resumes sessions whenever a client reconnects, so the
            # only way to make it do full handshakes is one connection per
            # client: n clients, one request each (all opened at once).
            return base + ["-c", str(n), "-n", str(n), url]
        if mode in ("res12", "res13"):
            # 'Connection: close' makes the server close after each
            # response; h2load reconnects and offers its session. (h2load's
            # -D never ends in this mode, so the run is sized by -n.)
            return base + ["-c", str(CLIENTS), "-n", str(n), "-H", "Connection: close", url]
        return base + ["-c", str(CLIENTS), "-D", str(seconds), url]
    if tool == "wrk":
        base = [env.tools["wrk"], "-t", "1", "-c", str(CLIENTS), "-d", f"{seconds}s"]
        if mode == "ka":
            return base + [url]
        if mode in ("res12", "res13"):
            # Same trick as h2load: wrk reconnects and resumes.
            return base + ["-H", "Connection: close", url]
        return "wrk resumes its session on every reconnect; it has no way to force full handshakes"
    if tool == "httperf":
        base = [env.tools["httperf"], "--server", "127.0.0.1", "--port", str(port),
                "--uri", url.split(str(port), 1)[1], "--ssl", "--hog"]
        # httperf is open-loop: --rate sessions per second, and it always
        # spins on select(), so its CPU time equals its wall time. It is
        # driven at a rate near the server's capacity so that time is work.
        rate = max(50, int(rate_hint))
        if mode == "full13":
            return base + ["--ssl-no-reuse", "--num-conns", str(n), "--num-calls", "1", "--rate", str(rate)]
        if mode in ("res12", "res13"):
            return base + ["--num-conns", str(n), "--num-calls", "1", "--rate", str(rate)]
        calls = max(1, n // CLIENTS)
        return base + ["--num-conns", str(CLIENTS), "--num-calls", str(calls), "--rate", str(CLIENTS * 10)]
    if tool == "openssl-s_time":
        base = [env.tools["openssl"], "s_time", "-connect", f"127.0.0.1:{port}",
                "-www", url.split(str(port), 1)[1], "-time", str(seconds)]
        base += ["-tls1_2"] if mode == "res12" else ["-tls1_3", "-ciphersuites", TLS13_SUITE_OPENSSL]
        if mode == "full13":
            return base + ["-new"]
        if mode in ("res12", "res13"):
            return base + ["-reuse"]
        return "s_time makes one request per connection; it has no keep-alive mode"
    raise ValueError(tool)


def _num(s):
    return float(s.replace(",", ""))


def claims(tool, run, json_path):
    """What the tool says it did: requests done, and its own rate if any."""
    out = run.stdout + "\n" + run.stderr
    c = {"requests": None, "rate": None, "errors": None}
    if tool == "tlslab-load" and json_path and os.path.exists(json_path):
        with open(json_path) as f:
            j = json.load(f)
        c["requests"] = j["requests"]["completed"]
        c["errors"] = j["requests"]["errors"]
        c["rate"] = j["throughput"]["requests_per_s"]
        c["json"] = j
    elif tool == "h2load":
        m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
        if m:
            c["requests"] = int(m[4])
            c["errors"] = int(m[5]) + int(m[6])
        m = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out)
        if m:
            c["rate"] = float(m[1])
        for name in ("time for connect", "time to 1st byte"):
            m = re.search(name + r":\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
            if m:
                c[name] = {"min": _dur(m[1]), "max": _dur(m[2]), "mean": _dur(m[3]), "sd": _dur(m[4])}
    elif tool == "wrk":
        m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
        if m:
            c["requests"] = int(m[1])
        m = re.search(r"Requests/sec:\s+([\d.]+)", out)
        if m:
            c["rate"] = float(m[1])
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        c["errors"] = sum(int(x) for x in m.groups()) if m else 0
    elif tool == "httperf":
        m = re.search(r"Total: connections (\d+) requests (\d+) replies (\d+)", out)
        if m:
            c["requests"] = int(m[3])
        m = re.search(r"Request rate: ([\d.]+) req/s", out)
        if m:
            c["rate"] = float(m[1])
        m = re.search(r"Errors: total (\d+)", out)
        if m:
            c["errors"] = int(m[1])
    elif tool == "openssl-s_time":
        m = re.findall(r"(\d+) connections in ([\d.]+) real seconds", out)
        if m:
            c["requests"] = int(m[-1][0])
            c["rate"] = int(m[-1][0]) / float(m[-1][1])
        c["errors"] = 0
    return c


def _dur(s):
    """h2load durations: 765us, 5.87ms, 1.2s -> microseconds."""
    m = re.match(r"([\d.]+)(us|ms|s)$", s)
    if not m:
        return None
    return float(m[1]) * {"us": 1, "ms": 1e3, "s": 1e6}[m[2]]
