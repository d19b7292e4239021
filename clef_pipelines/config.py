"""One YAML file, validated by pydantic; every setting has a default.

Secrets never live here: settings name the environment variable that holds a secret
(`api_key_env`, `dsn_env`), and the value is read from the environment (or `.env`) at use.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from clef_pipelines._strict import StrictModel, check_name
from clef_pipelines.api.config import ApiConfig
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.config_file import (  # noqa: F401 - re-exported
    CONFIG_ENV,
    DEFAULT_CONFIG_NAME,
    ConfigError,
    PathsMixin,
    _model_at,
    explain_validation_error,
    find_config_file,
    read_config_file,
)
from clef_pipelines.embedding.config import EmbedderConfig
from clef_pipelines.evals.config import EvalConfig
from clef_pipelines.ingest.config import BatchingConfig
from clef_pipelines.objectstore import ObjectStoreConfig, is_remote, scheme_of
from clef_pipelines.retrieval.config import RetrievalConfig
from clef_pipelines.steering.config import SteeringConfig
from clef_pipelines.stores.config import StoreConfig


class SourceConfig(StrictModel):
    """A source of documents: a folder of files, or a JSONL file with one document a line."""

    name: str = Field(description="Partition key: letters, digits, '-', '_' and '.'.")
    path: str = Field(
        description="Folder or .jsonl file, relative to the config file; or an object-store "
        "prefix (s3://bucket/prefix/, gs://, az://) or object, or an http(s):// URL of one file."
    )
    kind: Literal["auto", "folder", "jsonl", "file"] = Field(
        "auto",
        description="auto (a .jsonl file is JSONL, a folder or prefix a folder, a web URL one "
        "file), folder, jsonl or file (one document).",
    )
    include: list[str] = Field(
        default_factory=lambda: [
            "**/*.md",
            "**/*.markdown",
            "**/*.txt",
            "**/*.rst",
            "**/*.html",
            "**/*.htm",
            "**/*.pdf",
            "**/*.docx",
        ],
        description="Glob patterns of files to ingest from a folder.",
    )
    exclude: list[str] = Field(
        default_factory=list, description="Glob patterns of files to leave out of a folder."
    )
    collection: str | None = Field(None, description="Target collection; default the global one.")

    @field_validator("collection")
    @classmethod
    def _valid_collection(cls, v: str | None) -> str | None:
        return v if v is None else _collection_name(v)

    follow_links_outside: bool = Field(
        False, description="Read symbolic links that lead outside the source folder."
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        return check_name("source", v)

    @field_validator("path")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        scheme = scheme_of(v)
        if scheme is not None and not is_remote(v):
            raise ValueError(
                f"{v!r}: unknown URL scheme {scheme!r} (s3, gs, az, http and https are read)"
            )
        if is_remote(v) and "@" in v.split("//", 1)[1].split("/", 1)[0]:
            raise ValueError("credentials do not belong in a source URL: see object_store")
        return v

    @property
    def remote(self) -> bool:
        """Whether the source lives on an object store or the web."""
        return is_remote(self.path)


def _collection_name(name: str) -> str:
    """A name every store accepts, checked when the config loads rather than after a run."""
    from clef_pipelines.stores._common import check_collection_name
    from clef_pipelines.stores.base import StoreError

    try:
        return check_collection_name(name)
    except StoreError as exc:
        raise ValueError(str(exc)) from None


class ParsingConfig(StrictModel):
    """How files are read and parsed into blocks."""

    max_file_bytes: int = Field(20_000_000, ge=1, description="Larger files fail with 'oversize'.")
    max_unpacked_bytes: int = Field(
        64_000_000,
        ge=1,
        description="An archive (.docx) unpacking to more bytes fails with 'too_large' "
        "(checked on its directory and while unpacking, before it is parsed).",
    )
    max_archive_entries: int = Field(
        10_000, ge=1, description="An archive (.docx) with more entries fails with 'too_large'."
    )
    encodings: list[str] = Field(
        default_factory=lambda: ["utf-8"],
        min_length=1,
        description="Encodings tried in order; a file none decodes fails with 'encoding'.",
    )

    @field_validator("encodings")
    @classmethod
    def _known_encodings(cls, v: list[str]) -> list[str]:
        import codecs

        for name in v:
            try:
                codecs.lookup(name)
            except LookupError:
                raise ValueError(f"unknown encoding {name!r}") from None
        return v


class ChunkingConfig(StrictModel):
    """How parsed blocks become chunks (sizes in the embedder's word pieces)."""

    strategy: Literal["structural", "fixed", "clef"] = Field(
        "structural",
        description="structural | fixed | clef (Clef places the cuts; structural on failure).",
    )
    # Defaults fit the default embedder: all-MiniLM-L6-v2 reads 254 word pieces besides [CLS]
    # and [SEP], and the embedded text adds the title and section path to the chunk's own
    # tokens: 200 leaves 54 for them. At 224/180, 13 of SciFact's 11,301 chunks overflowed
    # (titles up to 50 word pieces) and every SciFact run warned; at 200/160, none of 12,707.
    min_tokens: int = Field(40, ge=1, description="Smaller pieces are merged with a neighbour.")
    target_tokens: int = Field(160, ge=8, description="The size chunks are grown towards.")
    max_tokens: int = Field(
        200,
        ge=16,
        description=(
            "No chunk is longer than this; with the title and section path it must fit the "
            "embedder's window (MiniLM: 254 word pieces)."
        ),
    )
    overlap_tokens: int = Field(40, ge=0, description="Overlap between fixed chunks.")

    @model_validator(mode="after")
    def _ordered(self) -> ChunkingConfig:
        if not (self.min_tokens <= self.target_tokens <= self.max_tokens):
            raise ValueError("chunking needs min_tokens <= target_tokens <= max_tokens")
        if self.overlap_tokens >= self.target_tokens:
            raise ValueError("chunking.overlap_tokens must be below target_tokens")
        return self


class Settings(PathsMixin, StrictModel):
    data_dir: str = Field(
        ".clef",
        description="Where stores, caches and intermediates live; an object-store URL "
        "(s3://bucket/prefix) puts the intermediates and LanceDB there, the rest in local_dir.",
    )
    local_dir: str | None = Field(
        None,
        description="Local folder for caches, locks and staging when data_dir is an "
        "object-store URL; default .clef.",
    )
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    collection: str = Field("docs", description="Default collection name.")
    sources: list[SourceConfig] = Field(
        default_factory=list,
        description="Folders or JSONL files to ingest; each is one Dagster partition.",
    )
    parsing: ParsingConfig = ParsingConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    store: StoreConfig = StoreConfig()
    clef: ClefConfig = ClefConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    api: ApiConfig = ApiConfig()
    evals: EvalConfig = EvalConfig()
    steering: SteeringConfig = SteeringConfig()
    refresh_cron: str = Field("0 3 * * *", description="Schedule that refreshes every source.")
    sync_batch_rows: int = Field(512, ge=1, description="Records per store upsert call.")
    batching: BatchingConfig = BatchingConfig()
    ingest_lock_timeout_s: float = Field(
        3600.0, ge=0, description="How long an ingest waits for another into its collection."
    )
    private_files: bool = Field(
        True, description="Data files 0600 and folders 0700 (umask 077); false: the umask."
    )

    # Where the file was loaded from: relative paths resolve against its folder.
    base_dir: str = Field(".", exclude=True)

    @field_validator("collection")
    @classmethod
    def _valid_collection(cls, v: str) -> str:
        return _collection_name(v)

    @model_validator(mode="after")
    def _store_reaches_object_store(self) -> Settings:
        # The store is opened from `settings.store` alone: it carries where data_dir is and how
        # the object store is reached (see StoreConfig).
        self.store._data_url = self.data_url
        self.store._object_store = self.object_store
        return self

    @field_validator("refresh_cron")
    @classmethod
    def _valid_cron(cls, v: str) -> str:
        # The rule Dagster applies to a schedule (5 fields, croniter syntax), checked here so a
        # bad value is refused when the config loads, not by every scheduled run.
        from croniter import croniter

        if len(v.split()) != 5 or not croniter.is_valid(v):
            raise ValueError(f"{v!r} is not a 5-field cron expression (e.g. '0 3 * * *')")
        return v

    @field_validator("sources")
    @classmethod
    def _unique_sources(cls, v: list[SourceConfig]) -> list[SourceConfig]:
        names = [s.name for s in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"source names must be unique; repeated: {', '.join(dupes)}")
        return v

    def source(self, name: str) -> SourceConfig:
        for s in self.sources:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.sources) or "none"
        raise ConfigError(f"unknown source {name!r} (configured: {known})")

    def collection_of(self, source: SourceConfig) -> str:
        return source.collection or self.collection


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Load and validate the config; with no file at all, every default applies."""
    cfg_path = find_config_file(path)
    if cfg_path is None:
        return Settings(base_dir=str(Path.cwd()))
    raw = read_config_file(cfg_path)
    return settings_from_dict(raw, origin=str(cfg_path), base_dir=cfg_path.resolve().parent)


def settings_from_dict(
    raw: dict[str, Any], *, origin: str = "<dict>", base_dir: str | os.PathLike[str] | None = None
) -> Settings:
    if "base_dir" in raw:
        raise ConfigError(f"invalid configuration in {origin}:\n  unknown key 'base_dir'")
    try:
        return Settings(**raw, base_dir=str(base_dir or Path.cwd()))
    except ValidationError as exc:
        raise ConfigError(explain_validation_error(exc, Settings, origin)) from None


def with_sources(settings: Settings, sources: Sequence[SourceConfig]) -> Settings:
    """Settings with `sources` merged in: each replaces the configured source of its name or is
    appended. The sources are validated objects, so nothing is validated again."""
    by_name = {s.name: s for s in sources}
    merged = [by_name.pop(s.name, s) for s in settings.sources] + list(by_name.values())
    return settings.model_copy(update={"sources": merged})


def apply_overrides(settings: Settings, overrides: dict[str, Any]) -> Settings:
    """Merge run-time overrides over settings: top-level keys replace, except `sources`, whose
    entries replace the configured source of the same name or are appended."""
    if not overrides:
        return settings
    merged = settings.model_dump(mode="json")
    extra = list(overrides.get("sources") or [])
    merged.update({k: v for k, v in overrides.items() if k != "sources"})
    by_name = {s["name"]: s for s in extra}
    merged["sources"] = [by_name.pop(s["name"], s) for s in merged["sources"]] + list(
        by_name.values()
    )
    return settings_from_dict(merged, origin="overrides", base_dir=settings.base_dir)
