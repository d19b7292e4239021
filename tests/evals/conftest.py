"""Paths of the shared labelled data, and a workspace config for evaluation runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
SCIFACT = SHARED_DATA / "scifact"
SQUAD = SHARED_DATA / "squad2" / "train-v2.0.json"
INJECTIONS = SHARED_DATA / "prompt_injections" / "train.jsonl"


def need(path: Path) -> Path:
    if not path.exists():
        msg = f"shared evaluation data missing: {path}"
        import os

        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture
def eval_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config with the hash embedder and LanceDB under tmp_path, and its own Dagster home."""
    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "state"),
                "embedder": {"kind": "hash", "dimension": 256},
                "clef": {"backend": "off"},
                "evals": {"bootstrap_samples": 200},
            }
        )
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    return cfg
