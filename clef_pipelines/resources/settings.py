"""The pipeline settings as a Dagster resource: the YAML config plus typed run-time sources."""

from __future__ import annotations

import json
from functools import cached_property

import dagster as dg
from pydantic import Field

from clef_pipelines.config import Settings, apply_overrides, load_settings


class SourceOverride(dg.Config):
    """A source for this run only, or a change to a configured one (matched by name): fields
    left empty keep the configured (or default) value."""

    name: str = Field(description="Source name (the partition key).")
    path: str | None = Field(default=None, description="Folder or .jsonl file.")
    kind: str | None = Field(default=None, description="auto, folder or jsonl.")
    collection: str | None = Field(default=None, description="Target collection.")
    include: list[str] | None = Field(default=None, description="Glob patterns to ingest.")
    exclude: list[str] | None = Field(default=None, description="Glob patterns to skip.")


class PipelineSettings(dg.ConfigurableResource):
    """Loads `clef-pipelines.yaml` (or the file in $CLEF_PIPELINES_CONFIG).

    `sources` adds or changes sources for the runs that use this resource: the CLI uses it for
    paths given on its command line and for `--collection`.
    """

    config_path: str | None = Field(None, description="Config file; default as the CLI finds it.")
    sources: list[SourceOverride] = Field(
        default_factory=list,
        description="Sources added or changed for this run (matched by name).",
    )
    overrides_json: str = Field(
        "{}",
        description=(
            "Set by `clef-pipelines eval` only (a dataset given on its command line): a JSON "
            "object merged over the file. Leave it empty."
        ),
    )

    @cached_property
    def settings(self) -> Settings:
        from clef_pipelines.evals.sources import with_eval_sources

        settings = apply_overrides(
            load_settings(self.config_path), json.loads(self.overrides_json or "{}")
        )
        if self.sources:
            configured = {s.name: s.model_dump(mode="json") for s in settings.sources}
            merged = []
            for override in self.sources:
                given = {k: v for k, v in override.model_dump().items() if v is not None}
                merged.append({**configured.get(override.name, {}), **given})
            settings = apply_overrides(settings, {"sources": merged})
        # Eval datasets are sources too: the ingestion graph builds their collections.
        return with_eval_sources(settings)
