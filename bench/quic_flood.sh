#!/usr/bin/env bash
# Issue 29's QUIC target, side by side in one run: at the QUIC connection
# limit, under each flood, is a real HTTP/3 client served within 1 s, and
# does `load --h3` keep >= 95 % of its no-flood goodput?
#
#   bench/quic_flood.sh TLSLAB [RUNS] [SECONDS]
#
# One server (`serve --h3 --quic-max-connections 100`, defaults otherwise:
# `--quic-retry under-load`, idle-first eviction at the limit; one worker,
# ECDSA P-256) pinned to CPU 0; every `load` pinned to CPU 1 (with its
# flood thread). Each run measures, in turn, no flood, then each flood
# (`load --h3 --flood KIND --confirm-flood`, 127.0.0.1 only, bounded by the
# load's --warmup + -d and a count):
#   none       no flood
#   valid      1,000 half-open handshakes/s (real ClientHellos, never continued)
#   junk       5,000 junk datagrams/s (random, and Initial headers with garbage)
#   ping-only  50 new PING-only clients/s (they alone reach the limit in 2 s)
# and two loads per condition, each with a 3 s warm-up (the flood runs
# through it, so the window starts at the limit):
#   goodput    load --h3 -c 4 -d SECONDS, keep-alive: requests/s
#   new        load --h3 -c 1 --rate 5 -d SECONDS: a new connection per
#              request; the max and p99 of connection start to response end
#              ("served within") and errors
# and the server's open QUIC connections from /metrics in mid-window.
# Prints one line per condition and run, then per condition the medians
# over RUNS and goodput / no-flood goodput.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [RUNS] [SECONDS]" >&2; exit 2; }
BIN=$1 RUNS=${2:-3} SECS=${3:-10}
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset is missing (apt-get install util-linux)" >&2; exit 2; }
command -v curl >/dev/null || { echo "$0: curl is missing" >&2; exit 2; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

field() { sed -n "s/^tlslab serve: $2 \([^ ]*\).*/\1/p" "$1"; }

taskset -c 0 "$BIN" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --threads 1 \
  --key-type ecdsa-p256 --h3 --quic-max-connections 100 \
  </dev/null >"$dir/serve.out" 2>"$dir/serve.err" &
pid=$!
for _ in $(seq 200); do
  [ -n "$(field "$dir/serve.out" ca)" ] && break
  sleep 0.05
done
URL=$(field "$dir/serve.out" https)/bytes/1024
METRICS=$(field "$dir/serve.out" metrics)
CA=$(field "$dir/serve.out" ca)
[ -n "$CA" ] || { echo "$0: serve did not start: $(cat "$dir/serve.err")" >&2; exit 1; }

quic_open() {
  curl -s "$METRICS" | awk '$1 == "tlslab_transport_open_connections{transport=\"quic\"}" {print $2}'
}

flood_args() { # condition: the flood flags
  case $1 in
    none) ;;
    valid) echo "--flood valid --flood-rate 1000/s --confirm-flood" ;;
    junk) echo "--flood junk --flood-rate 5000/s --confirm-flood" ;;
    ping-only) echo "--flood ping-only --flood-rate 50/s --confirm-flood" ;;
  esac
}

one() { # condition run what load-args...: one load, its JSON in $dir
  local cond=$1 run=$2 what=$3; shift 3
  local flood open
  read -r -a flood <<<"$(flood_args "$cond")"
  taskset -c 1 "$BIN" load "$URL" --h3 --cacert "$CA" --threads 1 --no-progress \
    --warmup 3s -d "${SECS}s" --json "$dir/$cond.$run.$what.json" "$@" "${flood[@]}" \
    </dev/null >/dev/null 2>"$dir/$cond.$run.$what.err" &
  local lp=$!
  sleep $((3 + SECS / 2))
  open=$(quic_open)
  wait "$lp" || { echo "$0: load $cond $what failed: $(cat "$dir/$cond.$run.$what.err")" >&2; exit 1; }
  echo "$open" >"$dir/$cond.$run.$what.open"
  # Let the server drop what the flood left (half-open handshakes, PING-only
  # clients) before the next condition: at most its 10 s handshake timeout.
  sleep 2
}

for run in $(seq "$RUNS"); do
  for cond in none valid junk ping-only; do
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
if f.get("ping_only"):
    p = f["ping_only"]
    sent = f"clients {p['clients']} closed-by-server {p['closed_by_server']}"
elif f:
    r = f["received"]
    sent = (f"initials {f['valid']} junk {f['junk_random'] + f['junk_header']} "
            f"back {r['datagrams']} retry {r['retry']} initial {r['initial']}")
lat = n["latency"]["total"]
print(f"{cond} run {run}: goodput {g['throughput']['requests_per_s']:.1f} req/s "
      f"(errors {errs(g)}, quic open {opened('goodput')}); new connections: "
      f"{n['requests']['succeeded']} ok, errors {errs(n)}, p99 {lat['p99_us'] / 1e3:.1f} ms, "
      f"max {lat['max_us'] / 1e3:.1f} ms (quic open {opened('new')}); flood: {sent}")
PY
  done
done

python3 - "$dir" "$RUNS" <<'PY'
import json, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for cond in ["none", "valid", "junk", "ping-only"]:
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
