"""The pipeline settings as a Dagster resource: the process's validated `Settings`.

A process loads and validates its YAML once (the CLI when a command starts; a code location,
`definitions.py`, when it loads) and `jobs.location.build_resources` hands that object to
every resource. No resource reads a file or parses a string of settings.
"""

# No `from __future__ import annotations` here: Dagster reads `ResourceDependency[...]` from the
# evaluated annotation.
from functools import cached_property

import dagster as dg

from clef_pipelines.config import Settings


class PipelineSettings(dg.ConfigurableResource):
    """The settings every step reads: the config file as loaded once by this process, with
    what the launching command merged over it (sources given on its command line, an eval
    dataset)."""

    validated: dg.ResourceDependency[Settings]

    @cached_property
    def settings(self) -> Settings:
        from clef_pipelines.evals.sources import with_eval_sources

        # Eval datasets are sources too: the ingestion graph builds their collections.
        return with_eval_sources(self.validated)
