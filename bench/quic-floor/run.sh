#!/usr/bin/env bash
# Server CPU per full handshake, TCP + TLS 1.3 against QUIC engines, several
# rounds with the engines alternating (each round starts one engine later).
# Prints one row per round and the medians; ratios are engine ÷ tcp.
# Usage: bench/quic-floor/run.sh        (settings by environment, see README.md)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$here/target}/release/quic-floor}
ROUNDS=${ROUNDS:-5}
N=${N:-2000}
WARMUP=${WARMUP:-200}
C=${C:-4}
GROUP=${GROUP:-x25519}
SUITE=${SUITE:-aes256gcm}
ENGINES=${ENGINES:-"tcp quinn s2n s2n-tls${VENDORED_BIN:+ quinn-vendored}"}
PORT=${PORT:-47311}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
# Optional: a second build with tlslab's vendored quinn-proto (README.md),
# measured as one more engine, "quinn-vendored", against the same client.
VENDORED_BIN=${VENDORED_BIN:-}
PERF=${PERF:-}   # a directory: record each server's first round with perf there

[[ -x $BIN ]] || { echo "error: $BIN not built: cargo build --release --manifest-path $here/Cargo.toml (or set BIN=)" >&2; exit 2; }
command -v taskset >/dev/null || { echo "error: taskset missing: apt-get install util-linux" >&2; exit 2; }
[[ $ENGINES != *quinn-vendored* || -x $VENDORED_BIN ]] || { echo "error: quinn-vendored needs VENDORED_BIN= (README.md)" >&2; exit 2; }
[[ " $ENGINES " == *" tcp "* ]] || { echo "error: ENGINES must include tcp (the ratios divide by it)" >&2; exit 2; }

work=$(mktemp -d)
spid=
cleanup() { [[ -n $spid ]] && kill "$spid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$BIN" gen-cert --dir "$work/cert"

# One measurement: prints µs per handshake, or "-" if the round failed.
measure() {
    local engine=$1 client=tcp perf_pid= sbin=$BIN sengine=$1
    [[ $engine == tcp ]] || client=quinn
    if [[ $engine == quinn-vendored ]]; then sbin=$VENDORED_BIN sengine=quinn; fi
    : >"$work/server.out"
    taskset -c "$SERVER_CPU" "$sbin" server --engine "$sengine" --port "$PORT" --cert-dir "$work/cert" \
        --group "$GROUP" --suite "$SUITE" --warmup "$WARMUP" --handshakes "$N" >"$work/server.out" 2>"$work/server.err" &
    spid=$!
    for _ in $(seq 100); do grep -q listening "$work/server.err" 2>/dev/null && break; sleep 0.05; done
    if [[ -n $PERF && ! -e $PERF/$engine.data ]]; then
        perf record -q -e cpu-clock -F 2999 -p "$spid" -o "$PERF/$engine.data" >/dev/null 2>&1 &
        perf_pid=$!
        sleep 0.3
    fi
    if ! taskset -c "$CLIENT_CPU" "$BIN" client --engine "$client" --port "$PORT" --cert-dir "$work/cert" \
        --group "$GROUP" --suite "$SUITE" --connections $((WARMUP + N)) --concurrency "$C" >"$work/client.out" 2>"$work/client.err"; then
        echo "round failed for $engine: $(tail -2 "$work/client.err" | tr '\n' ' ')" >&2
    fi
    for _ in $(seq 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    spid=
    if [[ -n $perf_pid ]]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; fi
    [[ $r == 1 ]] && { grep -h 'negotiated' "$work/server.err" >&2 || true; }
    local v
    v=$(sed -n 's/.*us_per_handshake=\([0-9.]*\).*/\1/p' "$work/server.out")
    echo "${v:--}"
}

read -r -a engines <<<"$ENGINES"
k=${#engines[@]}
echo "# quic-floor: N=$N warmup=$WARMUP concurrency=$C group=$GROUP suite=$SUITE server cpu $SERVER_CPU, client cpu $CLIENT_CPU"
echo "# load before: $(uptime)"
header="round"
for e in "${engines[@]}"; do header+=$'\t'"$e"; done
for e in "${engines[@]}"; do [[ $e == tcp ]] || header+=$'\t'"$e/tcp"; done
echo "# µs of server CPU per full handshake"
echo "$header"
declare -A all
for r in $(seq 1 "$ROUNDS"); do
    declare -A got=()
    for i in $(seq 0 $((k - 1))); do
        e=${engines[$(((i + r - 1) % k))]}
        got[$e]=$(measure "$e")
    done
    row="$r"
    for e in "${engines[@]}"; do row+=$'\t'"${got[$e]}"; all[$e]+="${got[$e]} "; done
    for e in "${engines[@]}"; do
        [[ $e == tcp ]] && continue
        ratio=$(awk -v a="${got[$e]}" -v b="${got[tcp]}" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }')
        row+=$'\t'"$ratio"
        all[$e/tcp]+="$ratio "
    done
    echo "$row"
done
median() { tr ' ' '\n' | grep -v '^-\?$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
row="median"
for e in "${engines[@]}"; do row+=$'\t'$(median <<<"${all[$e]}"); done
for e in "${engines[@]}"; do [[ $e == tcp ]] || row+=$'\t'$(median <<<"${all[$e/tcp]}"); done
echo "$row"
echo "# load after: $(uptime)"
