#!/usr/bin/env bash
# The stress lane: tests marked `stress` (many processes at once, or a CLI subprocess the test
# times), each file in a process of its own, after the suite. In the four-worker suite the CLI
# subprocesses of these tests hung past their timeouts (CI, 6 December); alone they pass.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0 DAGSTER_DG_UPDATE_CHECK_ENABLED=0
status=0
for file in $(grep -rl "pytest.mark.stress" tests --include='test_*.py' | sort); do
  python -m pytest -q -p no:cacheprovider -m stress "$file" || status=1
done
exit $status
