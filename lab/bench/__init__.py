"""One-off benchmark investigations: each measured one design question at one date (most of them
issue 13's memory and time work on large sources), kept for the record and for rerunning by
hand. Not maintained, not in `make bench`; the maintained benchmarks are the `bench` package
(`python -m bench list`). Run one from the repository root:

    PYTHONPATH=$PWD .venv/bin/python -m lab.bench.NAME --help

Many read a kept `python -m bench run scale --keep DIR` run. `--compare REV,.` / `--code DIR`
(parse_step, refresh_sync, store_sync) run another commit's `clef_pipelines` in a child process
first on PYTHONPATH (`lab.bench._code_at`).
"""
