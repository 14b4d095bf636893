#!/usr/bin/env bash
# What `tlslab lab --explain` costs while on (issue 31, item 4). One
# binary, three modes interleaved, ROUNDS rounds:
#
#   bench/explain-ab.sh TLSLAB [ROUNDS] [CELL]
#
#   off    tlslab lab --cell CELL             the counting allocator installed, not counting
#   alloc  the same with --explain, as nobody: allocations counted; no perf
#          counters (an ordinary user cannot open tracepoints)
#   all    the same with --explain, as root: allocations and the per-thread
#          perf counters (syscalls, writes, task clock)
#
# Prints, for the lab's keep-alive cells (plain HTTP, TLS 1.2 and 1.3 with
# both keys), the server CPU per request of each mode over off's in the
# same round (server-observed), and req/s over off's (client-observed)
# where the client was not starved (busy ≥ 95 % in both runs): per cell
# and pooled, median (min–max). Needs root (for the `all` mode and to run
# the `alloc` mode as nobody, with setpriv). Every address is 127.0.0.1.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [ROUNDS] [CELL]" >&2; exit 2; }
BIN=$1 ROUNDS=${2:-5} CELL=${3:-1s}
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: run as root (the all mode opens tracepoints)" >&2; exit 2; }
command -v setpriv >/dev/null || { echo "$0: setpriv is missing (apt-get install util-linux)" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 777 "$dir"
# nobody must be able to run the binary.
cp "$BIN" "$dir/tlslab"
chmod 755 "$dir/tlslab"
for round in $(seq "$ROUNDS"); do
  for mode in off alloc all; do
    echo "== round $round $mode $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >&2
    out="$dir/$mode-$round.json"
    case $mode in
      off) "$dir/tlslab" lab --cell "$CELL" --json "$out" >/dev/null 2>"$dir/err" ;;
      alloc) setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$dir/tlslab" lab --cell "$CELL" --explain --json "$out" >/dev/null 2>"$dir/err" ;;
      all) "$dir/tlslab" lab --cell "$CELL" --explain --json "$out" >/dev/null 2>"$dir/err" ;;
    esac || { echo "   failed (round left out): $(tail -1 "$dir/err")" >&2; rm -f "$out"; }
  done
done
python3 - "$dir" "$ROUNDS" <<'EOF'
import json, os, statistics as st, sys
d, rounds = sys.argv[1], int(sys.argv[2])
cells = [("plain_keep_alive", None, None)] + [
    ("tls_keep_alive", v, k) for v in ("TLSv1.2", "TLSv1.3") for k in ("ecdsa-p256", "rsa2048")
]
runs = {}
for m in ("off", "alloc", "all"):
    for r in range(1, rounds + 1):
        p = f"{d}/{m}-{r}.json"
        if os.path.exists(p):
            for c in json.load(open(p))["cells"]:
                runs[(m, (c["mode"], c["version"], c["key"]), r)] = c
def show(xs):
    return f"{st.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f}, n={len(xs)})" if xs else "-"
pooled = {m: ([], []) for m in ("alloc", "all")}
print("cell | mode | server CPU/req ÷ off | req/s ÷ off (client not starved) | off server CPU/req µs")
for cell in cells:
    for m in ("alloc", "all"):
        cpu, rps, base = [], [], []
        for r in range(1, rounds + 1):
            a, o = runs.get((m, cell, r)), runs.get(("off", cell, r))
            if not (a and o):
                continue
            cpu.append(a["server_cpu_us_per_request"] / o["server_cpu_us_per_request"])
            base.append(o["server_cpu_us_per_request"])
            if a["client_busy"] >= 0.95 and o["client_busy"] >= 0.95:
                rps.append(a["requests_per_s"] / o["requests_per_s"])
        pooled[m][0].extend(cpu)
        pooled[m][1].extend(rps)
        name = " ".join(x for x in cell if x)
        print(f"{name} | {m} | {show(cpu)} | {show(rps)} | {st.median(base) if base else float('nan'):.2f}")
for m in ("alloc", "all"):
    print(f"pooled | {m} | {show(pooled[m][0])} | {show(pooled[m][1])} |")
EOF
