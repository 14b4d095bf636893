#!/usr/bin/env bash
# tlslab dispatch --udp (issue 32) in front of three `tlslab serve --h3
# --quic-lb` nodes, all on 127.0.0.1 ephemeral ports:
#
# 1. Routing, reuse 90, 4 clients, one request per connection, a new source
#    port per connection (load --quic-new-socket): per policy (session, cid,
#    blind) the routing efficiency (dispatcher-observed: offers the chosen
#    node resumed, read from its ServerHello) and the offered and resumed
#    shares (client-observed, load JSON).
# 2. Cost: keep-alive HTTP/3 (4 clients, one connection each, N requests),
#    ROUNDS rounds alternating nginx's UDP stream proxy (plain forwarding,
#    `hash $remote_addr$remote_port consistent`) and dispatch --udp blind,
#    cid and session: balancer CPU (schedstat run time of all its threads,
#    before/after the load) per request and per forwarded datagram (the
#    dispatcher's datagrams_total, up + down; nginx's runs are divided by
#    the datagrams the blind dispatcher forwarded for the same load), and the
#    client's p50 total latency per request.
#
# Pinning: nodes and load on CPU 0, the balancer alone on CPU 1; dispatch
# and nginx one thread/worker each.
# Usage: bench/quic_dispatch.sh [N] [ROUNDS]   (defaults 4000 3)
# Env: TLSLAB=path of the tlslab binary (default target/release/tlslab).
# Needs nginx with its stream module (Debian: apt-get install nginx
# libnginx-mod-stream).
set -euo pipefail
N=${1:-4000}
ROUNDS=${2:-3}
cd "$(dirname "$0")/.."
B=${TLSLAB:-${CARGO_TARGET_DIR:-target}/release/tlslab}
[ -x "$B" ] || { echo "build first: cargo build --release --bin tlslab ($B missing)" >&2; exit 2; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
MOD=/usr/lib/nginx/modules/ngx_stream_module.so
[ -x "$NGINX" ] && [ -r "$MOD" ] || { echo "nginx with its stream module is needed (apt-get install nginx libnginx-mod-stream)" >&2; exit 2; }
T=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT

cpu_ns() { local s=0 a; for f in /proc/"$1"/task/*/schedstat; do [ -r "$f" ] || continue; read -r a _ < "$f" || a=0; s=$((s + a)); done; echo $s; }
free_port() { python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
jget() { python3 -c "import json;j=json.load(open('$1'));v=j
for k in '$2'.split('/'): v=v[k]
print(v)"; }
metric() { curl -s "$1" | awk -v n="$2" '$1==n {print $2}'; }
wait_line() { # FILE PREFIX: the rest of the first line starting with PREFIX
  for _ in $(seq 400); do
    v=$(sed -n "s|^$2||p" "$1" | head -1); [ -n "$v" ] && { echo "$v"; return; }; sleep 0.05; done
  echo "$0: no '$2' in $1: $(cat "$1")" >&2; exit 1; }

LB="nonce-len=6,config-id=1,key=8f95f09245765f80256934e50c66207f"
NODES=(); BACKENDS=()
for i in 1 2 3; do
  taskset -c 0 "$B" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --h3 --threads 1 \
    --node-tag "n$i" --quic-lb "server-id=0$i,$LB" </dev/null >"$T/node$i.out" 2>"$T/node$i.err" &
  PIDS+=($!)
  a=$(wait_line "$T/node$i.out" "tlslab serve: https https://")
  NODES+=("$a"); BACKENDS+=(--backend "$a=sid:0$i,tag:n$i")
done

start_dispatch() { # POLICY -> DPID, DADDR, DMETRICS
  taskset -c 1 "$B" dispatch --udp --threads 1 --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
    --health-check off --policy "$1" --quic-lb "server-id-len=1,$LB" "${BACKENDS[@]}" \
    </dev/null >"$T/d.out" 2>"$T/d.err" &
  DPID=$!; PIDS+=($DPID)
  DADDR=$(wait_line "$T/d.out" "tlslab dispatch: listen ")
  DMETRICS=$(wait_line "$T/d.out" "tlslab dispatch: metrics ")
}
start_nginx() { # -> DPID, DADDR
  local port; port=$(free_port)
  {
    echo "load_module $MOD; daemon off; master_process off; worker_processes 1;"
    echo "pid $T/nginx.pid; error_log $T/nginx.err warn; events { worker_connections 4096; }"
    echo "stream { upstream q { hash \$remote_addr\$remote_port consistent;"
    for a in "${NODES[@]}"; do echo "  server $a;"; done
    echo "} server { listen 127.0.0.1:$port udp; proxy_pass q; proxy_timeout 30s; } }"
  } >"$T/nginx.conf"
  taskset -c 1 "$NGINX" -c "$T/nginx.conf" -p "$T" </dev/null >/dev/null 2>"$T/nginx.stderr" &
  DPID=$!; PIDS+=($DPID); DADDR="127.0.0.1:$port"; sleep 0.5
}
stop() { kill "$DPID" 2>/dev/null || true; wait "$DPID" 2>/dev/null || true; }

echo "== 1. routing: reuse 90, 3 nodes, 4 clients, 600 one-request connections, a new port each"
printf "%-8s %10s %8s %8s\n" policy efficiency offered resumed
for p in session cid blind; do
  start_dispatch "$p"
  taskset -c 0 "$B" load "https://$DADDR/health" --h3 --insecure --no-progress -c 4 -n 600 \
    --reuse 90 --quic-new-socket --json "$T/r.json" >/dev/null 2>"$T/load.err"
  eff=$(metric "$DMETRICS" tlslab_dispatch_routing_efficiency)
  h=$(jget "$T/r.json" reuse/handshakes)
  off=$(jget "$T/r.json" reuse/offered_count); res=$(jget "$T/r.json" reuse/resumed_count)
  printf "%-8s %10.4f %7.1f%% %7.1f%%\n" "$p" "$eff" "$(echo "100*$off/$h" | bc -l)" "$(echo "100*$res/$h" | bc -l)"
  stop
done

echo "== 2. cost: keep-alive, 4 clients x 1 connection, $N requests, $ROUNDS rounds"
printf "%-8s %5s %12s %14s %10s %10s\n" balancer round cpu_us/req cpu_ns/datagram datagrams p50_us
declare -A BLIND_DG
for r in $(seq "$ROUNDS"); do
  for bal in blind nginx cid session; do
    if [ "$bal" = nginx ]; then start_nginx; else start_dispatch "$bal"; fi
    c0=$(cpu_ns "$DPID")
    taskset -c 0 "$B" load "https://$DADDR/health" --h3 --insecure --no-progress -c 4 -n "$N" \
      --requests-per-conn 0 --json "$T/k.json" >/dev/null 2>"$T/load.err"
    c1=$(cpu_ns "$DPID")
    ok=$(jget "$T/k.json" requests/succeeded)
    p50=$(jget "$T/k.json" latency/total/p50_us 2>/dev/null || echo nan)
    if [ "$bal" = nginx ]; then dg=${BLIND_DG[$r]}; else
      up=$(metric "$DMETRICS" 'tlslab_dispatch_datagrams_total{direction="up"}')
      down=$(metric "$DMETRICS" 'tlslab_dispatch_datagrams_total{direction="down"}')
      dg=$((up + down)); [ "$bal" = blind ] && BLIND_DG[$r]=$dg
    fi
    printf "%-8s %5s %12.2f %14.0f %10s %10s\n" "$bal" "$r" "$(echo "($c1-$c0)/1000/$ok" | bc -l)" \
      "$(echo "($c1-$c0)/$dg" | bc -l)" "$dg" "$p50"
    stop
  done
done
