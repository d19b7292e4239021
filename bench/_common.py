"""The harness's shared parts: the list of benchmarks, the common flags (`--quick`, `--json`),
running one benchmark, and the quick set that `make bench` runs.

A benchmark is a module of this package with

- ``add_arguments(parser)``: its own flags (the old script's, unchanged);
- ``run(args) -> dict``: runs it, prints its human-readable tables, returns its results;
- ``QUICK``: the flag defaults that ``--quick`` applies (a run under two minutes on two cores);
  a flag given on the command line still wins.

The harness adds ``--quick`` and ``--json [OUT]`` to every benchmark's parser. With ``--json``
alone the human-readable output goes to stderr and the results (``run``'s dict) to stdout as
JSON; with ``--json OUT`` they are written to OUT as well as the usual output.

A benchmark that cannot run here (the shared data, the peer's venv or PostgreSQL missing)
raises ``Skip``; ``required=True`` marks what the quick set's contract needs (see
bench/README.md): such a skip fails under ``CI=true``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The labelled data beside the repository (the rule of tests/shared_data.py).
SHARED_DATA = Path(os.environ.get("CLEF_SHARED_DATA") or REPO.parent / "shared" / "data")
SCIFACT = SHARED_DATA / "scifact"

#: Every maintained benchmark, in the order of `list` and of the quick set.
BENCHMARKS: tuple[str, ...] = (
    "ingest",
    "refresh",
    "scale",
    "ingest_peer",
    "ingest_memory",
    "retrieval",
    "cold_query",
    "stores",
    "hybrid",
    "api",
    "compact",
    "eval",
    "guard_cost",
    "embedders",
    "guard_quality",
    "steering",
    "clef",
    "object_store",
)
#: Modules of the package that are helpers, not benchmarks.
HELPERS: tuple[str, ...] = ("_common", "_pg", "fake_systemone", "__main__")

#: Exit status of a benchmark that was skipped (sysexits' EX_TEMPFAIL).
SKIPPED = 75


class Skip(Exception):  # noqa: N818 - it is not an error
    """This benchmark cannot run here; ``reason`` says what is missing."""

    def __init__(self, reason: str, *, required: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.required = required


def need_shared(path: Path) -> Path:
    """``path`` under the shared data, or a required `Skip` naming it and CLEF_SHARED_DATA."""
    if not path.exists():
        raise Skip(
            f"shared data missing: {path} (set CLEF_SHARED_DATA to the folder that holds it)",
            required=True,
        )
    return path


def module(name: str) -> ModuleType:
    if name not in BENCHMARKS:
        raise SystemExit(f"no benchmark {name!r}; `python -m bench list` names them")
    return importlib.import_module(f"bench.{name}")


def describe(mod: ModuleType) -> str:
    """The docstring's first paragraph, on one line."""
    first = (mod.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(first.split())


def build_parser(name: str) -> tuple[ModuleType, argparse.ArgumentParser]:
    mod = module(name)
    parser = argparse.ArgumentParser(
        prog=f"python -m bench run {name}",
        description=mod.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mod.add_arguments(parser)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="A small run (under two minutes on two cores): "
        + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in mod.QUICK.items())
        + " unless given.",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="OUT",
        help="The results as JSON: on stdout (the tables go to stderr), or written to OUT.",
    )
    return mod, parser


def parse(name: str, argv: list[str]) -> tuple[ModuleType, argparse.Namespace]:
    mod, parser = build_parser(name)
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**mod.QUICK)
        args = parser.parse_args(argv)
    return mod, args


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything printed, or written to fd 1 (children included), goes to stderr meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _status(payload: dict[str, Any]) -> None:
    out = os.environ.get("BENCH_STATUS_FILE")
    if out:
        Path(out).write_text(json.dumps(payload))


def run_benchmark(name: str, argv: list[str]) -> int:
    """``python -m bench run NAME ARGV``: the exit status (0, or SKIPPED)."""
    mod, args = parse(name, argv)
    to_stdout = args.json == "-"
    try:
        if to_stdout:
            with stdout_to_stderr():
                result = mod.run(args)
        else:
            result = mod.run(args)
    except Skip as skip:
        print(f"bench {name}: skipped: {skip.reason}", file=sys.stderr)
        _status({"status": "skipped", "reason": skip.reason, "required": skip.required})
        return SKIPPED
    text = json.dumps(result, indent=1, default=str)
    if to_stdout:
        print(text)
    elif args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    _status({"status": "ok"})
    return 0


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH, for a child process that
    imports this worktree's `bench` and `clef_pipelines` (never the venv's editable install)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *rest]), **extra}


def bench_cmd(name: str, *args: str) -> list[str]:
    """The command line of `python -m bench run NAME ARGS` (run it with cwd=REPO or
    env=child_env())."""
    return [sys.executable, "-m", "bench", "run", name, *args]


def run_quick_all(names: list[str] | None = None) -> int:
    """Every maintained benchmark with --quick, one after another, each in its own process.

    A skip is reported with its reason and does not fail the run, unless CI is set and the
    skip is one the quick set's contract needs (``Skip(required=True)``: the shared data). A
    failing benchmark fails the run, after the others have run."""
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    rows: list[tuple[str, str, float, str]] = []
    failed = False
    status_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-status-{os.getpid()}.json"
    for name in names or BENCHMARKS:
        print(f"\n## bench {name} --quick\n", flush=True)
        status_file.unlink(missing_ok=True)
        started = time.perf_counter()
        proc = subprocess.run(
            bench_cmd(name, "--quick"),
            cwd=REPO,
            env=child_env(BENCH_STATUS_FILE=str(status_file)),
        )
        wall = time.perf_counter() - started
        status = json.loads(status_file.read_text()) if status_file.exists() else {}
        if proc.returncode == 0:
            rows.append((name, "ok", wall, ""))
        elif proc.returncode == SKIPPED:
            required = bool(status.get("required"))
            verdict = "FAILED (skipped under CI)" if ci and required else "skipped"
            failed |= ci and required
            rows.append((name, verdict, wall, status.get("reason", "")))
        else:
            failed = True
            rows.append((name, f"FAILED (exit {proc.returncode})", wall, ""))
    status_file.unlink(missing_ok=True)
    print("\n| benchmark | result | wall s | note |\n|---|---|---:|---|")
    for name, verdict, wall, note in rows:
        print(f"| {name} | {verdict} | {wall:.1f} | {note} |")
    return 1 if failed else 0


def md_rows(header: str, rows: list[str]) -> list[dict[str, str]]:
    """Markdown table rows as dicts keyed by the header's cells (for `--json` of benchmarks
    whose results are the rows they print)."""

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    keys = cells(header)
    return [dict(zip(keys, cells(r), strict=False)) for r in rows]
