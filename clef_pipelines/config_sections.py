"""The sections of the config file that `compact` reads, validated by the same models as
`config.Settings`, without importing the rest (stores, embedder, API, evals, ingest).

`load_compact_settings` reads the file `load_settings` would read and validates `data_dir`,
`local_dir`, `private_files`, `clef`, `retrieval` and `steering` with `Settings`' own models
and defaults. Every other top-level key of `Settings` is accepted as it stands (the commands
that use it validate it); an unknown top-level key, `base_dir`, or an unknown or invalid
key inside a section read here is refused with the same lines as `load_settings`.
`tests/test_config_sections.py` checks that the fields match `Settings`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from clef_pipelines._strict import StrictModel
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.config_file import (
    ConfigError,
    PathsMixin,
    explain_validation_error,
    find_config_file,
    read_config_file,
)
from clef_pipelines.config_light import DEFAULT_DATA_DIR, DEFAULT_PRIVATE_FILES, NOT_READ
from clef_pipelines.retrieval.config import RetrievalConfig
from clef_pipelines.steering.config import SteeringConfig


class CompactSettings(PathsMixin, StrictModel):
    """What `compact` reads of `Settings` (same names, types and defaults)."""

    data_dir: str = Field(
        DEFAULT_DATA_DIR,
        description="Where stores, caches and intermediates live; an object-store URL "
        "(s3://bucket/prefix) puts the intermediates and LanceDB there, the rest in local_dir.",
    )
    local_dir: str | None = Field(
        None,
        description="Local folder for caches, locks and staging when data_dir is an "
        "object-store URL; default .clef.",
    )
    clef: ClefConfig = Field(default_factory=ClefConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    steering: SteeringConfig = Field(default_factory=SteeringConfig)
    private_files: bool = Field(
        DEFAULT_PRIVATE_FILES,
        description="Data files 0600 and folders 0700 (umask 077); false: the umask.",
    )
    base_dir: str = Field(".", exclude=True)

    # Not read by `compact`; named so that they are not unknown keys (and for the hints).
    collection: Any = None
    sources: Any = None
    parsing: Any = None
    chunking: Any = None
    embedder: Any = None
    store: Any = None
    api: Any = None
    evals: Any = None
    refresh_cron: Any = None
    sync_batch_rows: Any = None
    batching: Any = None
    ingest_lock_timeout_s: Any = None
    object_store: Any = None
    executor: Any = None


def load_compact_settings(path: str | os.PathLike[str] | None = None) -> CompactSettings:
    """`config.load_settings` for `compact`: the same file, the sections it reads."""
    cfg_path = find_config_file(path)
    if cfg_path is None:
        return CompactSettings(base_dir=str(Path.cwd()))
    raw = read_config_file(cfg_path)
    origin = str(cfg_path)
    if "base_dir" in raw:
        raise ConfigError(f"invalid configuration in {origin}:\n  unknown key 'base_dir'")
    try:
        return CompactSettings(**raw, base_dir=str(cfg_path.resolve().parent))
    except ValidationError as exc:
        raise ConfigError(explain_validation_error(exc, CompactSettings, origin)) from None


__all__ = ["NOT_READ", "CompactSettings", "load_compact_settings"]
