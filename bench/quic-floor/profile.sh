#!/usr/bin/env bash
# Where each server spends its CPU: reads the perf.data files that
# `PERF=DIR ./run.sh` left in DIR (one per engine, sampled on cpu-clock) and
# prints, per engine, the top 10 symbols and the samples split by component.
# Usage: bench/quic-floor/profile.sh DIR
set -euo pipefail
dir=${1:?usage: profile.sh DIR (the PERF= directory of run.sh)}
command -v perf >/dev/null || { echo "error: perf missing: apt-get install -y linux-perf" >&2; exit 2; }
for data in "$dir"/*.data; do
    e=$(basename "$data" .data)
    perf report -i "$data" --no-children --sort dso,symbol --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' >"$dir/$e.txt"
    echo "## $e ($(perf report -i "$data" --stdio 2>/dev/null | sed -n 's/^# Samples: \([^ ]*\).*/\1/p' | head -1) samples)"
    echo
    echo "| % of samples | symbol |"
    echo "|---:|---|"
    head -10 "$dir/$e.txt" | awk '{ p = $1; d = $2; $1 = ""; $2 = ""; $3 = ""; s = $0
        gsub(/^ +| +- -$| -$/, "", s); gsub(/\|/, "\\|", s); if (d ~ /kernel/) s = "[k] " s
        printf "| %s | `%s` |\n", p, substr(s, 1, 90) }'
    echo
    echo "| component | % of samples |"
    echo "|---|---:|"
    awk '{ p = $1; sub("%", "", p); d = $2; $1 = ""; $2 = ""; $3 = ""; s = $0; c = "other (user)"
        if (d ~ /kernel/) c = "kernel"
        else if (s ~ /aws_lc|curve25519|nistz|bignum|sha256|sha512|p256|aes_|gcm|HMAC|EVP_|SHA|x25519|mlkem|MLKEM/) c = "aws-lc crypto"
        else if (s ~ /malloc|free|realloc|memmove|memcpy|memset|memcmp|_int_|unlink_chunk/) c = "libc memory"
        else if (s ~ /quinn_proto/) c = "quinn-proto"
        else if (s ~ /quinn/) c = "quinn"
        else if (s ~ /s2n_quic/) c = "s2n-quic"
        else if (s ~ /s2n_/) c = "s2n-tls (C)"
        else if (s ~ /rustls/) c = "rustls"
        else if (s ~ /tokio|mio/) c = "tokio"
        t[c] += p } END { for (c in t) printf "| %s | %.1f |\n", c, t[c] }' "$dir/$e.txt" | sort -t'|' -k3 -gr
    echo
done
