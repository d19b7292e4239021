"""`query -v`, `query --json` and `ask` on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import CONFLICT, PLANTED, QUERY, judge

runner = CliRunner()


def write_config(tmp_path: Path, col: Any, **extra: Any) -> str:
    s = col.settings
    raw = {
        "data_dir": s.data_dir,
        "collection": col.name,
        "embedder": {"kind": "hash", "dimension": 64},
        "store": {"kind": "memory"},
        "clef": s.clef.model_dump(exclude_none=True),
        **extra,
    }
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_query_verbose_and_json(fake: FakeServer, collection_factory: Any, tmp_path: Path) -> None:
    fake.answer_with(judge())
    col = collection_factory(fake)
    cfg = write_config(tmp_path, col)
    human = runner.invoke(app, ["query", QUERY, "-v", "-c", cfg])
    assert human.exit_code == 0, human.output
    assert "dropped" in human.output and "instructs_ai" in human.output
    assert "conflict" in human.output and "trace:" in human.output
    out = runner.invoke(
        app, ["query", QUERY, "other question about bandwidth", "--json", "-c", cfg]
    )
    assert out.exit_code == 0, out.output
    results = json.loads(out.output)
    assert [r["query"] for r in results] == [QUERY, "other question about bandwidth"]
    first = results[0]
    assert PLANTED not in [p["text"] for p in first["passages"]]
    assert [c["text"] for c in first["conflicts"]] == [CONFLICT]
    assert first["trace"]["clef_requests"] <= 4


def test_ask_abstains_without_llm(
    fake: FakeServer, collection_factory: Any, tmp_path: Path
) -> None:
    fake.answer_with(judge(gate_p=0.05))
    col = collection_factory(fake)
    # No model configured: an abstention must not even need one.
    cfg = write_config(tmp_path, col)
    out = runner.invoke(app, ["ask", QUERY, "-c", cfg])
    assert out.exit_code == 0, out.output
    assert "Not in the documents." in out.output and "no LLM was called" in out.output
    bad = runner.invoke(app, ["query", QUERY, "--where", "[1]", "-c", cfg])
    assert bad.exit_code == 2 and "JSON object" in bad.output


def test_query_mode_option(collection_factory: Any, tmp_path: Path) -> None:
    col = collection_factory(None)
    cfg = write_config(tmp_path, col)
    for mode in ("text", "hybrid"):
        out = runner.invoke(app, ["query", QUERY, "--json", "--mode", mode, "-c", cfg])
        assert out.exit_code == 0, out.output
        (result,) = json.loads(out.output)
        recall = next(s for s in result["trace"]["stages"] if s["stage"] == "recall")
        assert recall["recall_mode"] == mode
        assert result["passages"]
    bad = runner.invoke(app, ["query", QUERY, "--mode", "sparse", "-c", cfg])
    assert bad.exit_code != 0


def test_query_and_ask_without_a_config_say_so_and_create_nothing(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A first-day user in a folder without a config gets told, not an empty `./.clef` store
    searched with every default."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    for command in ("query", "ask"):
        out = runner.invoke(app, [command, QUERY])
        assert out.exit_code == 2, out.output
        flat = " ".join(out.output.split())
        assert "no config found" in flat and "clef-pipelines init" in flat, out.output
    assert list(tmp_path.iterdir()) == []
