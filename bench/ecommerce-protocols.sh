#!/usr/bin/env bash
# Seed 001's e-commerce model over HTTP/1.1, HTTP/2 and HTTP/3: what
# multiplexing a page on one connection changes for the server.
#
#   bench/ecommerce-protocols.sh TLSLAB [ROUNDS] [SECONDS] [CLIENTS]
#
# One `tlslab serve --threads 1 --h3` pinned to CPU 0; per round, one
# `tlslab load --workload ecommerce` per protocol (order rotating), pinned
# to CPU 1, CLIENTS browsers (default 8), SECONDS long (default 5), the
# built-in model with think time 0 (so the server, not the customer, sets
# the pace). Over HTTP/1.1 every object is a connection; over HTTP/2 and
# HTTP/3 a page is one (docs/load.md). Per protocol (medians over ROUNDS,
# default 3): requests/s and connections and full handshakes per request
# (client-observed over the load's window), and server CPU per request
# (utime+stime of the serve process over the load run ÷ requests that
# succeeded: server-observed CPU, client-observed count). Every address is
# 127.0.0.1.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [ROUNDS] [SECONDS] [CLIENTS]" >&2; exit 2; }
T=$1 ROUNDS=${2:-3} SECS=${3:-5} CLIENTS=${4:-8}
[ -x "$T" ] || { echo "$0: $T is not an executable" >&2; exit 2; }
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
tck=$(getconf CLK_TCK)
printf 'think_time = "0"\n' >"$dir/model.toml"
. "$(dirname "$0")/serve-lib.sh"
BIN=$T
pid=
serve_start --threads 1 --tls 1.3 --tickets on --h3
url=$URL

one() { # protocol round
  local flag=() c0 c1
  case $1 in h2) flag=(--h2) ;; h3) flag=(--h3) ;; esac
  c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  taskset -c 1 "$T" load "$url" --cacert "$CA" --no-progress --threads 1 -c "$CLIENTS" -d "${SECS}s" \
    --workload ecommerce --workload-config "$dir/model.toml" "${flag[@]}" \
    --json "$dir/$1.$2.json" </dev/null >/dev/null 2>"$dir/$1.$2.err" ||
    { echo "$0: load $1 failed: $(cat "$dir/$1.$2.err")" >&2; exit 1; }
  c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  echo "$1 $2 $c0 $c1" >>"$dir/cpu"
}

protos=(h1 h2 h3)
for r in $(seq "$ROUNDS"); do
  for i in 0 1 2; do one "${protos[$(((i + r) % 3))]}" "$r"; done
done
python3 - "$dir" "$tck" <<'EOF'
import json, statistics, sys
d, tck = sys.argv[1], int(sys.argv[2])
rows = {}
for line in open(f"{d}/cpu"):
    p, r, c0, c1 = line.split()
    j = json.load(open(f"{d}/{p}.{r}.json"))
    ok = j["requests"]["succeeded"]
    hs = j["handshake"]
    conns = j["http"]["connections"]
    rows.setdefault(p, []).append({
        "rps": ok / j["window"]["measured_s"],
        "conn": conns / ok,
        "full": hs["full"]["count"] / ok,
        "us": (int(c1) - int(c0)) / tck / ok * 1e6,
        "pages": j["ecommerce"]["pages"],
        "errors": j["requests"]["errors"],
    })
print("protocol  requests/s  connections/request  full handshakes/request  server CPU us/request  (medians of %d rounds)" % len(rows["h1"]))
base = statistics.median(r["us"] for r in rows["h1"])
for p in ("h1", "h2", "h3"):
    m = {k: statistics.median(r[k] for r in rows[p]) for k in ("rps", "conn", "full", "us")}
    err = sum(r["errors"] for r in rows[p])
    print(f"{p:8}  {m['rps']:10.0f}  {m['conn']:19.3f}  {m['full']:23.3f}  {m['us']:10.1f} ({m['us'] / base:.2f}x h1)  errors {err}")
EOF
