#!/usr/bin/env bash
# Prepares one TPU VM worker: a Python 3.11/3.12 virtualenv in <repo>/.venv with jaxlab installed.
#
#   bash launch/setup_worker.sh [--if-missing] EXTRAS      e.g.  tpu,ogbench
#
# `launch.tpu copy` runs it after unpacking the tree (always installs); `launch.tpu run` runs it
# with --if-missing, which installs only when EXTRAS are not all recorded in .venv/jaxlab-extras.
# TPU VM images are Ubuntu 22.04 with Python 3.10, which jax >= 0.10 does not support: python3.11
# comes from apt when neither python3.12 nor python3.11 is on PATH. Exit 2 when none can be had.
set -euo pipefail

if_missing=0
if [ "${1:-}" = "--if-missing" ]; then
  if_missing=1
  shift
fi
extras="${1:-tpu}"
if ! [[ "$extras" =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]]; then
  echo "error: setup_worker.sh: bad extras list '$extras' (e.g. tpu,ogbench)" >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp=.venv/jaxlab-extras

if [ "$if_missing" = 1 ] && [ -x .venv/bin/python ] && [ -f "$stamp" ]; then
  missing=0
  for e in ${extras//,/ }; do
    grep -qx "$e" "$stamp" || missing=1
  done
  [ "$missing" = 0 ] && exit 0
fi

find_python() {
  command -v python3.12 || command -v python3.11 || true
}

if [ ! -x .venv/bin/python ]; then
  py=$(find_python)
  if [ -z "$py" ]; then
    echo "setup_worker.sh: no python3.11/3.12 on ${HOSTNAME:-worker}; installing python3.11 with apt" >&2
    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3.11-venv >&2 \
      || true
    py=$(find_python)
  fi
  if [ -z "$py" ]; then
    echo "error: jaxlab needs Python 3.11 or 3.12 on every worker and none could be installed" \
      "(apt-get install python3.11 python3.11-venv failed); use a TPU runtime with one" >&2
    exit 2
  fi
  if ! "$py" -m venv .venv; then
    echo "error: '$py -m venv' failed; install the matching -venv package" \
      "(e.g. sudo apt-get install python3.11-venv)" >&2
    exit 2
  fi
fi

.venv/bin/python -m pip install -q -e ".[${extras}]"
{ tr ',' '\n' <<< "$extras"; cat "$stamp" 2> /dev/null || true; } | sort -u > "$stamp.new"
mv "$stamp.new" "$stamp"
echo "setup_worker.sh: ${HOSTNAME:-worker}: $(.venv/bin/python --version) with .[${extras}]"
