"""Damaged state on disk is one line naming what is damaged and the way out, a non-zero exit, not
a traceback: through the real CLI, on files damaged for real (a truncated Lance data file, a
table whose ``_versions`` folder is gone, Dagster's SQLite storage overwritten), and the way
out the line names works.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from tests.ingest.conftest import make_workspace

runner = CliRunner()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample corpus ingested once into LanceDB, with its Dagster home beside it."""
    root = tmp_path_factory.mktemp("damage") / "ws"
    root.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        ws = make_workspace(root, mp)
        result = runner.invoke(app, ["ingest", "--config", str(ws.config_path)])
        assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def ws(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the template with its config pointing at the copy; returns the config."""
    root = tmp_path / "ws"
    shutil.copytree(template, root)
    cfg = root / "clef-pipelines.yaml"
    raw = yaml.safe_load(cfg.read_text())
    raw["data_dir"] = str(root / "state")
    cfg.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    return cfg


def table(cfg: Path) -> Path:
    return cfg.parent / "state" / "lancedb" / "docs.lance"


def damage(cfg: Path, kind: str) -> str:
    """Damage the workspace; returns what the line must name."""
    if kind == "truncated":
        data = sorted((table(cfg) / "data").glob("*.lance"))[0]
        with data.open("r+b") as f:
            f.truncate(100)
        return f"data/{data.name} is truncated"
    if kind == "versions":
        shutil.rmtree(table(cfg) / "_versions")
        return "_versions folder is missing"
    runs = cfg.parent / "dagster" / "history" / "runs.db"
    runs.write_bytes(b"not a database " * 400)
    return "file is not a database"


def one_line(args: list[str], cfg: Path) -> str:
    result = runner.invoke(app, [*args, "--config", str(cfg)])
    # 1, or 2 where the command reports a store error as its own (query)
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output and "rustc" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    # The line may wrap on a narrow terminal: read it joined.
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("truncated", ["query", "sync"]),
        ("truncated", ["inspect", "--collection", "docs"]),
        ("versions", ["query", "sync"]),
        ("versions", ["inspect", "--collection", "docs"]),
    ],
)
def test_a_damaged_lance_table_is_one_line(ws: Path, kind: str, args: list[str]) -> None:
    what = damage(ws, kind)
    line = one_line(args, ws)
    assert what in line and str(table(ws)) in line and "restore" in line, line


@pytest.mark.parametrize("kind", ["truncated", "versions"])
def test_ingest_into_a_damaged_lance_table_is_one_line_and_the_way_out_works(
    ws: Path, kind: str
) -> None:
    what = damage(ws, kind)
    line = one_line(["ingest"], ws)
    assert what in line and f"rm -rf {table(ws)}" in line, line
    shutil.rmtree(table(ws))  # the way out the line names
    result = runner.invoke(app, ["ingest", "--config", str(ws)])
    assert result.exit_code == 0, result.output


def test_damaged_dagster_storage_is_one_line_and_the_way_out_works(ws: Path) -> None:
    what = damage(ws, "sqlite")
    home = ws.parent / "dagster"
    line = one_line(["ingest"], ws)
    assert what in line and f"mv {home} {home}.damaged" in line, line
    home.rename(f"{home}.damaged")  # the way out the line names
    result = runner.invoke(app, ["ingest", "--config", str(ws)])
    assert result.exit_code == 0, result.output
