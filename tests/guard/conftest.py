"""The sample corpus ingested once with the offline guard on and Clef off: the start of the
tests that read what the guard quarantined and then change the workspace (each its own copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ingest.conftest import Ingested, copy_workspace, ingest_once

GUARD_ON_CLEF_OFF = {"clef": {"backend": "off"}, "steering": {"guard": {"mode": "on"}}}


@pytest.fixture(scope="session")
def guard_ingested_once(tmp_path_factory: pytest.TempPathFactory) -> Ingested:
    return ingest_once(tmp_path_factory, "guard-ingested", **GUARD_ON_CLEF_OFF)


@pytest.fixture
def guard_ingested(
    guard_ingested_once: Ingested, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Ingested:
    """`make_workspace(..., clef off, guard on)` then `ingest()`, in a private copy at
    tmp_path; `report` is that first run's (shared: read it, do not change it)."""
    ws = copy_workspace(guard_ingested_once.workspace, tmp_path, monkeypatch)
    return Ingested(ws, guard_ingested_once.report)
