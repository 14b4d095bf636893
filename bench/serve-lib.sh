# Sourced by the bench scripts that drive one `tlslab serve` on 127.0.0.1:
#   serve_start FLAGS...   starts "$BIN serve --listen 127.0.0.1:0
#                          --metrics 127.0.0.1:0 FLAGS" pinned to CPU 0,
#                          with its output in $dir/serve.{out,err}; sets pid,
#                          and from its start-up lines URL (https://...),
#                          METRICS and CA; exits 1 with serve's stderr if it
#                          has not printed them within 30 s.
# The caller sets BIN and dir (a temporary directory) and its EXIT trap.

field() { sed -n "s/^tlslab serve: $2 \([^ ]*\).*/\1/p" "$1"; }

serve_start() {
  taskset -c 0 "$BIN" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 "$@" \
    </dev/null >"$dir/serve.out" 2>"$dir/serve.err" &
  pid=$!
  for _ in $(seq 600); do
    [ -n "$(field "$dir/serve.out" ca)" ] && break
    sleep 0.05
  done
  URL=$(field "$dir/serve.out" https)
  METRICS=$(field "$dir/serve.out" metrics)
  CA=$(field "$dir/serve.out" ca)
  [ -n "$CA" ] || { echo "$0: serve did not start: $(cat "$dir/serve.err")" >&2; exit 1; }
}
