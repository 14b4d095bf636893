#!/usr/bin/env bash
# Schema check of the Kubernetes manifests in this directory, without a
# cluster: kubernetes-validate (PyPI) carries the Kubernetes OpenAPI schemas
# of each release and validates offline; --strict rejects unknown fields.
# Installs it into a virtualenv under target/ on first use. Under CI=true a
# validator that cannot be installed is a failure; elsewhere a loud skip.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/k8s-validate-venv"
version="1.37.0"
k8s="1.33.0"

fail_or_skip() {
  if [ "${CI:-}" = "true" ]; then
    echo "deploy/kubernetes/validate.sh: FAILED: $1" >&2
    exit 1
  fi
  echo "deploy/kubernetes/validate.sh: SKIPPED: $1" >&2
  exit 0
}

if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv python3-pip
      rm -rf "$venv"
      python3 -m venv "$venv" || fail_or_skip "python3 -m venv does not work"
    else
      fail_or_skip "python3 -m venv does not work; install python3-venv"
    fi
  fi
  "$venv/bin/pip" install -q "kubernetes-validate==$version" \
    || fail_or_skip "pip install kubernetes-validate==$version failed"
fi

cd "$here"
echo "kubernetes-validate $version, Kubernetes $k8s schemas, strict:"
"$venv/bin/kubernetes-validate" --strict -k "$k8s" job.yaml merge-pod.yaml
