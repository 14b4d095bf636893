#!/usr/bin/env bash
# Issue 23's release ratios side by side: HTTP/3 over QUIC against HTTP/1.1
# over TCP+TLS 1.3, one tlslab binary, one server for both transports.
#
#   bench/quic.sh TLSLAB [RUNS] [SECONDS] [CLIENTS] [BODY]
#
# BODY is the response size in bytes (default 100: GET /bytes/100).
# QUIC_SERVE_ARGS adds flags to `serve` (e.g. QUIC_SERVE_ARGS="--quic-new-tokens 0"
# to send none of quinn's two NEW_TOKEN frames per connection). QUIC_CELLS limits the run to some cells (e.g.
# QUIC_CELLS="tcp-full quic-full" for an A/B of the full-handshake ratio).
#
# The server (`serve --h3`, one worker, ECDSA P-256 key, group x25519, TLS
# 1.3, stateless tickets) runs pinned to CPU 0; `load` runs pinned to CPU 1
# with one engine thread. Each run measures six cells in turn, each SECONDS
# long with CLIENTS closed-loop clients on GET /bytes/BODY:
#   tcp-full   TCP+TLS 1.3, a new connection and full handshake per request
#   quic-full  the same over QUIC (--h3)
#   tcp-ka     TCP+TLS 1.3 keep-alive (--requests-per-conn 0)
#   tcp-ka1460 the same with the client's MSS at 1,460 bytes (load --mss
#              1460): loopback's MTU is 65,536, so TCP sends a 4 KiB body as
#              one segment where QUIC sends datagrams of at most 1,452 bytes
#   quic-ka    QUIC keep-alive (--h3 --requests-per-conn 0, -m 1)
#   quic-r50   QUIC, --reuse 50 (the server-observed reuse ratio)
# Server CPU is utime+stime of the server process (/proc/PID/stat) over the
# load run, divided by the load's succeeded requests (one per handshake in
# the full cells); client CPU per handshake is the load report's
# client_cpu.per_handshake_us. Prints one line per cell and run, then the
# medians over RUNS and the ratios QUIC/TCP of the medians. Every address
# is 127.0.0.1. No other bench script has helpers to share (each is
# standalone), so this one has its own four.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [RUNS] [SECONDS] [CLIENTS] [BODY]" >&2; exit 2; }
BIN=$1 RUNS=${2:-3} SECS=${3:-5} CLIENTS=${4:-8} BODY=${5:-100}
read -r -a EXTRA <<<"${QUIC_SERVE_ARGS:-}"
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset is missing (apt-get install util-linux)" >&2; exit 2; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
tck=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# shellcheck source=bench/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"

start() {
  serve_start --threads 1 --key-type ecdsa-p256 --groups x25519 --tls 1.3 --tickets on --h3 "${EXTRA[@]}"
}

quic_handshakes() { # kind: the server's QUIC handshakes of that kind so far
  curl -s "$METRICS" | awk -v k="$1" \
    '$1 == "tlslab_transport_handshakes_total{transport=\"quic\",kind=\"" k "\"}" {print $2}'
}

cell() { # name run load-args...: one measured cell
  local name=$1 run=$2; shift 2
  local c0 f0 r0 c1 f1 r1
  c0=$(cpu_ticks "$pid"); f0=$(quic_handshakes full); r0=$(quic_handshakes resumed)
  taskset -c 1 "$BIN" load "$URL/bytes/$BODY" --cacert "$CA" --threads 1 --no-progress \
    -c "$CLIENTS" -d "${SECS}s" --tls 1.3 --groups x25519 --json "$dir/$name.$run.json" "$@" \
    </dev/null >/dev/null 2>"$dir/$name.$run.err" ||
    { echo "$0: load $name failed: $(cat "$dir/$name.$run.err")" >&2; exit 1; }
  c1=$(cpu_ticks "$pid"); f1=$(quic_handshakes full); r1=$(quic_handshakes resumed)
  python3 - "$dir/$name.$run.json" "$name" "$run" "$c0" "$c1" "$tck" "$f0" "$f1" "$r0" "$r1" <<'EOF' | tee -a "$dir/results"
import json, sys
j = json.load(open(sys.argv[1]))
name, run = sys.argv[2], sys.argv[3]
c0, c1, tck = (int(x) for x in sys.argv[4:7])
f0, f1, r0, r1 = (float(x) for x in sys.argv[7:11])
ok = j["requests"]["succeeded"]
cpu = (c1 - c0) / tck
client = j["client_cpu"]["per_handshake_us"] if "full" in name else j["client_cpu"]["per_request_us"]
full, res = f1 - f0, r1 - r0
reuse = res / (full + res) * 100 if full + res > 0 else float("nan")
print(f"{name} run={run} requests={ok} server_us={cpu / ok * 1e6:.1f} "
      f"client_us={client or float('nan'):.1f} server_reuse={reuse:.2f} "
      f"failed={j['requests']['attempted'] - ok}")
EOF
}

start
echo "# $(date -u +%FT%TZ) $("$BIN" --version 2>/dev/null || echo tlslab) body $BODY B, serve extra: ${QUIC_SERVE_ARGS:-none}, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$dir/results"
CELLS=${QUIC_CELLS:-tcp-full quic-full tcp-ka tcp-ka1460 quic-ka quic-r50}
want() { [[ " $CELLS " == *" $1 "* ]]; }
for run in $(seq "$RUNS"); do
  want tcp-full && cell tcp-full "$run"
  want quic-full && cell quic-full "$run" --h3
  want tcp-ka && cell tcp-ka "$run" --requests-per-conn 0
  want tcp-ka1460 && cell tcp-ka1460 "$run" --requests-per-conn 0 --mss 1460
  want quic-ka && cell quic-ka "$run" --h3 --requests-per-conn 0
  want quic-r50 && cell quic-r50 "$run" --h3 --reuse 50
done
kill -TERM "$pid"; wait "$pid" || true; pid=""
python3 - "$dir/results" <<'EOF'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    name, *kv = line.split()
    d = dict(x.split("=") for x in kv)
    cells.setdefault(name, []).append(d)
med = lambda name, key: statistics.median(float(d[key]) for d in cells[name])
span = lambda name, key: "–".join(f"{f(float(d[key]) for d in cells[name]):.1f}" for f in (min, max))
print("\nmedians over", len(next(iter(cells.values()))), "runs:")
for name in cells:
    print(f"  {name:9} server {med(name, 'server_us'):7.1f} us ({span(name, 'server_us')})"
          f"  client {med(name, 'client_us'):7.1f} us ({span(name, 'client_us')})")
have = lambda *names: all(n in cells for n in names)
if have('tcp-full', 'quic-full'):
  print(f"serve CPU per full handshake, QUIC / TCP: {med('quic-full', 'server_us') / med('tcp-full', 'server_us'):.2f}  (target <= 1.3)")
if have('tcp-ka', 'quic-ka'):
  print(f"serve CPU per keep-alive request, QUIC / TCP: {med('quic-ka', 'server_us') / med('tcp-ka', 'server_us'):.2f}  (target <= 2)")
if have('tcp-ka1460', 'quic-ka'):
  print(f"serve CPU per keep-alive request, QUIC / TCP at MSS 1460: {med('quic-ka', 'server_us') / med('tcp-ka1460', 'server_us'):.2f}")
per_run = lambda q, t, key: ", ".join(f"{float(a[key]) / float(b[key]):.2f}" for a, b in zip(cells[q], cells[t]))
if have('tcp-full', 'quic-full'):
  print(f"  per run: serve {per_run('quic-full', 'tcp-full', 'server_us')}; load {per_run('quic-full', 'tcp-full', 'client_us')}")
if have('tcp-full', 'quic-full'):
  print(f"load CPU per full handshake, QUIC / TCP: {med('quic-full', 'client_us') / med('tcp-full', 'client_us'):.2f}  (target <= 1.2)")
if have('quic-r50'):
  print(f"server-observed reuse at --reuse 50 over QUIC: {med('quic-r50', 'server_reuse'):.2f} % ({span('quic-r50', 'server_reuse')})  (target 49-51)")
EOF
