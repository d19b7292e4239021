"""The Dagster code location `clef_pipelines`: `dg dev`, `clef-pipelines ui` or workspace.yaml.

`defs` is built on first use, from the config loaded and validated once (`load_settings`:
$CLEF_PIPELINES_CONFIG, else ./clef-pipelines.yaml, else every default): Dagster's loader
asks for it when the code location loads. A changed config takes effect when the location
reloads (the UI's "Reload", or a restart); each run worker loads it afresh.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

# First: importing `jobs.location` limits the process's malloc arenas (see there).
from clef_pipelines.jobs.location import build_definitions

if TYPE_CHECKING:
    import dagster as dg

#: One name everywhere: pyproject's [tool.dagster] and [tool.dg], workspace.yaml, the UI.
CODE_LOCATION = "clef_pipelines"


@functools.cache
def _load() -> dg.Definitions:
    # Not held in a module global: Dagster's loader takes every Definitions among the module's
    # names, and must find exactly one, `defs`.
    from clef_pipelines.config import load_settings
    from clef_pipelines.deploy import PG_ENV
    from clef_pipelines.redact import secret_from_env

    # The production instance's database password (deploy/dagster.yaml reads it from the
    # environment): masked in whatever this package logs or prints, like every *_env secret.
    secret_from_env(PG_ENV["password"])
    return build_definitions(load_settings())


def __getattr__(name: str) -> Any:
    """`defs`, loaded once per process (PEP 562): importing this module reads no config."""
    if name == "defs":
        return _load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # Dagster's loader finds the code location's Definitions among the module's names.
    return sorted([*globals(), "defs"])
