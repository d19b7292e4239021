"""The pipeline settings as a Dagster resource: the YAML config plus run-time overrides."""

from __future__ import annotations

import json
from functools import cached_property

import dagster as dg
from pydantic import Field

from clef_pipelines.config import Settings, apply_overrides, load_settings


class PipelineSettings(dg.ConfigurableResource):
    """Loads `clef-pipelines.yaml` (or the file in $CLEF_PIPELINES_CONFIG).

    `overrides_json` is a JSON object merged over the file (see `config.apply_overrides`): the CLI uses it for ad-hoc sources given on its command line.
    """

    config_path: str | None = Field(None, description="Config file; default as the CLI finds it.")
    overrides_json: str = Field("{}", description="JSON object merged over the config file.")

    @cached_property
    def settings(self) -> Settings:
        from clef_pipelines.evals.sources import with_eval_sources

        # Eval datasets are sources too: the ingestion graph builds their collections.
        return with_eval_sources(
            apply_overrides(
                load_settings(self.config_path), json.loads(self.overrides_json or "{}")
            )
        )
