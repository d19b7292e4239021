#!/usr/bin/env bash
# Ingest data/corpus into the embedded LanceDB store, then answer the sample queries.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false
clef-pipelines ingest --config data/demo.yaml
while IFS= read -r q; do
  [ -z "$q" ] && continue
  echo
  echo "Q: $q"
  clef-pipelines query "$q" --config data/demo.yaml --top-k 3
done < data/queries.txt
