"""The sample corpus ingested once with the offline guard on and Clef off: the start of the
tests that read what the guard quarantined and then change the workspace (each its own copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ingest.conftest import Ingested, copy_workspace, make_workspace

GUARD_ON_CLEF_OFF = {"clef": {"backend": "off"}, "steering": {"guard": {"mode": "on"}}}


@pytest.fixture(scope="session")
def guard_ingested_once(tmp_path_factory: pytest.TempPathFactory) -> Ingested:
    with pytest.MonkeyPatch.context() as monkeypatch:
        root = tmp_path_factory.mktemp("guard-ingested")
        ws = make_workspace(root, monkeypatch, **GUARD_ON_CLEF_OFF)
        (report,) = ws.ingest()
    assert report.success, report.error
    return Ingested(ws, report)


@pytest.fixture
def guard_ingested(
    guard_ingested_once: Ingested, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Ingested:
    """`make_workspace(..., clef off, guard on)` then `ingest()`, in a private copy at
    tmp_path; `report` is that first run's (shared: read it, do not change it)."""
    ws = copy_workspace(guard_ingested_once.workspace, tmp_path, monkeypatch)
    return Ingested(ws, guard_ingested_once.report)
