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
  # Emptied here, before serve starts: the redirection below truncates in
  # the child, after the fork, so the first look could otherwise read the
  # previous serve's lines (its URL and a CA file already deleted) and go
  # on with a server that is not there ("serve did not start", nothing on
  # stderr; or "cannot read CA file" in the load).
  : >"$dir/serve.out"
  : >"$dir/serve.err"
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
