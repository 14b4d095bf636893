#!/usr/bin/env bash
# tlslab against nginx, Apache, h2load, wrk, httperf and openssl s_time.
#
#   bench/peers.sh                 the full run (5 rounds; about 25 minutes)
#   bench/peers.sh --smoke         a short run that checks the harness (< 5 minutes)
#   bench/peers.sh --smoke --guard  ... and fails when keep-alive drifts (.ci/run):
#                                  serve > 1.25x nginx or load > 1.5x wrk CPU per request
#   bench/peers.sh --install-only  install the peers (Debian/Ubuntu, as root) and stop
#   bench/peers.sh --help          every option of bench/peers/peers.py
#
# Installs the peers with apt-get when one is missing and this runs as root,
# builds tlslab in release mode, then runs bench/peers/peers.py with the
# arguments given. Results: target/bench-peers/<UTC time>/report.md and
# results.json. Exit status: 0 done, 1 a run failed, 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for t in nginx apache2 h2load wrk httperf openssl taskset python3; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || need+=("$t")
done
[ -e /usr/lib/apache2/modules/mod_ssl.so ] || need+=(mod_ssl)
install_only=0
[ "${1:-}" = "--install-only" ] && install_only=1
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench/peers: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx apache2 nghttp2-client wrk httperf openssl \
      util-linux python3 linux-perf >/dev/null || \
    apt-get install -y -qq --no-install-recommends nginx apache2 nghttp2-client wrk httperf openssl \
      util-linux python3 >/dev/null
    # The packages start system services on their default ports; the
    # harness starts its own instances on 127.0.0.1 ephemeral ports.
    for s in nginx apache2; do
      (command -v service >/dev/null && service "$s" stop >/dev/null 2>&1) || true
    done
  else
    echo "bench/peers: missing ${need[*]}; run as root to install them (apt-get install nginx apache2 nghttp2-client wrk httperf openssl python3)" >&2
    exit 2
  fi
fi
[ "$install_only" = 1 ] && exit 0

case " $* " in
  *" --help "*|*" -h "*) exec python3 bench/peers/peers.py --help ;;
esac
cargo build --release -q
exec python3 bench/peers/peers.py "$@"
