#!/usr/bin/env bash
# Set up, ingest the shipped UD English EWT sample with the embedded model, print Clark et al.'s Table 1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
STORE=${ATLAS_STORE:-atlas-store}  # the default store: the next atlas command finds it
.venv/bin/atlas ingest --corpus samples/ud/en_ewt-ud-dev-sample.conllu --text words --store "$STORE"  # Clark et al.'s input
.venv/bin/atlas query "best head per dependency relation" --store "$STORE" --param min_count=50
echo "next: .venv/bin/atlas runs --store $STORE; .venv/bin/atlas queries; .venv/bin/atlas report --store $STORE --out report.html" >&2
