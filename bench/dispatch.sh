#!/usr/bin/env bash
# tlslab dispatch against HAProxy 2.6 (TCP mode, issue 10's TLS 1.2
# session-ID stick-table recipe), in front of three `tlslab serve` nodes,
# all on 127.0.0.1 ephemeral ports. Issue 10's benchmark targets:
#
# 1. Routing efficiency, reuse 50 % and 90 %, three nodes, for TLS 1.2 IDs,
#    TLS 1.2 tickets and TLS 1.3 tickets; balancers: dispatch --policy
#    session (the recommended setup: serve --node-tag nI, --backend
#    ADDR=tag:nI), dispatch --policy session without tags (learning only),
#    HAProxy's stick recipe, dispatch --policy round-robin (blind).
#    efficiency = resumed handshakes summed over the nodes' /metrics
#                 (server-observed) / handshakes that offered a session
#                 (client-observed, load JSON reuse.offered_count).
# 2. Cost, TLS 1.3 tickets at reuse 90 (one request per connection),
#    ROUNDS rounds alternating direct / dispatch session / HAProxy:
#    balancer CPU per proxied connection (schedstat run time of all its
#    threads, before/after the load), and client-observed total latency
#    p50/p99 (load JSON); added latency = balancer − direct, per round.
#    Then keep-alive (K=0, 1 client, 8 KiB bodies): per-request p50/p99
#    added by the hop; then bulk (K=0, 4 clients, 1 MiB bodies): balancer
#    CPU per MiB proxied (bytes from the load JSON).
#    2d: added latency with the balancer on the clients' CPU (CPU 0, with
#    the load and the nodes): 1 client, keep-alive and one request per
#    connection. With the balancer alone on CPU 1 (sections 2 and 2b) each
#    request crosses between the vCPUs twice more than the direct path,
#    and each crossing wakes an idle vCPU; on CPU 0 the hop costs only the
#    balancer's own work and its context switches.
# 3. Memory per learned session: crates/dispatch/examples/table_memory.
#
# Pinning: nodes and load on CPU 0, the balancer alone on CPU 1 (taskset);
# dispatch and HAProxy both run one thread.
# Usage: bench/dispatch.sh [N] [ROUNDS]   (defaults 2000 3)
# Env: TLSLAB=path of the tlslab binary (default target/release/tlslab);
#      TAGS=0 for a build without `serve --node-tag` (skips the tagged
#      rows; the cost runs then use untagged nodes); MEM_PROFILE=--release
#      (default) or empty for the memory example's build profile (the
#      table's bytes per entry do not depend on it).
set -euo pipefail
N=${1:-2000}
TAGS=${TAGS:-1}
MEM_PROFILE=${MEM_PROFILE---release}
ROUNDS=${2:-3}
cd "$(dirname "$0")/.."
B=${TLSLAB:-${CARGO_TARGET_DIR:-target}/release/tlslab}
[ -x "$B" ] || { echo "build first: cargo build --release --bin tlslab ($B missing)" >&2; exit 2; }
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
[ -x "$HAPROXY" ] || { echo "haproxy not installed (apt-get install -y haproxy)" >&2; exit 2; }
T=$(mktemp -d)
PIDS=()
NODE_PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT

cpu_ns() { # sum of schedstat run time over the threads of PID
  local s=0 a; for f in /proc/"$1"/task/*/schedstat; do [ -r "$f" ] || continue; read -r a _ < "$f" || a=0; s=$((s + a)); done; echo $s; }
resumed_sum() { # resumed handshakes over the nodes (server-observed)
  local s=0 v; for m in "${METRICS[@]}"; do
    v=$(curl -s "$m" | awk '/^tlslab_handshakes_total/ && /kind="resumed"/ {s+=$2} END {print s+0}'); s=$((s + ${v%.*})); done; echo $s; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
jget() { python3 -c "import json,sys;j=json.load(open('$1'));v=j
for k in '$2'.split('/'): v=v[k]
print(v)"; }

start_nodes() { # TLS TICKETS TAGGED(0|1)
  METRICS=(); ADDRS=(); BACKENDS=()
  for i in 1 2 3; do
    local tag=(); [ "$3" = 1 ] && tag=(--node-tag "n$i")
    TMPDIR=$T taskset -c 0 "$B" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --tls "$1" --tickets "$2" \
      --threads 1 "${tag[@]}" > "$T/s$i.out" 2>&1 &
    PIDS+=($!); NODE_PIDS+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 100); do grep -q "metrics" "$T/s$i.out" 2>/dev/null && break; sleep 0.1; done
    local a; a=$(grep -o 'https://[0-9.:]*' "$T/s$i.out" | sed 's|https://||')
    ADDRS+=("$a")
    METRICS+=("$(grep -o 'http://[0-9.:]*/metrics' "$T/s$i.out")")
    if [ "$3" = 1 ]; then BACKENDS+=(--backend "$a=tag:n$i"); else BACKENDS+=(--backend "$a"); fi
  done
}
stop_nodes() { for p in "${NODE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; NODE_PIDS=(); sleep 0.3; }

haproxy_cfg() { # PORT STICK(0|1): the config comes from tlslab (crates/peers)
  local stick=()
  [ "$2" = 1 ] && stick=(--stick-session-ids)
  "$B" peers haproxy-conf --port "$1" --server "${ADDRS[0]}" --server "${ADDRS[1]}" \
    --server "${ADDRS[2]}" "${stick[@]}" --out "$T/haproxy.cfg"
}

start_balancer() { # KIND -> sets TARGET, BPID
  BPID=""
  case $1 in
    direct) TARGET=${ADDRS[0]} ;;
    session|session-untagged|round-robin)
      local pol=$1; [ "$pol" = session-untagged ] && pol=session
      taskset -c "${BAL_CPU:-1}" "$B" dispatch --policy "$pol" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --health-check off \
        "${BACKENDS[@]}" > "$T/d.out" 2>&1 &
      BPID=$!; PIDS+=($BPID)
      for _ in $(seq 100); do grep -q "metrics" "$T/d.out" 2>/dev/null && break; sleep 0.1; done
      TARGET=$(awk '/ listen / {print $4}' "$T/d.out")
      DMETRICS=$(grep -o 'http://[0-9.:]*/metrics' "$T/d.out") ;;
    haproxy|haproxy-plain)
      local p; p=$(free_port)
      haproxy_cfg "$p" "$([ "$1" = haproxy ] && echo 1 || echo 0)"
      taskset -c "${BAL_CPU:-1}" "$HAPROXY" -f "$T/haproxy.cfg" -db > "$T/h.out" 2>&1 &
      BPID=$!; PIDS+=($BPID); TARGET=127.0.0.1:$p
      for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break; sleep 0.05; done
      kill -0 "$BPID" 2>/dev/null || { echo "haproxy did not start:" >&2; cat "$T/h.out" >&2; exit 1; } ;;
  esac
}
stop_balancer() { [ -n "$BPID" ] && { kill "$BPID" 2>/dev/null || true; wait "$BPID" 2>/dev/null || true; }; BPID=""; }

run_load() { # NAME TLS RESUME REUSE N [extra...] -> JSON at $T/NAME.json
  local name=$1 tls=$2 rw=$3 reuse=$4 n=$5; shift 5
  taskset -c 0 "$B" load "https://$TARGET${URLPATH:-/}" -c "${CLIENTS:-4}" -n "$n" --reuse "$reuse" --insecure \
    --tls "$tls" --resume-with "$rw" --no-progress --json "$T/$name.json" "$@" > "$T/$name.out" 2>&1 \
    || { echo "load failed:" >&2; cat "$T/$name.out" >&2; exit 1; }
}

echo "# tlslab dispatch vs HAProxy $("$HAPROXY" -v | head -1 | awk '{print $3}'), $(date -u +%FT%TZ), N=$N, ROUNDS=$ROUNDS"
echo "# machine: $(nproc) CPUs, shared with other jobs (noisy)"
echo
echo "## 1. Routing efficiency (server-observed resumed / client-observed offered), three nodes"
printf '%-16s %5s  %-18s %10s %10s %12s\n' mechanism reuse balancer offered resumed efficiency
for reuse in 50 90; do
  for mech in "1.2 off id" "1.2 on ticket" "1.3 on auto"; do
    set -- $mech; TLS=$1; TK=$2; RW=$3
    case "$RW" in id) label="TLS 1.2 IDs" ;; ticket) label="TLS 1.2 tickets" ;; *) label="TLS 1.3 tickets" ;; esac
    for bal in session session-untagged haproxy round-robin; do
      [ "$TAGS" = 1 ] || [ "$bal" != session ] || continue
      tagged=$TAGS; [ "$bal" = session-untagged ] && tagged=0
      start_nodes "$TLS" "$TK" "$tagged"
      start_balancer "$bal"
      r0=$(resumed_sum)
      run_load "eff-$bal" "$TLS" "$RW" "$reuse" "$N"
      r1=$(resumed_sum)
      offered=$(jget "$T/eff-$bal.json" reuse/offered_count)
      eff=$(python3 -c "print(f'{100*($r1-$r0)/$offered:.1f} %' if $offered else '-')")
      printf '%-16s %4s%%  %-18s %10s %10s %12s\n' "$label" "$reuse" "$bal" "$offered" "$((r1 - r0))" "$eff"
      stop_balancer; stop_nodes
    done
  done
done

echo
echo "## 2. Cost: TLS 1.3 tickets, reuse 90, one request per connection, $ROUNDS rounds (TAGS=$TAGS)"
start_nodes 1.3 on "$TAGS"
printf '%-6s %-14s %12s %9s %9s %12s %12s\n' round balancer "bal us/conn" "p50 us" "p99 us" "added p50" "added p99"
for r in $(seq "$ROUNDS"); do
  for bal in direct session haproxy haproxy-plain; do
    start_balancer "$bal"
    c0=0; [ -n "$BPID" ] && c0=$(cpu_ns "$BPID")
    run_load "cost-$bal" 1.3 auto 90 "$N"
    c1=0; [ -n "$BPID" ] && c1=$(cpu_ns "$BPID")
    p50=$(jget "$T/cost-$bal.json" latency/total/p50_us); p99=$(jget "$T/cost-$bal.json" latency/total/p99_us)
    [ "$bal" = direct ] && { d50=$p50; d99=$p99; }
    cpu=$(python3 -c "print(f'{($c1-$c0)/1000/$N:.1f}' if $c1 else '-')")
    printf '%-6s %-14s %12s %9s %9s %12s %12s\n' "$r" "$bal" "$cpu" "$p50" "$p99" "$((p50 - d50))" "$((p99 - d99))"
    stop_balancer
  done
done

echo
echo "## 2b. Keep-alive: 1 client, K=0, $((N * 5)) requests of 8 KiB; per-request latency, $ROUNDS rounds"
printf '%-6s %-14s %9s %9s %12s %12s\n' round balancer "p50 us" "p99 us" "added p50" "added p99"
for r in $(seq "$ROUNDS"); do
  for bal in direct session haproxy-plain; do
    start_balancer "$bal"
    CLIENTS=1 URLPATH=/bytes/8192 run_load "ka-$bal" 1.3 auto 0 $((N * 5)) --requests-per-conn 0
    p50=$(jget "$T/ka-$bal.json" latency/total/p50_us); p99=$(jget "$T/ka-$bal.json" latency/total/p99_us)
    [ "$bal" = direct ] && { d50=$p50; d99=$p99; }
    printf '%-6s %-14s %9s %9s %12s %12s\n' "$r" "$bal" "$p50" "$p99" "$((p50 - d50))" "$((p99 - d99))"
    stop_balancer
  done
done

echo
echo "## 2c. Bulk: 4 clients, K=0, $((N / 10)) requests of 1 MiB; balancer CPU per MiB proxied"
printf '%-6s %-14s %10s %12s\n' round balancer MiB "bal us/MiB"
for r in $(seq "$ROUNDS"); do
  for bal in session haproxy-plain; do
    start_balancer "$bal"
    c0=$(cpu_ns "$BPID")
    URLPATH=/bytes/1048576 run_load "bulk-$bal" 1.3 auto 0 $((N / 10)) --requests-per-conn 0
    c1=$(cpu_ns "$BPID")
    mib=$(python3 -c "import json;j=json.load(open('$T/bulk-$bal.json'));print(round(j['requests']['completed']*1048576/1048576))")
    printf '%-6s %-14s %10s %12s\n' "$r" "$bal" "$mib" "$(python3 -c "print(f'{($c1-$c0)/1000/$mib:.1f}')")"
    stop_balancer
  done
done

echo
echo "## 2d. Added latency, balancer on the clients' CPU (CPU 0): 1 client, $((N * 5)) keep-alive requests of 8 KiB, then $N one-request connections (TLS 1.3, reuse 90); $ROUNDS rounds"
printf '%-6s %-10s %-14s %9s %9s %12s %12s\n' round path balancer "p50 us" "p99 us" "added p50" "added p99"
for r in $(seq "$ROUNDS"); do
  for path in keep-alive per-conn; do
    for bal in direct session haproxy-plain; do
      BAL_CPU=0 start_balancer "$bal"
      if [ "$path" = keep-alive ]; then
        CLIENTS=1 URLPATH=/bytes/8192 run_load "near-$path-$bal" 1.3 auto 0 $((N * 5)) --requests-per-conn 0
      else
        CLIENTS=1 run_load "near-$path-$bal" 1.3 auto 90 "$N"
      fi
      p50=$(jget "$T/near-$path-$bal.json" latency/total/p50_us); p99=$(jget "$T/near-$path-$bal.json" latency/total/p99_us)
      [ "$bal" = direct ] && { d50=$p50; d99=$p99; }
      printf '%-6s %-10s %-14s %9s %9s %12s %12s\n' "$r" "$path" "$bal" "$p50" "$p99" "$((p50 - d50))" "$((p99 - d99))"
      stop_balancer
    done
  done
done
stop_nodes

echo
echo "## 3. Memory per learned session"
# shellcheck disable=SC2086
cargo run -q $MEM_PROFILE -p tlslab-dispatch --example table_memory -- 1000000
