"""A workspace config for evaluation runs; the shared data's paths come from
``tests.shared_data``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


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
