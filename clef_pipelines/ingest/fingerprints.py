"""What a source's documents hang on besides their bytes, as fingerprints, without polars.

`pipeline_parts` (the settings that shape chunks and vectors) is folded into every document's
hash; `files_fingerprint` is the cheap signal of a source's files (names, sizes, modification
times). The sensor and the CLI's no-change check (`clean_runs`) compare them between runs, so
this module imports neither polars nor a model: only the settings, and the guard's weights
file when the guard is on.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from clef_pipelines.clef.client import resolve_backend
from clef_pipelines.config import Settings, SourceConfig
from clef_pipelines.guard.loading import guard_fingerprint
from clef_pipelines.pipeline_version import PIPELINE_VERSION


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pipeline_parts(settings: Settings, embedder_name: str) -> dict[str, Any]:
    """Everything besides the raw bytes that changes a document's chunks or vectors, by part."""
    parts: dict[str, Any] = {
        "pipeline": PIPELINE_VERSION,
        "chunking": settings.chunking.model_dump(mode="json"),
        "encodings": settings.parsing.encodings,
        "embedder": embedder_name,
        # Decisions change which chunks exist: a new threshold re-decides each document (from
        # cached answers), and switching Clef on or off re-screens with the judges now at hand.
        "steering": settings.steering.decision_fingerprint(),
        "clef": resolve_backend(settings.clef)[0],
    }
    guard = guard_fingerprint(settings.steering.guard, settings.base_dir)
    if guard is not None:  # absent with the guard off: those collections keep their hashes
        parts["guard_version"] = guard
    return parts


def parts_fingerprint(parts: dict[str, Any]) -> str:
    """The hash of `pipeline_parts`, part of every document's hash."""
    return _sha256_hex(json.dumps(parts, sort_keys=True))[:16]


def pipeline_fingerprint(settings: Settings, embedder_name: str) -> str:
    return parts_fingerprint(pipeline_parts(settings, embedder_name))


def configured_pipeline_fingerprint(settings: Settings) -> str:
    """`pipeline_fingerprint` with the configured embedder, built for its name and not loaded
    (the sensor's tick: a model is not loaded to learn its name)."""
    from clef_pipelines.embedding import make_embedder

    embedder = make_embedder(settings.embedder)
    try:
        return pipeline_fingerprint(settings, embedder.name)
    finally:
        embedder.close()


#: What each part of `pipeline_parts` is, in the words of the config and the docs.
SETTING_NAMES = {
    "pipeline": "clef-pipelines' pipeline version",
    "chunking": "chunking",
    "encodings": "parsing.encodings",
    "embedder": "embedder",
    "steering": "steering (modes, thresholds, questions)",
    "clef": "Clef backend",
    "guard_version": "guard weights",
}


def settings_digest(parts: dict[str, Any]) -> dict[str, str]:
    """A short hash per part, kept in the collection manifest beside each source, so that the
    next inventory can say which settings changed (a document's hash folds them all in)."""
    return {k: _sha256_hex(json.dumps(v, sort_keys=True))[:12] for k, v in parts.items()}


def files_fingerprint(settings: Settings, source: SourceConfig) -> str:
    """A source's files by name, size and modification time ("missing" when its path is
    gone): a file added, removed, edited or touched changes it. A remote source (an object
    store prefix): the listing's keys and ETags, no object read."""
    if source.remote:
        from clef_pipelines.parsing.remote import remote_fingerprint

        return remote_fingerprint(source, settings.object_store)
    root = settings.resolve(source.path)
    if not root.exists():
        return "missing"
    if root.is_file():
        st = root.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    parts: list[str] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in sorted(files):
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except OSError:
                continue
            parts.append(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}")
    return _sha256_hex("\n".join(sorted(parts)))[:16]
