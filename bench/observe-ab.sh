#!/usr/bin/env bash
# Issue 35's cost target: `load --keylog` and `load --hdr-log` cost the load
# client at most 2 % CPU per handshake. One binary, A/B interleaved.
#
#   bench/observe-ab.sh TLSLAB [RUNS] [SECONDS] [CLIENTS]
#
# The server (`serve`, one worker, TLS 1.3) runs pinned to CPU 0; `load`
# runs pinned to CPU 1 with one engine thread, CLIENTS closed-loop clients,
# one request (and one full handshake) per connection on GET /bytes/100.
# Each run measures, in turn: base (no flag), keylog (--keylog FILE),
# hdr (--hdr-log FILE) and both; the order rotates every run. Client CPU
# per handshake is the load report's client_cpu.per_handshake_us. Prints
# one line per cell and run, then the medians over RUNS and each flag's
# median / base median. Every address is 127.0.0.1.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TLSLAB [RUNS] [SECONDS] [CLIENTS]" >&2; exit 2; }
BIN=$1 RUNS=${2:-5} SECS=${3:-5} CLIENTS=${4:-8}
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
command -v taskset >/dev/null || { echo "$0: taskset is missing (apt-get install util-linux)" >&2; exit 2; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

# shellcheck source=bench/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"
serve_start --threads 1 --tls 1.3

cell() { # name run load-args...
  local name=$1 run=$2; shift 2
  rm -f "$dir/keys" "$dir/run.hlog"
  taskset -c 1 "$BIN" load "$URL/bytes/100" --cacert "$CA" --threads 1 --no-progress \
    -c "$CLIENTS" -d "${SECS}s" --tls 1.3 --json "$dir/$name.$run.json" "$@" \
    </dev/null >/dev/null 2>"$dir/$name.$run.err" ||
    { echo "$0: load $name failed: $(cat "$dir/$name.$run.err")" >&2; exit 1; }
  python3 - "$dir/$name.$run.json" "$name" "$run" <<'EOF' | tee -a "$dir/results"
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]} run={sys.argv[3]} handshakes={j['requests']['succeeded']} "
      f"client_us={j['client_cpu']['per_handshake_us']:.1f}")
EOF
}

echo "# $(date -u +%FT%TZ) load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$dir/results"
cells=(base keylog hdr both)
for run in $(seq "$RUNS"); do
  for k in 0 1 2 3; do
    c=${cells[$(( (k + run) % 4 ))]}
    case $c in
      base) cell base "$run" ;;
      keylog) cell keylog "$run" --keylog "$dir/keys" ;;
      hdr) cell hdr "$run" --hdr-log "$dir/run.hlog" ;;
      both) cell both "$run" --keylog "$dir/keys" --hdr-log "$dir/run.hlog" ;;
    esac
  done
done
python3 - "$dir/results" <<'EOF'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    name, *kv = line.split()
    cells.setdefault(name, []).append(float(dict(x.split("=") for x in kv)["client_us"]))
base = statistics.median(cells["base"])
print(f"\nmedians over {len(cells['base'])} runs, client CPU per handshake:")
for name, v in cells.items():
    m = statistics.median(v)
    print(f"  {name:7} {m:7.1f} us ({min(v):.1f}-{max(v):.1f})  / base {m / base:.3f}")
EOF
