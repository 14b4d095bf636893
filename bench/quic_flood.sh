#!/usr/bin/env bash
# Issue 29's QUIC target, side by side in one run: at the QUIC connection
# limit, under each flood, is a real HTTP/3 client served within 1 s, and
# does `load --h3` keep >= 95 % of its no-flood goodput?
#
#   [FILL=N] bench/quic_flood.sh TLSLAB [RUNS] [SECONDS]
#
# One server (`serve --h3 --quic-max-connections 100`, defaults otherwise:
# `--quic-retry under-load`, idle-first eviction at the limit; one worker,
# ECDSA P-256) pinned to CPU 0; every `load` pinned to CPU 1 (with its
# flood thread). Each run measures, in turn:
#   none       no flood: the baseline
#   ping-only  the server held at its limit by PING-only clients (a `load
#              --h3 --flood ping-only --flood-rate FILL/s` beside, started
#              3 s before: FILL new clients a second, default 20, each a
#              handshake and then only PINGs; they reach the limit of 100
#              before the measured window starts)
#   valid      the same fill at the limit, plus 1,000 half-open handshakes/s
#              (real ClientHellos, never continued) from the measured load
#   junk       the same fill, plus 5,000 junk datagrams/s (random, and
#              Initial headers with garbage)
# Every flood is `load --h3 --flood KIND --confirm-flood`, 127.0.0.1 only,
# bounded by its load's --warmup + -d and a count. Two loads per condition,
# each with a 3 s warm-up (the floods run through it):
#   goodput    load --h3 -c 4 -d SECONDS, load's defaults (a new QUIC
#              connection and full handshake per request): requests/s
#   new        load --h3 -c 1 --rate 5 -d SECONDS: a new connection per
#              request; the max and p99 of connection start to response end
#              ("served within") and errors
# and the server's open QUIC connections from /metrics in mid-window, its
# CPU share (utime+stime of /proc/PID/stat) over the goodput window, and the
# goodput load's own CPU share (its report; the flood thread not in it).
# Prints one line per condition and run, then per condition the medians
# over RUNS and goodput / no-flood goodput.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [RUNS] [SECONDS]" >&2; exit 2; }
BIN=$1 RUNS=${2:-3} SECS=${3:-10} FILL=${FILL:-20}
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset is missing (apt-get install util-linux)" >&2; exit 2; }
command -v curl >/dev/null || { echo "$0: curl is missing" >&2; exit 2; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

# shellcheck source=bench/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"
serve_start --threads 1 --key-type ecdsa-p256 --h3 --quic-max-connections 100
URL=$URL/bytes/1024

tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

quic_open() {
  curl -s "$METRICS" | awk '$1 == "tlslab_transport_open_connections{transport=\"quic\"}" {print $2}'
}

flood_args() { # condition: the flood flags of the measured load
  case $1 in
    none | ping-only) ;;
    valid) echo "--flood valid --flood-rate 1000/s --confirm-flood" ;;
    junk) echo "--flood junk --flood-rate 5000/s --confirm-flood" ;;
  esac
}

one() { # condition run what load-args...: one load, its JSON in $dir
  local cond=$1 run=$2 what=$3; shift 3
  local flood open fill=""
  read -r -a flood <<<"$(flood_args "$cond")"
  if [ "$cond" != none ]; then
    # The fill: PING-only clients at the limit, from 3 s before the load to
    # its end; its own one-a-second real client is measured too.
    taskset -c 1 "$BIN" load "$URL" --h3 --cacert "$CA" --threads 1 --no-progress \
      -c 1 --rate 1 -d "$((SECS + 6))s" --json "$dir/$cond.$run.$what.fill.json" \
      --flood ping-only --flood-rate "$FILL/s" --confirm-flood \
      </dev/null >/dev/null 2>"$dir/$cond.$run.$what.fill.err" &
    fill=$!
    sleep 3
  fi
  taskset -c 1 "$BIN" load "$URL" --h3 --cacert "$CA" --threads 1 --no-progress \
    --warmup 3s -d "${SECS}s" --json "$dir/$cond.$run.$what.json" "$@" "${flood[@]}" \
    </dev/null >/dev/null 2>"$dir/$cond.$run.$what.err" &
  local lp=$! c0 c1
  sleep 3
  c0=$(cpu_ticks "$pid")
  sleep $((SECS / 2))
  open=$(quic_open)
  wait "$lp" || { echo "$0: load $cond $what failed: $(cat "$dir/$cond.$run.$what.err")" >&2; exit 1; }
  if [ -n "$fill" ]; then
    wait "$fill" || { echo "$0: the fill failed: $(cat "$dir/$cond.$run.$what.fill.err")" >&2; exit 1; }
  fi
  c1=$(cpu_ticks "$pid")
  echo "$open" >"$dir/$cond.$run.$what.open"
  # The server's CPU share from the window's start to the load's end.
  awk -v a="$c0" -v b="$c1" -v t="$tck" -v s="$SECS" \
    'BEGIN { printf "%.2f\n", (b - a) / t / s }' >"$dir/$cond.$run.$what.scpu"
  # Let the server drop what the floods left (half-open handshakes, PING-only
  # clients) before the next condition.
  sleep 2
}

for run in $(seq "$RUNS"); do
  for cond in none ping-only valid junk; do
    one "$cond" "$run" goodput -c 4
    one "$cond" "$run" new -c 1 --rate 5
    python3 - "$dir" "$cond" "$run" <<'PY' | tee -a "$dir/results"
import json, sys
d, cond, run = sys.argv[1:]
g = json.load(open(f"{d}/{cond}.{run}.goodput.json"))
n = json.load(open(f"{d}/{cond}.{run}.new.json"))
def errs(j):
    return sum(v for k, v in j["errors"].items() if isinstance(v, int))
def opened(w):
    t = open(f"{d}/{cond}.{run}.{w}.open").read().strip()
    return t or "?"
f = (g.get("transport") or {}).get("flood") or {}
sent = ""
if f:
    r = f["received"]
    sent = (f"initials {f['valid']} junk {f['junk_random'] + f['junk_header']} "
            f"back {r['datagrams']} retry {r['retry']} initial {r['initial']}; ")
try:
    fill = json.load(open(f"{d}/{cond}.{run}.goodput.fill.json"))
    p = fill["transport"]["flood"]["ping_only"]
    sent += (f"fill: {p['clients']} PING-only clients, {p['closed_by_server']} closed by "
             f"serve; its client {fill['requests']['succeeded']} ok, errors {errs(fill)}, "
             f"max {fill['latency']['total']['max_us'] / 1e3:.1f} ms")
except FileNotFoundError:
    pass
lat = n["latency"]["total"]
scpu = open(f"{d}/{cond}.{run}.goodput.scpu").read().strip()
ccpu = (g["client_cpu"]["user_s"] + g["client_cpu"]["sys_s"]) / g["window"]["measured_s"]
print(f"{cond} run {run}: goodput {g['throughput']['requests_per_s']:.1f} req/s "
      f"(errors {errs(g)}, quic open {opened('goodput')}, server CPU {scpu}, "
      f"load CPU {ccpu:.2f} without its flood); new connections: "
      f"{n['requests']['succeeded']} ok, errors {errs(n)}, p99 {lat['p99_us'] / 1e3:.1f} ms, "
      f"max {lat['max_us'] / 1e3:.1f} ms (quic open {opened('new')}); flood: {sent}")
PY
  done
done

python3 - "$dir" "$RUNS" <<'PY'
import json, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for cond in ["none", "ping-only", "valid", "junk"]:
    g = [json.load(open(f"{d}/{cond}.{r}.goodput.json")) for r in range(1, runs + 1)]
    n = [json.load(open(f"{d}/{cond}.{r}.new.json")) for r in range(1, runs + 1)]
    rows[cond] = (
        statistics.median(j["throughput"]["requests_per_s"] for j in g),
        statistics.median(j["latency"]["total"]["max_us"] / 1e3 for j in n),
        max(j["latency"]["total"]["max_us"] / 1e3 for j in n),
    )
base = rows["none"][0]
print(f"medians of {runs} run(s): condition, goodput req/s, ÷ no flood, new-connection max ms (median, worst)")
for cond, (gp, mx, worst) in rows.items():
    print(f"{cond:10} {gp:8.1f} {gp / base:6.3f} {mx:8.1f} {worst:8.1f}")
PY
