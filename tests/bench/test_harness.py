"""The benchmark harness (bench/): one entry point that lists every benchmark module, the same
command-line contract for each (`--quick`, `--json`), and no `sys.path` edits or `tests`
imports anywhere under bench/. Runs no benchmark."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import _common

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def _modules() -> set[str]:
    return {p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"}


def test_every_module_is_a_listed_benchmark_or_a_helper() -> None:
    helpers = {m for m in _modules() if m.startswith("_") or m in _common.HELPERS}
    assert _modules() - helpers == set(_common.BENCHMARKS)


def test_list_names_every_benchmark() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "bench", "list"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == list(_common.BENCHMARKS)
    for line in out.splitlines():
        assert len(line.split(maxsplit=1)) == 2, f"no description: {line!r}"


@pytest.mark.parametrize("name", _common.BENCHMARKS)
def test_benchmark_contract(name: str) -> None:
    mod, parser = _common.build_parser(name)
    options = {s for a in parser._actions for s in a.option_strings}
    assert {"--quick", "--json"} <= options
    assert callable(mod.run)
    # --quick's defaults name flags of the benchmark's own parser.
    dests = {a.dest for a in parser._actions}
    assert set(mod.QUICK) <= dests, set(mod.QUICK) - dests
    _, args = _common.parse(name, ["--quick"])
    for key, value in mod.QUICK.items():
        assert getattr(args, key) == value
    # A flag given on the command line wins over --quick's default.
    _, plain = _common.parse(name, [])
    assert plain.quick is False and plain.json is None
    _, to_file = _common.parse(name, ["--json", "out.json"])
    assert to_file.json == "out.json"


def test_a_flag_given_wins_over_quick() -> None:
    _, args = _common.parse("ingest", ["--quick", "--limit", "7"])
    assert (args.limit, args.embedder) == (7, "hash")
    _, args = _common.parse("ingest", ["--limit", "7"])
    assert (args.limit, args.embedder) == (7, "minilm")


def _sources() -> list[Path]:
    # bench/ and the one-off benches moved to lab/bench/ (run as `python -m lab.bench.NAME`).
    # Not the peers' venvs (bench/.peer-venv, bench/.compactor-venv: ignored by git).
    found = [*BENCH.rglob("*.py"), *(REPO / "lab" / "bench").rglob("*.py")]
    return sorted(p for p in found if not any(part.startswith(".") for part in p.parts))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_sys_path_edit_and_no_tests_import(path: Path) -> None:
    source = path.read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        is_sys_path = (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )
        assert not is_sys_path, f"{path.name}:{node.lineno}: sys.path"
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] != "tests", f"{path.name}:{node.lineno}"
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module.split(".")[0] != "tests", f"{path.name}:{node.lineno}"
    assert "sys.path" not in source, path.name


def _fake_benchmark(monkeypatch: pytest.MonkeyPatch, run) -> None:  # type: ignore[no-untyped-def]
    import types

    fake = types.ModuleType("bench._fake")
    fake.__doc__ = "A fake benchmark."
    fake.QUICK = {"size": 1}
    fake.add_arguments = lambda p: p.add_argument("--size", type=int, default=10)
    fake.run = run
    monkeypatch.setitem(sys.modules, "bench._fake", fake)
    monkeypatch.setattr(_common, "BENCHMARKS", (*_common.BENCHMARKS, "_fake"))


def test_json_on_stdout_and_the_tables_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(args):  # type: ignore[no-untyped-def]
        print("| a table |")
        subprocess.run(["echo", "a child's output"], check=True)
        return {"size": args.size}

    _fake_benchmark(monkeypatch, run)
    assert _common.run_benchmark("_fake", ["--quick", "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out) == {"size": 1}
    assert "| a table |" in err and "a child's output" in err
    assert _common.run_benchmark("_fake", ["--json", str(tmp_path / "r.json")]) == 0
    out, _ = capfd.readouterr()
    assert "| a table |" in out
    assert json.loads((tmp_path / "r.json").read_text()) == {"size": 10}


def test_a_skip_is_reported_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(args):  # type: ignore[no-untyped-def]
        raise _common.Skip("no peer venv", required=False)

    _fake_benchmark(monkeypatch, run)
    monkeypatch.setenv("BENCH_STATUS_FILE", str(tmp_path / "status.json"))
    assert _common.run_benchmark("_fake", ["--quick"]) == _common.SKIPPED
    assert "skipped: no peer venv" in capfd.readouterr().err
    status = json.loads((tmp_path / "status.json").read_text())
    assert status == {"status": "skipped", "reason": "no peer venv", "required": False}
