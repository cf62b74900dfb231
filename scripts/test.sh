#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite, then ruff.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
