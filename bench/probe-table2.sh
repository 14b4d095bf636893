#!/usr/bin/env bash
# Seed 003's Table 2 today: `tlslab probe` against `tlslab serve` (and nginx,
# if installed) through `tlslab relay` at RTT 10, 50 and 100 ms (one-way
# delay 5, 25, 50 ms). Prints one Markdown row per server, TLS version and RTT.
#
#   bench/probe-table2.sh [TLSLAB_BINARY] [ROUNDS]
#
# Everything binds 127.0.0.1; every process is stopped on exit.
set -euo pipefail
bin=${1:-target/release/tlslab}
rounds=${2:-20}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

wait_line() { # FILE PATTERN -> the first matching line (≤ 20 s)
  for _ in $(seq 200); do
    if l=$(grep -m1 "$2" "$1" 2>/dev/null); then echo "$l"; return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; return 1
}

"$bin" certs --out "$dir/certs" --key ecdsa-p256 >/dev/null
taskset -c 0 "$bin" serve --listen 127.0.0.1:0 --cert "$dir/certs/server.pem" \
  --key-file "$dir/certs/server.key" >"$dir/serve.out" 2>&1 &
pids+=($!)
serve=$(wait_line "$dir/serve.out" '^tlslab serve: https ' | awk '{print $4}' | sed 's#https://##; s#/.*##')
targets=("serve $serve")

nginx_bin=$(command -v nginx || ls /usr/sbin/nginx 2>/dev/null || true)
if [ -n "$nginx_bin" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$dir/nginx/www"
  head -c 4096 /dev/zero | tr '\0' x >"$dir/nginx/www/4k.bin"
  # The config comes from tlslab (crates/peers), as every peer config does.
  "$bin" peers nginx-conf --prefix "$dir/nginx" --port "$port" --cert "$dir/certs/server.pem" \
    --key "$dir/certs/server.key" --worker-connections 1024 --out "$dir/nginx/nginx.conf"
  taskset -c 0 "$nginx_bin" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -g 'daemon off; master_process off;' \
    >"$dir/nginx.out" 2>&1 &
  pids+=($!)
  sleep 0.5
  targets+=("nginx 127.0.0.1:$port")
else
  echo "nginx not installed: only tlslab serve is measured" >&2
fi

echo "| server | TLS | RTT ms | TCP | SSL new | SSL cached | GET | T(new) | T(cached) | savings | accepted |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for t in "${targets[@]}"; do
  name=${t%% *}; upstream=${t#* }
  path=/; [ "$name" = nginx ] && path=/4k.bin
  for rtt in 10 50 100; do
    delay=$((rtt / 2))ms
    taskset -c 1 "$bin" relay --listen 127.0.0.1:0 --upstream "$upstream" --delay "$delay" \
      >"$dir/relay.out" 2>&1 &
    rpid=$!
    pids+=($rpid)
    raddr=$(wait_line "$dir/relay.out" '^relay listening on ' | awk '{print $4}')
    for tls in 1.2 1.3; do
      db="$dir/$name-$rtt-$tls.sqlite"
      taskset -c 1 "$bin" probe "https://$raddr$path" --cacert "$dir/certs/ca.pem" --tls "$tls" \
        --db "$db" --rounds "$rounds" --interval 50ms >/dev/null 2>"$dir/probe.err" \
        || { cat "$dir/probe.err" >&2; exit 1; }
      "$bin" probe report --db "$db" --json | jq -r --arg n "$name" --arg tls "$tls" --arg rtt "$rtt" '
        .targets[0] as $t | $t.table2 as $x |
        def f: if . == null then "-" else (. * 10 | round / 10 | tostring) end;
        "| \($n) | \($tls) | \($rtt) | \($x.tcp_ms|f) | \($x.ssl_new_ms|f) | \($x.ssl_cached_ms|f) | \($x.get_ms|f) | \($x.t_new_ms|f) | \($x.t_cached_ms|f) | \(if $x.savings == null then "-" else "\($x.savings * 100 | round) %" end) | \($t.resumption_accepted)/\($t.samples) |"'
    done
    kill "$rpid" 2>/dev/null || true
    wait "$rpid" 2>/dev/null || true
  done
done
