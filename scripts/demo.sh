#!/usr/bin/env bash
# Ingest data/corpus into the embedded LanceDB store, then answer the sample queries.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false
clef-pipelines ingest --config data/demo.yaml
mapfile -t queries < <(grep -v '^[[:space:]]*$' data/queries.txt)
clef-pipelines query "${queries[@]}" --config data/demo.yaml --top-k 3
