#!/usr/bin/env bash
# tlslab dispatch against HAProxy (TCP mode, the TLS 1.2 session-ID stick
# recipe) in front of three `tlslab serve` nodes, all on 127.0.0.1.
#
# For each resumption mechanism (TLS 1.2 IDs, TLS 1.2 tickets, TLS 1.3
# tickets) and each balancer (tlslab session, tlslab round-robin, HAProxy
# stick) it runs one bounded `tlslab load` (-n N, --reuse R, one request per
# connection) and prints:
#   resumed     server-observed: resumed handshakes summed over the nodes'
#               /metrics, as a share of the connections that offered a
#               session (load's resumed-offer count = connections x R)
#   bal us/conn the balancer's CPU (schedstat ns of all its threads) per
#               proxied connection
#   p50         client-observed total latency p50 (load's JSON)
# plus a direct run (no balancer) for the added-latency figure.
#
# Pinning: nodes and load on CPU 0, the balancer on CPU 1 (taskset).
# Usage: bench/dispatch.sh [N] [REUSE]   (defaults 2000 90)
set -euo pipefail
N=${1:-2000}
REUSE=${2:-90}
cd "$(dirname "$0")/.."
B=target/release/tlslab
command -v haproxy >/dev/null || { echo "haproxy not installed (apt-get install -y haproxy)" >&2; exit 1; }
T=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT

cpu_ns() { # sum of schedstat run time over the threads of PID
  local s=0 a; for f in /proc/"$1"/task/*/schedstat; do [ -r "$f" ] || continue; read -r a _ < "$f" || a=0; s=$((s + a)); done; echo $s; }
resumed_sum() { # resumed handshakes over the nodes
  local s=0; for m in "${METRICS[@]}"; do
    v=$(curl -s "$m" | awk '/^tlslab_handshakes_total/ && /kind="resumed"/ {s+=$2} END {print s+0}'); s=$((s + ${v%.*})); done; echo $s; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

start_nodes() { # TLS TICKETS
  METRICS=(); ADDRS=()
  for i in 1 2 3; do
    TMPDIR=$T taskset -c 0 $B serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --tls "$1" --tickets "$2" --threads 1 > "$T/s$i.out" 2>&1 &
    PIDS+=($!); NODE_PIDS+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 50); do grep -q "metrics" "$T/s$i.out" 2>/dev/null && break; sleep 0.1; done
    ADDRS+=("$(grep -o 'https://[0-9.:]*' "$T/s$i.out" | sed 's|https://||')")
    METRICS+=("$(grep -o 'http://[0-9.:]*/metrics' "$T/s$i.out")")
  done
}
stop_nodes() { for p in "${NODE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; NODE_PIDS=(); sleep 0.3; }

run_load() { # TARGET TLS RESUME NAME -> prints "p50"
  taskset -c 0 $B load "https://$1/" -c 4 -n "$N" --reuse "$REUSE" --insecure --tls "$2" --resume-with "$3" \
    --no-progress --json "$T/$4.json" > "$T/$4.out" 2>&1
  python3 -c "import json;j=json.load(open('$T/$4.json'));print(j['latency']['total']['p50_us'])"
}

printf '%-22s %-20s %9s %12s %8s\n' mechanism balancer resumed "bal us/conn" "p50 us"
NODE_PIDS=()
for mech in "1.2 off id" "1.2 on ticket" "1.3 on auto"; do
  set -- $mech; TLS=$1; TK=$2; RW=$3
  label="TLS $TLS $RW"; [ "$TLS" = 1.3 ] && label="TLS 1.3 tickets"; [ "$RW" = ticket ] && label="TLS 1.2 tickets"; [ "$RW" = id ] && label="TLS 1.2 IDs"
  for bal in direct session round-robin haproxy; do
    start_nodes "$TLS" "$TK"
    BPID=""
    case $bal in
      direct) TARGET=${ADDRS[0]} ;;
      session|round-robin)
        taskset -c 1 $B dispatch --policy "$bal" --listen 127.0.0.1:0 --health-check off \
          --backend "${ADDRS[0]}" --backend "${ADDRS[1]}" --backend "${ADDRS[2]}" > "$T/d.out" 2>&1 &
        BPID=$!; PIDS+=($BPID)
        for _ in $(seq 50); do grep -q listen "$T/d.out" 2>/dev/null && break; sleep 0.1; done
        TARGET=$(awk '/listen/ {print $4}' "$T/d.out") ;;
      haproxy)
        P=$(free_port)
        cat > "$T/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 4000
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
listen tls
    bind 127.0.0.1:$P
    tcp-request inspect-delay 5s
    tcp-request content accept if { req.ssl_hello_type 1 }
    tcp-response inspect-delay 5s
    tcp-response content accept if { res.ssl_hello_type 2 }
    acl clienthello req.ssl_hello_type 1
    acl serverhello res.ssl_hello_type 2
    stick-table type binary len 32 size 100k expire 30m
    stick on req.payload_lv(43,1) if clienthello
    stick store-response res.payload_lv(43,1) if serverhello
    balance roundrobin
    server n1 ${ADDRS[0]}
    server n2 ${ADDRS[1]}
    server n3 ${ADDRS[2]}
CFG
        taskset -c 1 haproxy -f "$T/haproxy.cfg" -db > "$T/h.out" 2>&1 &
        BPID=$!; PIDS+=($BPID); sleep 0.5; TARGET=127.0.0.1:$P
        kill -0 "$BPID" 2>/dev/null || { echo "haproxy did not start:" >&2; cat "$T/h.out" >&2; exit 1; } ;;
    esac
    r0=$(resumed_sum); c0=0; [ -n "$BPID" ] && c0=$(cpu_ns "$BPID")
    p50=$(run_load "$TARGET" "$TLS" "$RW" "$bal")
    r1=$(resumed_sum); c1=0; [ -n "$BPID" ] && c1=$(cpu_ns "$BPID")
    offered=$(python3 -c "print(round($N*$REUSE/100))")
    share=$(python3 -c "print(f'{100*($r1-$r0)/$offered:.1f}%')")
    [ "$bal" = direct ] && share="($((r1-r0)))"
    cpu=$(python3 -c "print(f'{($c1-$c0)/1000/$N:.1f}' if $c1 else '-')")
    printf '%-22s %-20s %9s %12s %8s\n' "$label" "$bal" "$share" "$cpu" "$p50"
    [ -n "$BPID" ] && { kill "$BPID" 2>/dev/null || true; }
    stop_nodes
  done
done
