"""The last clean run of each source, so that `clef-pipelines ingest` can skip a source that
has not changed since, without starting Dagster or loading a model.

A clean run is one that succeeded with nothing left for a later run: no failed document, no
Clef request left unanswered, no failed check. Its launcher records the source's change
signal as it was before the run started (`record_clean_run`); the run's first step forgets it
(`forget_clean_run`), whoever launched the run, so a run that crashes, fails or is killed half
way leaves no record and the next `ingest` runs (and repairs). The signal is the sensor's
comparison (the files' names, sizes and modification times, and the settings that shape the
chunks), widened to what else changes a run's outcome: the source's own settings, its
collection, the store, the parsing settings and the collection's releases. The record also
keeps a stamp of the store's files for the collection as the run left them (`store_stamp`),
so a table removed, restored or damaged since is a change too. `delete` forgets the records
of the collection it deletes from.

This module imports no polars, no store, no model and no Dagster: the whole check costs the
settings' import and a walk over the source's file names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clef_pipelines.config import Settings, SourceConfig
from clef_pipelines.ingest.fingerprints import configured_pipeline_fingerprint, files_fingerprint
from clef_pipelines.steering.release_file import release_path

#: Under the data folder: one file per source, `<source>.json`.
CLEAN_RUNS_DIR = "clean-runs"


def _record_path(settings: Settings, source: str) -> Path:
    return settings.data_path / CLEAN_RUNS_DIR / f"{source}.json"


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except FileNotFoundError:
        return ""


def run_signal(settings: Settings, source: SourceConfig, pipeline: str | None = None) -> str:
    """What must be equal to a clean run's for a source to be unchanged since it. `pipeline`:
    `configured_pipeline_fingerprint(settings)` when the caller has it (the same for every
    source of the settings)."""
    collection = settings.collection_of(source)
    parts: dict[str, Any] = {
        "files": files_fingerprint(settings, source),
        "pipeline": pipeline if pipeline is not None else configured_pipeline_fingerprint(settings),
        "source": source.model_dump(mode="json"),
        "path": str(settings.resolve(source.path)),
        "collection": collection,
        "parsing": settings.parsing.model_dump(mode="json"),
        "store": settings.store.model_dump(mode="json"),
        "releases": _file_digest(release_path(settings.data_path, collection)),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def store_stamp(settings: Settings, collection: str) -> str:
    """What the store holds for `collection`, as far as a listing of its files tells (names,
    sizes, modification times): a table removed, restored from a backup, damaged or written by
    anything else changes it. A store on a server (Qdrant by URL, pgvector) gives "server":
    changes made there outside clef-pipelines are not seen (`ingest --force` runs anyway)."""
    from clef_pipelines.stores.factory import lancedb_path, store_location

    store = settings.store
    if store.kind == "lancedb":
        folder = lancedb_path(store, settings.data_path) / f"{collection}.lance"
    elif store.kind == "qdrant" and not store.qdrant.url:
        folder = Path(store_location(store, settings.data_path))
    else:
        return "server"
    if not folder.is_dir():
        return "missing"
    files = []
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            with contextlib.suppress(OSError):
                st = path.stat()
                files.append(f"{path.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(sorted(files)).encode("utf-8")).hexdigest()[:16]


def recorded_clean_run(settings: Settings, source: str) -> dict[str, Any] | None:
    """The record of the source's last clean run, if it is there and readable."""
    try:
        record = json.loads(_record_path(settings, source).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none, or unreadable: not a clean run to rely on
        return None
    return record if isinstance(record, dict) and isinstance(record.get("signal"), str) else None


def unchanged_since_clean_run(
    settings: Settings, source: SourceConfig, pipeline: str | None = None
) -> dict[str, Any] | None:
    """The last clean run's record when the source's signal is still the one it recorded
    and the store still holds what that run left (nothing to do), else None. Never for the
    in-process memory store: each process starts with it empty."""
    if settings.store.kind == "memory":
        return None
    record = recorded_clean_run(settings, source.name)
    if record is None or record["signal"] != run_signal(settings, source, pipeline):
        return None
    if record.get("store") != store_stamp(settings, settings.collection_of(source)):
        return None
    return record


def record_clean_run(
    settings: Settings,
    source: str,
    signal: str,
    run_id: str,
    failed_checks: list[str] | None = None,
) -> None:
    """Record a clean run of `source` with the signal taken before it started (a file
    edited while the run went on then differs from it: the next `ingest` runs).
    `failed_checks`: the run's checks that failed, said again when `ingest` skips it."""
    path = _record_path(settings, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    collection = settings.collection_of(settings.source(source))
    record = {
        "signal": signal,
        # Taken now, after the run: what the run left in the store.
        "store": store_stamp(settings, collection),
        "run_id": run_id,
        "collection": collection,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "failed_checks": list(failed_checks or []),
    }
    # Written whole, then renamed: a reader sees the old record or the new one.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def forget_clean_run(settings: Settings, source: str) -> None:
    """A run of the source starts (or its records change): until a run ends clean, the
    next `ingest` runs."""
    _record_path(settings, source).unlink(missing_ok=True)


def forget_collection(settings: Settings, collection: str) -> None:
    """Forget the clean runs of every source that fed `collection` (records deleted from it,
    or the collection dropped: the next `ingest` writes them again)."""
    folder = settings.data_path / CLEAN_RUNS_DIR
    if not folder.is_dir():
        return
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        if not isinstance(record, dict) or record.get("collection") in (collection, None):
            path.unlink(missing_ok=True)
