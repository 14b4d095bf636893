#!/usr/bin/env bash
# Issue 33, item 4: what an Initial flood costs `serve --h3` under each QUIC
# admission policy, and what the legitimate clients see.
#
#   [RATE=300] [REUSE=80] [POLICIES="off static retry-threshold session"] \
#     bench/quic_flood_policies.sh TLSLAB [SECONDS] [VALID_RATE] [JUNK_RATE]
#
# The server (`serve --h3`, one worker thread, ECDSA P-256, TLS 1.3, a fresh
# one per cell) runs pinned to CPU 0; `load` (and its flood thread) pinned to
# CPU 1. The policies (--quic-retry off unless the policy is Retry itself, so
# `off` is the unprotected reference and no policy borrows quinn's default
# under-load Retry):
#   off              --quic-admission off --quic-retry off
#   static           --quic-admission static --quic-max-connections 64
#   retry-threshold  --quic-admission retry-threshold --quic-retry-threshold 16
#   session          --admission session (--quic-shed-with refuse)
# Per policy, three cells, each a legitimate `load --h3 -c 8 --rate RATE
# --reuse REUSE --timeout 2s --warmup 2s -d SECONDS` (open loop, default 300
# arrivals/s, each a new QUIC connection, default 80 % of them resumed by
# seed 000's running counter; REUSE=100: every client resumes whenever it
# holds a ticket, returning users only): well under the server's capacity,
# so its goodput is what the server lets through, not what the client CPU
# can drive; and from the end of its warm-up (its clients hold tickets by
# then) a second `load` (-c 1 --rate 1, -d SECONDS) carrying the flood:
#   none    no flood
#   valid   + `--flood valid --flood-rate VALID_RATE/s` (default 2000): real
#           ClientHellos from 64 other source ports that never continue
#   junk    + `--flood junk --flood-rate JUNK_RATE/s` (default 50000):
#           Initial-sized random datagrams and Initial headers with garbage
#           payloads (the "invalid Initials": quinn drops most when the
#           Initial's AEAD fails, before any policy sees them)
# and once, first, `full`: policy off, no flood, closed loop `-c 4 --reuse 0`: the server CPU
# per full QUIC handshake (CPU ÷ tlslab_transport_handshakes_total{kind=full}).
#
# Figures, and who observed them (window: the load's warm-up + SECONDS, from
# just before `load` starts to just after it ends):
#   goodput, p99   client-observed (the legitimate load's report: requests
#                  that succeeded ÷ its measured window, p99 of request start
#                  (intended, open loop) to response end)
#   server CPU     utime+stime of the serve process (/proc/PID/stat), and its
#                  share of the window ("busy": 1.00 = its CPU saturated)
#   outcomes       server-observed counter deltas over the window, less
#                  what the legitimate load accounts for (one connection, one
#                  handshake and one request each: the requests answered):
#                  hs (flood attempts answered with a ServerHello:
#                  tlslab_transport_handshakes full + resumed), retry
#                  (_retries), refuse (_refused at the limit + _admission_shed
#                  refuse), ignore (_admission_shed ignore), failed (attempts
#                  accepted, tlslab_transport_connections, that ended before a
#                  ServerHello: junk quinn took for an Initial, closed with a
#                  protocol violation), dropped (the flood's Initials sent,
#                  client-observed from its report, less every attempt the
#                  server counted: quinn-proto drops an Initial whose AEAD
#                  fails silently, and no server counter sees it)
#   cost per Initial  (server CPU in the flood cell − the cell's requests ×
#                  the no-flood cell's CPU per request (same policy) − the
#                  flood's hs × a full handshake's CPU) ÷ the flood's Initials
#                  not answered with a handshake; and as a share of a full
#                  handshake's CPU (target ≤ 5 %)
# The flood is bounded by its --flood-max (rate × SECONDS) and its load's
# duration; 127.0.0.1 only. Goodput, p99 and errors are the legitimate
# load's; the flood's own 1/s client is not in them.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [SECONDS] [VALID_RATE] [JUNK_RATE]" >&2; exit 2; }
BIN=$1 SECS=${2:-8} VRATE=${3:-2000} JRATE=${4:-50000} RATE=${RATE:-300} REUSE=${REUSE:-80}
POLICIES=${POLICIES:-off static retry-threshold session}
WARM=2
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset is missing (apt-get install util-linux)" >&2; exit 2; }
command -v curl >/dev/null || { echo "$0: curl is missing" >&2; exit 2; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
tck=$(getconf CLK_TCK)

# shellcheck source=bench/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # name labels-substring: the sum of the matching samples
  curl -s "$METRICS" | awk -v n="$1" -v l="$2" \
    'index($1, n "{") == 1 && index($1, l) > 0 { s += $2 } END { printf "%.0f\n", s + 0 }'
}
counters() { # the server's counters, one "name value" a line
  echo "accepted $(metric tlslab_transport_connections_total quic)"
  echo "retried $(metric tlslab_transport_retries_total quic)"
  echo "refused_limit $(metric tlslab_transport_refused_total quic)"
  echo "shed_refuse $(metric tlslab_transport_admission_shed_total 'action="refuse"')"
  echo "shed_retry $(metric tlslab_transport_admission_shed_total 'action="retry"')"
  echo "shed_ignore $(metric tlslab_transport_admission_shed_total 'action="ignore"')"
  echo "requests $(metric tlslab_transport_requests_total quic)"
  echo "full $(metric tlslab_transport_handshakes_total 'kind="full"')"
  echo "resumed $(metric tlslab_transport_handshakes_total 'kind="resumed"')"
}

policy_flags() {
  case $1 in
    off) echo "--quic-admission off --quic-retry off" ;;
    static) echo "--quic-admission static --quic-max-connections 64 --quic-retry off" ;;
    retry-threshold) echo "--quic-admission retry-threshold --quic-retry-threshold 16" ;;
    session) echo "--admission session --quic-admission session --quic-retry off" ;;
  esac
}

one() { # policy cell
  local policy=$1 cell=$2 flags flood=() legit=(-c 8 --rate "$RATE" --reuse "$REUSE") c0 c1 fp=""
  read -r -a flags <<<"$(policy_flags "$policy")"
  serve_start --threads 1 --key-type ecdsa-p256 --tls 1.3 --h3 "${flags[@]}"
  local url=$URL/bytes/1024
  case $cell in
    valid) flood=(--flood valid --flood-rate "$VRATE/s" --flood-max "$((VRATE * SECS))") ;;
    junk) flood=(--flood junk --flood-rate "$JRATE/s" --flood-max "$((JRATE * SECS))") ;;
    full) legit=(-c 4 --reuse 0) ;;
  esac
  counters >"$dir/$policy.$cell.before"
  c0=$(cpu_ticks "$pid")
  local t0 t1
  t0=$(date +%s.%N)
  taskset -c 1 "$BIN" load "$url" --h3 --cacert "$CA" --threads 1 --no-progress \
    "${legit[@]}" --timeout 2s --warmup "${WARM}s" -d "${SECS}s" \
    --json "$dir/$policy.$cell.json" </dev/null >/dev/null 2>"$dir/$policy.$cell.err" &
  local lp=$!
  if [ ${#flood[@]} -gt 0 ]; then
    # The flood from a second load (its own 1/s client beside it), from
    # the end of the legitimate load's warm-up (its clients hold tickets
    # by then) to the end of its window.
    sleep "$WARM"
    taskset -c 1 "$BIN" load "$url" --h3 --cacert "$CA" --threads 1 --no-progress \
      -c 1 --rate 1 --timeout 2s -d "${SECS}s" --json "$dir/$policy.$cell.flood.json" \
      "${flood[@]}" --confirm-flood </dev/null >/dev/null 2>"$dir/$policy.$cell.flood.err" &
    fp=$!
  fi
  wait "$lp" || echo "$0: load $policy $cell exited non-zero: $(tail -1 "$dir/$policy.$cell.err")" >&2
  if [ -n "$fp" ]; then
    wait "$fp" || echo "$0: flood $policy $cell exited non-zero: $(tail -1 "$dir/$policy.$cell.flood.err")" >&2
  fi
  t1=$(date +%s.%N)
  c1=$(cpu_ticks "$pid")
  counters >"$dir/$policy.$cell.after"
  awk -v a="$c0" -v b="$c1" -v t="$tck" -v s="$t0" -v e="$t1" \
    'BEGIN { printf "%.4f %.4f\n", (b - a) / t, e - s }' >"$dir/$policy.$cell.cpu"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
  sleep 1
}

uptime
one off full
for policy in $POLICIES; do
  for cell in none valid junk; do
    one "$policy" "$cell"
  done
done
uptime

python3 - "$dir" "$POLICIES" <<'PY'
import json, sys
d = sys.argv[1]
def cnt(p, c):
    f = lambda w: dict((k, float(v)) for k, v in (l.split() for l in open(f"{d}/{p}.{c}.{w}")))
    a, b = f("before"), f("after")
    return {k: b[k] - a[k] for k in a}
def cpu(p, c):
    s, w = map(float, open(f"{d}/{p}.{c}.cpu").read().split())
    return s, w
def load(p, c):
    j = json.load(open(f"{d}/{p}.{c}.json"))
    errs = sum(v for v in j["errors"].values() if isinstance(v, int))
    try:
        f = json.load(open(f"{d}/{p}.{c}.flood.json"))
        fl = (f.get("transport") or {}).get("flood") or {}
    except FileNotFoundError:
        fl = {}
    return j, errs, fl

s, w = cpu("off", "full")
k = cnt("off", "full")
full_us = s * 1e6 / k["full"]
print(f"full handshake (policy off, no flood, reuse 0): server CPU {s:.2f} s over {w:.1f} s, "
      f"{k['full']:.0f} full handshakes: {full_us:.1f} us each (server-observed)")
print()
print("policy          cell  goodput ÷none  p99 ms errs busy   sent  sent/s     hs  retry refuse "
      "ignore failed dropped  us/Initial(not hs) ÷full")
for p in sys.argv[2].split():
    base = None
    for c in ["none", "valid", "junk"]:
        j, errs, fl = load(p, c)
        s, w = cpu(p, c)
        k = cnt(p, c)
        gp = j["requests"]["succeeded"] / j["window"]["measured_s"]
        p99 = (j["latency"]["total"].get("p99_us") or 0) / 1e3
        if c == "none":
            base = (gp, s / max(k["requests"], 1))
        ratio = gp / base[0] if base[0] else float("nan")
        sent = fl.get("valid", 0) + fl.get("junk_random", 0) + fl.get("junk_header", 0)
        # Every legitimate connection makes one request (load's default) and
        # one handshake; what the counters hold beyond the requests answered
        # is the flood's (server-observed, warm-up included like the CPU).
        conns = max(k["accepted"] - k["requests"], 0)
        hs = max(k["full"] + k["resumed"] - k["requests"], 0)
        refused = k["refused_limit"] + k["shed_refuse"]
        retried, ignored = k["retried"], k["shed_ignore"]
        failed = max(conns - hs, 0)
        dropped = max(sent - conns - retried - refused - ignored, 0)
        cost = ""
        # Per Initial not answered with a handshake: only when they are a
        # tenth of the flood or more; a handful leaves the cell's CPU
        # noise divided by a handful, which is not a cost.
        if c != "none" and sent - hs >= max(sent // 10, 1):
            rest = s - k["requests"] * base[1] - hs * full_us / 1e6
            us = rest * 1e6 / (sent - hs)
            cost = f"{us:18.1f} {100 * us / full_us:5.1f} %"
        if c == "none":
            sent = conns = hs = failed = dropped = 0
        rate = sent / fl["elapsed_s"] if fl.get("elapsed_s") else 0
        print(f"{p:15} {c:5} {gp:7.1f} {ratio:5.3f} {p99:7.1f} {errs:4d} {s / w:4.2f} {sent:6d} {rate:7.0f} "
              f"{hs:6.0f} {retried:6.0f} {refused:6.0f} {ignored:6.0f} {failed:6.0f} {dropped:7.0f} {cost}")
print()
print("hs: flood handshakes the server answered with a ServerHello (its full + resumed handshakes")
print("less the requests answered); failed: flood attempts accepted that ended before one (e.g. junk")
print("quinn took for an Initial, closed with a protocol violation); dropped: sent (client-observed)")
print("less every attempt the server counted (quinn dropped them silently). us/Initial: the cell's")
print("server CPU less its requests at the no-flood cell's CPU per request and its flood handshakes")
print("at a full handshake's, per flood Initial not answered with a handshake (blank when those")
print("are under a tenth of the flood). sent/s: the flood's")
print("achieved rate (client-observed; its thread shares CPU 1 with the load). busy: server CPU share.")
PY
