#!/usr/bin/env bash
# Issue 33's target: the server CPU spent on one QUIC attempt shed by
# `serve --h3 --admission session` (refused, sent a Retry, or ignored),
# against a full QUIC handshake's, each to be at most 5 %.
#
#   [KEY=TYPE] [CELLS="full refuse ..."] bench/quic_admission_cpu.sh TLSLAB [RUNS] [SECONDS] [RATE]
#
# The server (`serve --h3 --admission session`, one worker, the key type
# KEY: ecdsa-p256 by default, the cheapest full handshake; rsa4096 is
# `overload`'s and seed 002's server key, on which the TCP shed cost is
# judged; stateful tickets) runs pinned to CPU 0, a fresh one per cell; `load` runs
# pinned to CPU 1. Cells, each SECONDS long (plus a 1 s warm-up):
#   full    --admission-fixed-limit 1000000/s (every attempt admitted, its
#           ClientHello read off the Initials and classified first), `load
#           --h3 -c 4`: a new connection, full handshake and one GET
#           /bytes/100 per request. Per full handshake: the server's CPU over
#           the run divided by the full handshakes it counted
#           (tlslab_transport_handshakes_total{kind="full"}).
#   refuse, retry, ignore
#           --admission-fixed-limit 0 (every new full handshake shed) and
#           --quic-shed-with CELL, under `load --h3 --flood valid --flood-rate
#           RATE/s --confirm-flood` (real ClientHellos from other source
#           ports that never continue) beside one real client (`-c 1 --rate
#           1`, shed too). Per attempt: the server's CPU over the run divided
#           by the attempts shed (tlslab_transport_admission_shed_total
#           {action=CELL}).
#   quinn   quinn alone: admission off and --quic-retry always under the same
#           flood: per Retry packet (tlslab_transport_retries_total), no
#           ClientHello reader (what quinn itself costs per Initial).
#   idle    the server with nothing to do for as long: its CPU per second
#           (the admission controller ticks every 100 ms), reported, not
#           subtracted.
# Server CPU is utime+stime of /proc/PID/stat from just before the load to
# just after it. The ClientHello reader's own time per datagram is the
# server's tlslab_transport_hello_read_seconds / _datagrams counters.
# Prints one line per cell and run, then the medians over RUNS and each
# shed cell's median over the full handshake's median. 127.0.0.1 only; every
# flood is bounded by its load's duration and --flood-max.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [RUNS] [SECONDS] [RATE]" >&2; exit 2; }
BIN=$1 RUNS=${2:-3} SECS=${3:-10} RATE=${4:-2000}
KEY=${KEY:-ecdsa-p256} CELLS=${CELLS:-full refuse retry ignore quinn idle}
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset is missing (apt-get install util-linux)" >&2; exit 2; }
command -v curl >/dev/null || { echo "$0: curl is missing" >&2; exit 2; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
tck=$(getconf CLK_TCK)

# shellcheck source=bench/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # name labels-substring: the sum of the matching samples
  curl -s "$METRICS" | awk -v n="$1" -v l="$2" \
    'index($1, n "{") == 1 && index($1, l) > 0 { s += $2 } END { printf "%.9f\n", s + 0 }'
}

start() { # extra serve flags...
  serve_start --threads 1 --key-type "$KEY" --tls 1.3 --tickets off --h3 "$@"
  URL=$URL/bytes/100
}

stop() {
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
}

one() { # cell run
  local cell=$1 run=$2 c0 c1 n0 n1 h0 h1 d0 d1 name labels
  case $cell in
    full) start --admission session --admission-fixed-limit 1000000/s ;;
    idle) start --admission session ;;
    quinn) start --quic-retry always ;;
    *) start --admission session --admission-fixed-limit 0 --quic-shed-with "$cell" ;;
  esac
  case $cell in
    full) name=tlslab_transport_handshakes_total labels='kind="full"' ;;
    idle) name="" labels="" ;;
    quinn) name=tlslab_transport_retries_total labels=quic ;;
    *) name=tlslab_transport_admission_shed_total labels="action=\"$cell\"" ;;
  esac
  n0=0
  [ -n "$name" ] && n0=$(metric "$name" "$labels")
  h0=$(metric tlslab_transport_hello_read_seconds_total quic)
  d0=$(metric tlslab_transport_hello_read_datagrams_total quic)
  c0=$(cpu_ticks "$pid")
  case $cell in
    idle) sleep "$((SECS + 1))" ;;
    full)
      taskset -c 1 "$BIN" load "$URL" --h3 --cacert "$CA" --threads 1 --no-progress \
        --warmup 1s -d "${SECS}s" -c 4 --json "$dir/$cell.$run.json" \
        </dev/null >/dev/null 2>"$dir/$cell.$run.err" || true
      ;;
    *)
      taskset -c 1 "$BIN" load "$URL" --h3 --cacert "$CA" --threads 1 --no-progress \
        --warmup 1s -d "${SECS}s" -c 1 --rate 1 --timeout 1s --json "$dir/$cell.$run.json" \
        --flood valid --flood-rate "$RATE/s" --flood-max "$((RATE * (SECS + 1)))" --confirm-flood \
        </dev/null >/dev/null 2>"$dir/$cell.$run.err" || true
      ;;
  esac
  c1=$(cpu_ticks "$pid")
  n1=0
  [ -n "$name" ] && n1=$(metric "$name" "$labels")
  h1=$(metric tlslab_transport_hello_read_seconds_total quic)
  d1=$(metric tlslab_transport_hello_read_datagrams_total quic)
  stop
  awk -v cell="$cell" -v run="$run" -v a="$c0" -v b="$c1" -v t="$tck" -v n0="$n0" -v n1="$n1" \
    -v h0="$h0" -v h1="$h1" -v d0="$d0" -v d1="$d1" -v s="$((SECS + 1))" 'BEGIN {
      cpu = (b - a) / t; n = n1 - n0; d = d1 - d0
      reader = d > 0 ? sprintf("%.2f", (h1 - h0) * 1e6 / d) : "-"
      if (cell == "idle")
        printf "%s run %s: server CPU %.3f s over %d s (%.1f ms/s)\n", cell, run, cpu, s, cpu * 1e3 / s
      else
        printf "%s run %s: server CPU %.3f s, %d counted, %.1f us each; ClientHello reader %d datagrams, %s us each\n",
          cell, run, cpu, n, (n > 0 ? cpu * 1e6 / n : 0), d, reader
    }' | tee -a "$dir/results"
  sleep 1
}

uptime
echo "key $KEY; flood $RATE ClientHellos/s; $SECS s cells"
for run in $(seq "$RUNS"); do
  for cell in $CELLS; do
    one "$cell" "$run"
  done
done

python3 - "$dir/results" "$RUNS" <<'PY'
import re, statistics, sys
path, runs = sys.argv[1], int(sys.argv[2])
per, reader = {}, {}
for line in open(path):
    m = re.match(r"(\w+) run \d+: .*?, (\d+) counted, ([\d.]+) us each; ClientHello reader \d+ datagrams, ([\d.]+|-) us each", line)
    if m:
        per.setdefault(m[1], []).append(float(m[3]))
        if m[4] != "-":
            reader.setdefault(m[1], []).append(float(m[4]))
if "full" not in per:
    sys.exit("no full cell in CELLS: nothing to compare with")
full = statistics.median(per["full"])
print(f"medians of {runs} run(s): cell, server CPU us per attempt, / full handshake, reader us per datagram")
for cell in ["full", "refuse", "retry", "ignore", "quinn"]:
    if cell not in per:
        continue
    v = statistics.median(per[cell])
    r = statistics.median(reader[cell]) if cell in reader else float("nan")
    print(f"{cell:7} {v:9.1f} {100 * v / full:7.2f} % {r:8.2f}")
PY
