#!/usr/bin/env bash
# What one keep-alive request costs, split into user and kernel CPU, with
# syscalls per request: tlslab against its peers, on both sides.
#
#   bench/ka-floor.sh [ROUNDS] [SECONDS]
#
# Every cell is a 4 KiB GET on 32 kept-alive TLS 1.3 connections
# (TLS_AES_128_GCM_SHA256, X25519, ECDSA P-256), the server pinned to CPU 0
# and the client to CPU 1, as in bench/peers.sh:
#   client side, against `tlslab serve`: `tlslab load` against wrk and
#     `h2load --h1` (HTTP/1.1), and `tlslab load --h2 -m 10` against
#     `h2load -m 10` (HTTP/2); the client's own user and system CPU (perf's
#     user_time and system_time) and its syscalls (raw_syscalls:sys_enter)
#     over the whole run, per completed request;
#   server side, driven by `tlslab load`: `tlslab serve` against nginx
#     (HTTP/1.1 and HTTP/2), each with an access log; nginx batches its log
#     (buffer=64k flush=100ms) and keeps its file open (open_file_cache),
#     as serve does, so both do the same work a request. Server CPU is
#     utime+stime from /proc/PID/stat over the load run, syscalls from perf
#     attached to the server process, per request completed by the load.
# The kernel part is mostly loopback TCP: on loopback the sender's
# context also runs the receiver's TCP input, so each side's system time
# holds most of the stack's work for the bytes it sends. It is the floor
# neither side can go under with one read and one write a request.
# Needs root (or perf_event_paranoid <= 0) for the syscall counts, and perf,
# wrk, h2load and nginx. Every address is 127.0.0.1.
set -euo pipefail
ROUNDS=${1:-3} SECS=${2:-4}
BIN=${BIN:-$(dirname "$0")/../target/release/tlslab}
for t in perf wrk h2load nginx python3; do
  command -v "$t" >/dev/null || { echo "$0: $t is not installed" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable; cargo build --release, or set BIN" >&2; exit 2; }
dir=$(mktemp -d)
chmod 755 "$dir" # nginx's worker runs as nobody
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
"$BIN" certs --out "$dir/c" >/dev/null
mkdir "$dir/www"
head -c 4096 /dev/urandom >"$dir/www/4k.bin"
chmod -R a+rX "$dir/www" "$dir/c"
tck=$(getconf CLK_TCK)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P1=$(port) P2=$(port)
taskset -c 0 "$BIN" serve --listen "127.0.0.1:$P1" --root "$dir/www" --cert "$dir/c/server.pem" \
  --key "$dir/c/server.key" --threads 1 --tls 1.3 --access-log "$dir/serve.log" \
  --suites TLS13_AES_128_GCM_SHA256 --groups x25519 >"$dir/serve.out" 2>&1 &
SP=$!; pids+=("$SP")
"$BIN" peers nginx-conf --prefix "$dir/ng" --port "$P2" --cert "$dir/c/server.pem" \
  --key "$dir/c/server.key" --root "$dir/www" --tls 1.3 --tls13-suites TLS_AES_128_GCM_SHA256 \
  --curves X25519 --log-format '$status $server_protocol' --access-log "$dir/ng.log" --log-buffered \
  --open-file-cache --keepalive-requests 10000000 --keepalive-timeout 300s \
  --h2-for "$(command -v nginx)" --out "$dir/ng/nginx.conf" >/dev/null
taskset -c 0 nginx -p "$dir/ng" -c "$dir/ng/nginx.conf" -g 'daemon off;' >/dev/null 2>&1 &
NP=$!; pids+=("$NP")
sleep 1
NW=$(pgrep -P "$NP" nginx | head -1)
[ -n "$NW" ] || { echo "$0: nginx did not start: $(cat "$dir/ng/error.log")" >&2; exit 1; }
LOAD=("$BIN" load --insecure --threads 1 --no-progress -c 32 --tls 1.3 --suite TLS13_AES_128_GCM_SHA256
  --group x25519 --requests-per-conn 0 -d "${SECS}s")
H2LOAD=(h2load -t1 -c32 -D "$SECS" --tls13-ciphers TLS_AES_128_GCM_SHA256 --groups X25519)

line() { # label requests syscalls user_s sys_s
  python3 -c "
import sys; l,n,sc,u,s=sys.argv[1],float(sys.argv[2]),float(sys.argv[3]),float(sys.argv[4]),float(sys.argv[5])
print('%-24s %9d requests  syscalls %5.2f  user %6.2f us  sys %6.2f us  total %6.2f us  per request' % (l,n,sc/n,u*1e6/n,s*1e6/n,(u+s)*1e6/n))" "$@" | tee -a "$dir/results"
}
completed() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['requests']['completed'])" "$1"; }
client() { # label tool args...
  local label=$1; shift
  taskset -c 1 perf stat -e raw_syscalls:sys_enter,user_time,system_time -x, -o "$dir/pc" -- "$@" >"$dir/out" 2>&1 ||
    { echo "$0: $label failed: $(tail -3 "$dir/out")" >&2; return 1; }
  local n
  case $label in
    *tlslab-load*) n=$(completed "$dir/l.json") ;;
    *wrk*) n=$(grep -oP '^\s*\K\d+(?= requests in)' "$dir/out") ;;
    *h2load*) n=$(grep -oP 'requests: \d+ total, \d+ started, \K\d+(?= done)' "$dir/out") ;;
  esac
  line "$label" "$n" "$(awk -F, '/raw_syscalls/ {print $1}' "$dir/pc")" \
    "$(awk -F, '/user_time/ {print $1/1e9}' "$dir/pc")" "$(awk -F, '/system_time/ {print $1/1e9}' "$dir/pc")"
}
server() { # label pid port load-args...
  local label=$1 pid=$2 p=$3; shift 3
  local a; a=$(awk '{print $14, $15}' "/proc/$pid/stat")
  perf stat -e raw_syscalls:sys_enter -x, -o "$dir/ps" -p "$pid" -- sleep 600 >/dev/null 2>&1 &
  local ps=$!
  sleep 0.3
  taskset -c 1 "${LOAD[@]}" "$@" --json "$dir/s.json" "https://127.0.0.1:$p/4k.bin" >/dev/null 2>"$dir/s.err" ||
    { echo "$0: the load against $label failed: $(cat "$dir/s.err")" >&2; pkill -P $ps; return 1; }
  # End perf's window by ending its `sleep` (a SIGINT to perf itself is
  # ignored when this script runs without job control).
  pkill -P $ps; wait $ps || true
  local b; b=$(awk '{print $14, $15}' "/proc/$pid/stat")
  read -r au as <<<"$a"; read -r bu bs <<<"$b"
  line "$label" "$(completed "$dir/s.json")" "$(awk -F, '/raw_syscalls/ {print $1}' "$dir/ps")" \
    "$(python3 -c "print(($bu-$au)/$tck)")" "$(python3 -c "print(($bs-$as)/$tck)")"
}
for r in $(seq "$ROUNDS"); do
  echo "round $r"
  U1=https://127.0.0.1:$P1/4k.bin
  client "client h1 tlslab-load" "${LOAD[@]}" --json "$dir/l.json" "$U1"
  client "client h1 wrk" wrk -t1 -c32 -d"${SECS}s" "$U1"
  client "client h1 h2load" "${H2LOAD[@]}" --h1 "$U1"
  client "client h2 tlslab-load" "${LOAD[@]}" --h2 -m 10 --json "$dir/l.json" "$U1"
  client "client h2 h2load" "${H2LOAD[@]}" -m 10 "$U1"
  server "server h1 tlslab-serve" "$SP" "$P1"
  server "server h1 nginx" "$NW" "$P2"
  server "server h2 tlslab-serve" "$SP" "$P1" --h2 -m 10
  server "server h2 nginx" "$NW" "$P2" --h2 -m 10
done
bad=$(awk '$1 != 200' "$dir/ng.log" | wc -l)
[ "$bad" = 0 ] || { echo "$0: nginx answered $bad requests with another status than 200" >&2; exit 1; }
python3 - "$dir/results" <<'PY'
import collections, re, statistics, sys
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.match(r"(\S+ \S+ \S+)\s+\d+ requests\s+syscalls\s+([\d.]+)\s+user\s+([\d.]+) us\s+sys\s+([\d.]+) us\s+total\s+([\d.]+)", l)
    rows[m[1]].append(tuple(float(x) for x in m.groups()[1:]))
print("\nmedians over the rounds, per request:")
med = {}
for k, v in rows.items():
    med[k] = [statistics.median(x[i] for x in v) for i in range(4)]
    print("  %-24s syscalls %5.2f  user %6.2f us  sys %6.2f us  total %6.2f us" % (k, *med[k]))
def ratio(a, b):
    if a in med and b in med:
        print("  %s ÷ %s: total %.2f, user %.2f, sys %.2f" % (a, b, med[a][3] / med[b][3], med[a][1] / med[b][1], med[a][2] / med[b][2]))
print("ratios of the medians:")
ratio("client h1 tlslab-load", "client h1 wrk")
ratio("client h1 tlslab-load", "client h1 h2load")
ratio("client h2 tlslab-load", "client h2 h2load")
ratio("server h1 tlslab-serve", "server h1 nginx")
ratio("server h2 tlslab-serve", "server h2 nginx")
PY
