#!/usr/bin/env bash
# Client CPU per keep-alive request of two tlslab builds' `tlslab load`.
#
#   bench/load-ka-ab.sh BEFORE AFTER [PAIRS] [SECONDS]
#
# One `tlslab serve --threads 1` (AFTER's) pinned to CPU 0 serves both
# loads; in each pair BEFORE's and AFTER's `tlslab load` run at the same
# time, both pinned to CPU 1 (which one starts first alternates), each with
# 50 keep-alive TLS 1.3 connections, GET /4k.bin, SECONDS long. The figure
# is each load's own `client_cpu.per_request_us` (client-observed: CPU time
# of its engine threads over its measured window / completed requests).
# Prints one line per run and the median of the per-pair ratios. With K=1
# every connection carries one request, a full handshake (no reuse): client
# CPU per handshake instead. Every address is 127.0.0.1.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [PAIRS] [SECONDS]" >&2; exit 2; }
A=$1 B=$2 PAIRS=${3:-5} SECS=${4:-5}
case "${PROTO:=h1}" in
  h1) proto=() srvproto=() ;;
  # -m 10 streams on a kept-alive connection; with K=1 (one request a
  # connection: the handshake) one stream, since -m may not exceed K.
  h2) proto=(--h2 -m "$([ "${K:-0}" = 1 ] && echo 1 || echo 10)") srvproto=() ;;
  h3) proto=(--h3 -m "$([ "${K:-0}" = 1 ] && echo 1 || echo 10)") srvproto=(--h3) ;;
  *) echo "$0: PROTO=$PROTO is not a protocol; use h1, h2 or h3" >&2; exit 2 ;;
esac
for t in "$A" "$B"; do [ -x "$t" ] || { echo "$0: $t is not an executable" >&2; exit 2; }; done
dir=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$dir"' EXIT
head -c 4096 /dev/zero | tr '\0' 'x' > "$dir/4k.bin"
taskset -c 0 "$B" serve --listen 127.0.0.1:0 --root "$dir" --threads 1 --tls 1.2,1.3 --tickets on "${srvproto[@]}" \
  </dev/null >"$dir/serve.out" 2>"$dir/serve.err" &
srv=$!
url=""
for _ in $(seq 100); do
  url=$(sed -n 's/^tlslab serve: https \(https:[^ ]*\).*/\1/p' "$dir/serve.out" 2>/dev/null || true)
  [ -n "$url" ] && break
  sleep 0.05
done
[ -n "$url" ] || { echo "$0: the server did not start: $(cat "$dir/serve.err")" >&2; exit 1; }

load() { # binary label
  taskset -c 1 "$1" load "$url/4k.bin" --insecure --threads 1 --no-progress -c 50 \
    --tls 1.3 "${proto[@]}" --requests-per-conn "${K:-0}" -d "${SECS}s" --json "$dir/$2.json" </dev/null >/dev/null 2>"$dir/$2.load.err" ||
    { echo "$0: the $2 load failed: $(cat "$dir/$2.load.err")" >&2; return 1; }
}
us() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['client_cpu']['per_request_us'], j['requests']['succeeded'])" "$dir/$1.json"; }

for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then load "$A" before & p1=$!; load "$B" after & p2=$!
  else load "$B" after & p2=$!; load "$A" before & p1=$!; fi
  wait "$p1" "$p2"
  read -r ub nb < <(us before); read -r ua na < <(us after)
  echo "pair $i: before $ub us/request ($nb requests), after $ua us/request ($na requests)" | tee -a "$dir/results"
done
python3 - "$dir/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
b = [float(r[3]) for r in rows]; a = [float(r[8]) for r in rows]
r = sorted(x / y for x, y in zip(a, b))
print(f"before: median {statistics.median(b):.2f} us/request; after: median {statistics.median(a):.2f} us/request")
print(f"after/before, median of the {len(r)} pair ratios: {statistics.median(r):.3f} (range {r[0]:.3f}-{r[-1]:.3f})")
PY
