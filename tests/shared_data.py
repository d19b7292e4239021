"""Where the tests find the shared labelled data: the one place every test (and the lab's)
reads it from.

``CLEF_SHARED_DATA`` names the folder; by default it is ``../shared/data`` beside the
repository root, where CI lays it. A test whose data is missing skips with the path it looked
for, and fails instead under ``CI=true``, so CI never passes by skipping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CLEF_SHARED_DATA") or REPO.parent / "shared" / "data")
SCIFACT = SHARED_DATA / "scifact"
SQUAD = SHARED_DATA / "squad2" / "train-v2.0.json"
INJECTIONS = SHARED_DATA / "prompt_injections" / "train.jsonl"


def need(path: Path) -> Path:
    """``path`` if it exists; else skip (fail under CI) naming it and ``CLEF_SHARED_DATA``."""
    if not path.exists():
        msg = f"shared data missing: {path} (set CLEF_SHARED_DATA to the folder that holds it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path
