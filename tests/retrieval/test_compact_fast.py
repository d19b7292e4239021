"""`compact`'s fast path (`cli.compact_cmd.fast_main`, taken by the console script's `app()`)
prints what the typer command prints, and leaves to typer what it does not parse."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from clef_pipelines.cli.compact_cmd import parse_compact_args
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import PASSAGES, PLANTED, QUERY, judge

DEFAULTS = {
    "docs": None,
    "input_file": None,
    "budget": None,
    "gate": False,
    "verbose": False,
    "as_json": False,
    "config": None,
}


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["-q", "Q", "-d", "a"], {"query_text": "Q", "docs": ["a"]}),
        (
            ["--query=Q", "--doc", "a", "-d", "b", "--budget=7", "--gate", "-v", "--json"],
            {"query_text": "Q", "docs": ["a", "b"], "budget": 7, "gate": True, "verbose": True}
            | {"as_json": True},
        ),
        (
            ["-i", "p.jsonl", "-q", "-v", "--budget", "1", "--no-gate", "-c", "c.yaml"],
            {"query_text": "-v", "input_file": Path("p.jsonl"), "budget": 1}
            | {"config": Path("c.yaml")},
        ),
        (
            ["-q", "A", "-q", "B", "--budget", "3", "--budget", "4"],
            {"query_text": "B", "budget": 4},
        ),
    ],
)
def test_parse_takes_the_plain_forms(args: list[str], want: dict[str, Any]) -> None:
    assert parse_compact_args(args) == {**DEFAULTS, **want}


@pytest.mark.parametrize(
    "args",
    [
        [],  # no --query: typer's usage error
        ["-d", "a"],
        ["-q", "Q", "--help"],
        ["-qQ", "-d", "a"],  # a short option with its value attached
        ["-q", "Q", "-vq", "R"],  # short flags together
        ["-q", "Q", "--budget", "0"],
        ["-q", "Q", "--budget", "many"],
        ["-q", "Q", "--unknown"],
        ["-q", "Q", "positional"],
        ["-q", "Q", "--json=yes"],
        ["-q", "Q", "--"],
        ["-q", "--"],
        ["-q"],  # no value
    ],
)
def test_parse_leaves_the_rest_to_typer(args: list[str]) -> None:
    assert parse_compact_args(args) is None


RUN = textwrap.dedent(
    """
    import sys
    from clef_pipelines.cli.main import app, typer_app
    which, args = sys.argv[1], sys.argv[2:]
    (app if which == "fast" else typer_app())(["compact", *args])
    """
)
_MS = re.compile(r" *\d+(\.\d+)? ms")


def _untimed(value: Any) -> Any:
    """`value` without its timings (`ms`, `total_ms`), which differ from run to run."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("ms", "total_ms")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _run(which: str, args: list[str], cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "CLEF_TEST_KEY": "test-key", "COLUMNS": "200", "NO_COLOR": "1"}
    env.pop("CLEF_PIPELINES_CONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-c", RUN, which, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )
    out = proc.stdout
    if out.lstrip().startswith("{"):
        out = json.dumps(_untimed(json.loads(out)), indent=1, sort_keys=True)
    return proc.returncode, _MS.sub(" N ms", out), _MS.sub(" N ms", proc.stderr)


def test_fast_path_prints_what_the_typer_command_prints(fake: FakeServer, tmp_path: Path) -> None:
    fake.answer_with(judge())
    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        f"data_dir: {tmp_path / 'state'}\n"
        "clef:\n  backend: self-hosted\n"
        f"  base_url: {fake.base_url}\n  api_key_env: CLEF_TEST_KEY\n  cache: false\n"
    )
    (tmp_path / "p.jsonl").write_text(
        "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(PASSAGES))
    )
    (tmp_path / "bad.yaml").write_text("clef:\n  backend: nope\n  cach: false\n")
    cases = [
        ["-q", QUERY, "-i", "p.jsonl", "--json", "--budget", "200"],
        [f"--query={QUERY}", "-d", PASSAGES[0], "-d", PLANTED, "--budget=45"],
        ["-q", QUERY, "-i", "p.jsonl", "-v", "--gate", "-c", str(cfg)],
        ["-q", QUERY, "-d", PASSAGES[3], "--no-gate", "--json"],
        ["-q", QUERY],  # no passages
        ["-q", QUERY, "-i", "missing.jsonl"],  # cannot read it
        ["-q", QUERY, "-d", PASSAGES[0], "-c", "bad.yaml"],  # invalid config
        ["--help"],  # typer's, both ways
        ["-q", QUERY, "--budget", "0", "-d", "x"],  # typer's usage error, both ways
    ]
    for args in cases:
        fast = _run("fast", args, tmp_path)
        slow = _run("typer", args, tmp_path)
        assert fast == slow, args
        if args == ["--help"]:
            assert "--budget" in fast[1] and fast[0] == 0
    assert _run("fast", cases[4], tmp_path)[0] == 2
    assert "no passages" in _run("fast", cases[4], tmp_path)[2]
    assert "did you mean 'clef.cache'?" in _run("fast", cases[6], tmp_path)[2]


# What a cold `compact` must not import: pydantic (about 0.5 G instructions, the whole gap to
# clef-compactor), PyYAML for a JSON config, and no store, embedder or Dagster.
HEAVY = ("pydantic", "pydantic_core", "yaml", "dagster", "lancedb", "torch", "typer")
HEAVY += ("clef_pipelines.stores", "clef_pipelines.embedding", "clef_pipelines.config")
WATCH = textwrap.dedent(
    f"""
    import atexit, sys
    heavy = {HEAVY!r}
    atexit.register(
        lambda: print(
            "IMPORTED", *sorted(m for m in heavy if m in sys.modules), file=sys.stderr
        )
    )
    from clef_pipelines.cli.main import app
    app(["compact", *sys.argv[1:]])
    """
)


def test_a_cold_compact_imports_no_pydantic_and_prints_what_the_models_give(
    fake: FakeServer, tmp_path: Path
) -> None:
    """The bench's case (a JSON config) reads its settings and Clef's answers without
    pydantic; the same run with a setting only the models read (`steering.screen`, at its
    default) goes through the models and prints the same."""
    fake.answer_with(judge())
    clef = {"backend": "self-hosted", "base_url": fake.base_url, "api_key_env": "CLEF_TEST_KEY"}
    light = {"data_dir": str(tmp_path / "state"), "clef": {**clef, "cache": False}}
    (tmp_path / "light.json").write_text(json.dumps(light))
    (tmp_path / "models.json").write_text(json.dumps({**light, "steering": {"screen": {}}}))
    (tmp_path / "p.jsonl").write_text(
        "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(PASSAGES))
    )
    env = {**os.environ, "CLEF_TEST_KEY": "test-key"}
    env.pop("CLEF_PIPELINES_CONFIG", None)
    outs = {}
    for name in ("light", "models"):
        args = ["-q", QUERY, "-i", "p.jsonl", "--json", "--budget", "200", "-c", f"{name}.json"]
        proc = subprocess.run(
            [sys.executable, "-c", WATCH, *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        imported = proc.stderr.strip().splitlines()[-1].split()
        outs[name] = (_untimed(json.loads(proc.stdout)), imported)
    assert outs["light"][1] == ["IMPORTED"]
    assert "pydantic" in outs["models"][1]
    assert outs["light"][0] == outs["models"][0]
    assert outs["light"][0]["passages"] and outs["light"][0]["dropped"]
    assert not outs["light"][0]["degraded"]
