"""The three servers under test, configured alike: the same certificate,
document root, TLS versions, cipher suites, groups, session cache and
tickets, one worker (process or thread pool) pinned to one core, and an
access log that records, per request, whether the connection's handshake
was resumed, so the harness counts what really happened."""

import os
import re
import signal
import subprocess

from procs import BenchError, Daemon, free_port

# One suite and one group for every server and client, so all do the same
# cryptographic work: AES-128-GCM with SHA-256 (the TLS 1.3 mandatory suite;
# aws-lc's SHA-384 has no assembly path on AMD CPUs, which would tilt any
# comparison against the rustls side) and X25519 first, P-256 also offered
# because OpenSSL will not use a P-256 certificate in TLS 1.2 unless the
# client lists that curve.
TLS13_SUITE_OPENSSL = "TLS_AES_128_GCM_SHA256"
TLS12_SUITES_OPENSSL = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256"
GROUPS_OPENSSL = "X25519:prime256v1"
SUITES_RUSTLS = (
    "TLS13_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
)
GROUPS_RUSTLS = "x25519,secp256r1"


# nginx writes its access log in batches, as tlslab serve always does (64
# KiB or 100 ms): `buffer=64k flush=100ms`. Until 2026-11-29 it wrote one
# line per request with a `write` each, a syscall per keep-alive request
# that tlslab serve did not pay. Apache still writes each line: its
# BufferedLogs has no flush interval (see Apache.command).
BUFFERED_LOGS = ["--log-buffered"]


class Spec:
    """What a server instance is configured with."""

    def __init__(self, key="ecdsa", versions=("1.2", "1.3"), tickets=True,
                 cache_sessions=40000, log=True, max_conns=20000, threads=64, h2=False):
        self.key = key
        # HTTP/2 on (nginx only): ALPN h2 and http/1.1, and the access log
        # adds each request's connection serial and protocol.
        self.h2 = h2
        self.versions = tuple(versions)
        self.tickets = tickets
        self.cache_sessions = cache_sessions
        self.log = log
        self.max_conns = max_conns
        # Apache's thread pool. mpm_event keeps idle keep-alive connections
        # without a thread, but only about this many per process: beyond
        # that it closes them after the response.
        self.threads = threads

    def key_id(self):
        return (self.key, self.versions, self.tickets, self.cache_sessions, self.log, self.threads,
                self.h2)


class Record:
    """One access-log line, normalised across servers."""

    __slots__ = ("first", "reused", "proto", "status", "bytes", "t", "conn", "http")

    def __init__(self, first, reused, proto, status, nbytes, t, conn=None, http=None):
        self.conn = conn  # the server's connection serial, where it logs one
        self.http = http  # the HTTP protocol (HTTP/2.0, ...), where it logs one
        self.first = first
        self.reused = reused
        self.proto = proto
        self.status = status
        self.bytes = nbytes
        self.t = t


class Server:
    """A running server; subclasses write its configuration."""

    name = "?"

    def __init__(self, env, work, spec, cpu):
        self.env = env
        self.spec = spec
        self.cpu_arg = cpu
        self.port = free_port()
        self.dir = os.path.join(work, f"{self.name}-{spec.key}-{'_'.join(spec.versions)}-{self.port}")
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.access_log = os.path.join(self.dir, "access.log")
        open(self.access_log, "w").close()
        os.chmod(self.access_log, 0o666)
        self.chain, self.keyfile = env.certs[spec.key]
        self.root = env.docroot
        self.daemon = None
        self._offset = 0

    def url(self, path="/4k.bin"):
        return f"https://127.0.0.1:{self.port}{path}"

    def start(self):
        argv, env, sig = self.command()
        self.daemon = Daemon(self.name, argv, self.cpu_arg, self.port,
                             os.path.join(self.dir, "stdout.log"), env=env, stop_signal=sig)
        return self

    def stop(self):
        if self.daemon is not None:
            self.daemon.close()
            self.daemon = None

    @property
    def group(self):
        return self.daemon.group

    def mark(self):
        """Remembers where the access log ends now."""
        self._offset = os.path.getsize(self.access_log)

    def records_since_mark(self):
        with open(self.access_log, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        out = []
        for line in data[:end].decode(errors="replace").splitlines():
            r = self.parse(line)
            if r is not None:
                out.append(r)
        return out


def write_conf(env, peer, args, path):
    """Has `tlslab peers PEER-conf ARGS --out PATH` write a peer's config:
    tlslab-peers is the one place peer configs are written."""
    argv = [env.tlslab, "peers", f"{peer}-conf"] + [str(a) for a in args] + ["--out", path]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise BenchError(f"{' '.join(argv)} failed: {p.stderr.strip()}")
    return path


def tls_args(srv):
    """What nginx and Apache are configured alike with."""
    s = srv.spec
    return ["--port", srv.port, "--cert", srv.chain, "--key", srv.keyfile, "--root", srv.root,
            "--tls", ",".join(s.versions), "--tickets", "on" if s.tickets else "off",
            "--tls12-ciphers", TLS12_SUITES_OPENSSL, "--tls13-suites", TLS13_SUITE_OPENSSL,
            "--curves", GROUPS_OPENSSL]


class Nginx(Server):
    name = "nginx"

    def command(self):
        d = self.dir
        s = self.spec
        fmt = "$connection_requests $ssl_session_reused $ssl_protocol $status $body_bytes_sent $msec $request_time"
        args = tls_args(self) + [
            "--prefix", d,
            "--worker-connections", s.max_conns + 100, "--rlimit-nofile", s.max_conns * 2 + 100,
            "--session-cache", f"shared:SSL:{max(1, s.cache_sessions * 300 // (1 << 20) + 1)}m",
            "--session-timeout", "1h", "--backlog", 4096,
            "--keepalive-requests", 10000000, "--keepalive-timeout", "300s",
            # tlslab serve holds its files in memory; without this nginx
            # opens, stats and closes the file on every request (3 syscalls
            # of its 7 per keep-alive request; until 2026-11-29).
            "--open-file-cache",
        ]
        if s.h2:
            # The access log adds each request's connection serial and protocol.
            fmt += " $connection $server_protocol"
            args += ["--h2-for", self.env.tools["nginx"]]
        if s.log:
            # Batched like tlslab serve's own log (64 KiB or 100 ms), not a
            # write per request: see BUFFERED_LOGS.
            args += ["--log-format", fmt, "--access-log", self.access_log] + BUFFERED_LOGS
        path = write_conf(self.env, "nginx", args, os.path.join(d, "nginx.conf"))
        argv = [self.env.tools["nginx"], "-p", d, "-c", path, "-g", "daemon off;"]
        return argv, None, signal.SIGTERM

    def parse(self, line):
        f = line.split()
        if len(f) not in (7, 9):
            return None
        try:
            return Record(f[0] == "1", f[1] == "r", f[2], int(f[3]), int(f[4]),
                          float(f[5]), *((int(f[7]), f[8]) if len(f) == 9 else ()))
        except ValueError:
            return None


class Apache(Server):
    name = "apache"

    def command(self):
        d = self.dir
        s = self.spec
        args = tls_args(self) + [
            "--dir", d, "--modules", self.env.apache_modules, "--apache2", self.env.tools["apache2"],
            "--threads", s.threads, "--cache-bytes", max(512000, s.cache_sessions * 300),
        ]
        if s.log:
            # Not batched: Apache's BufferedLogs has no flush interval, so
            # a cell's last lines would reach the file only with the next
            # cell's and be counted there (apache-conf --log-buffered).
            args += ["--log-format", "%k %{SSL_SESSION_RESUMED}x %{SSL_PROTOCOL}x %>s %B %{msec}t %D",
                     "--access-log", self.access_log]
        path = write_conf(self.env, "apache", args, os.path.join(d, "httpd.conf"))
        argv = [self.env.tools["apache2"], "-f", path, "-DFOREGROUND"]
        env = dict(os.environ, APACHE_RUN_DIR=d, APACHE_LOCK_DIR=d, APACHE_PID_FILE=f"{d}/httpd.pid")
        return argv, env, signal.SIGTERM

    def parse(self, line):
        f = line.split()
        if len(f) != 7:
            return None
        try:
            return Record(f[0] == "0", f[1] == "Resumed", f[2], int(f[3]),
                          int(f[4]) if f[4] != "-" else 0, int(f[5]) / 1000.0)
        except ValueError:
            return None


SERVE_LINE = re.compile(
    r'"[^"]*" (?P<status>\d+) (?P<bytes>\d+) "[^"]*" "[^"]*" (?P<proto>\S+) (?P<reused>\S+) '
    # $ssl_early_data (1 or .) since serve answers 0-RTT requests, then
    # $transport (tcp or quic) since log format version 2.
    r"(?P<rt>\d+) (?P<cid>\d+) (?P<ron>\d+)(?: (?P<early>[1.]))?(?: (?P<transport>tcp|quic))?$"
)


class Serve(Server):
    name = "tlslab-serve"

    def command(self):
        s = self.spec
        argv = [
            self.env.tlslab, "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--root", self.root,
            "--cert", self.chain, "--key", self.keyfile,
            "--threads", "1",
            "--tls", ",".join(s.versions),
            "--suites", SUITES_RUSTLS,
            "--groups", GROUPS_RUSTLS,
            "--session-cache", f"memory:{s.cache_sessions}",
            "--session-timeout", "1h",
            "--tickets", "on" if s.tickets else "off",
            "--max-connections", str(s.max_conns),
        ]
        if s.log:
            argv += ["--access-log", self.access_log]
        return argv, None, signal.SIGTERM

    def parse(self, line):
        m = SERVE_LINE.search(line)
        if m is None:
            return None
        return Record(m["ron"] == "1", m["reused"] == "r", m["proto"], int(m["status"]),
                      int(m["bytes"]), None)


SERVERS = {"tlslab-serve": Serve, "nginx": Nginx, "apache": Apache}


def make(name, env, work, spec, cpu):
    return SERVERS[name](env, work, spec, cpu)
