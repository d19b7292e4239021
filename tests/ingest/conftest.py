"""A private copy of the sample corpus, a config pointing at it, and a Dagster home per test."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from clef_pipelines.config import Settings, load_settings
from clef_pipelines.jobs.launch import SourceRunReport, run_ingestion
from clef_pipelines.stores import VectorStore, open_store

REPO = Path(__file__).resolve().parents[2]
SAMPLE_CORPUS = REPO / "data" / "corpus"


@dataclass
class Workspace:
    root: Path
    config_path: Path

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    def settings(self) -> Settings:
        return load_settings(self.config_path)

    def write_config(self, **changes: Any) -> None:
        raw = yaml.safe_load(self.config_path.read_text())
        raw.update(changes)
        self.config_path.write_text(yaml.safe_dump(raw))

    def ingest(self, sources: list[str] | None = None, **kw: Any) -> list[SourceRunReport]:
        settings = self.settings()
        names = sources or [s.name for s in settings.sources]
        return run_ingestion(settings, names, **kw)

    def store(self) -> VectorStore:
        s = self.settings()
        return open_store(s.store, s.data_path)

    def records(self, collection: str = "docs") -> list[dict[str, Any]]:
        store = self.store()
        try:
            return list(store.scan(collection)) if store.has_collection(collection) else []
        finally:
            store.close()


def make_workspace(root: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> Workspace:
    shutil.copytree(SAMPLE_CORPUS, root / "corpus")
    raw: dict[str, Any] = {
        "data_dir": str(root / "state"),
        "collection": "docs",
        "sources": [{"name": "sample", "path": "corpus"}],
        "embedder": {"kind": "hash", "dimension": 64},
        "store": {"kind": "lancedb"},
        # The offline guard (on by default) loads MiniLM; these tests are about ingestion, so
        # they leave it off. tests/steering covers the screen with the guard and with Clef.
        "steering": {"guard": {"mode": "off"}},
    }
    raw.update(config)
    cfg = root / "clef-pipelines.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    return Workspace(root, cfg)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    return make_workspace(tmp_path, monkeypatch)


def copy_workspace(prepared: Workspace, root: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A private copy of `prepared` (its corpus, config, data folder and Dagster home) at `root`,
    its config pointed at the copy's data folder: what a test changes there no other test sees."""
    shutil.copytree(prepared.root, root, dirs_exist_ok=True)
    config_path = root / prepared.config_path.name
    raw = yaml.safe_load(config_path.read_text())
    raw["data_dir"] = str(root / "state")
    config_path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    return Workspace(root, config_path)


@dataclass(frozen=True)
class Ingested:
    """A workspace whose sample corpus has been ingested once, and that run's report."""

    workspace: Workspace
    report: SourceRunReport


def ingest_once(tmp_path_factory: pytest.TempPathFactory, name: str, **settings: Any) -> Ingested:
    """`make_workspace(..., **settings)` in a fresh folder `name`, then one successful
    `ingest()`: what a session fixture hands out as copies (`copy_workspace`)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        ws = make_workspace(tmp_path_factory.mktemp(name), monkeypatch, **settings)
        (report,) = ws.ingest()
    assert report.success, report.error
    return Ingested(ws, report)


@pytest.fixture(scope="session")
def sample_ingested(tmp_path_factory: pytest.TempPathFactory) -> Ingested:
    """The sample corpus ingested once per test process, with `make_workspace`'s settings.
    Only `ingested` hands it out, as a copy: the tests that start from an ingested corpus
    share this one run instead of each making it in a fresh Dagster instance."""
    return ingest_once(tmp_path_factory, "sample-ingested")


@pytest.fixture
def ingested(
    sample_ingested: Ingested, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Ingested:
    """The sample corpus already ingested once (as `workspace` followed by `ingest()`), in a
    private copy at tmp_path; `report` is that first run's (shared: read it, do not change it)."""
    ws = copy_workspace(sample_ingested.workspace, tmp_path, monkeypatch)
    return Ingested(ws, sample_ingested.report)
