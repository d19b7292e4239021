"""The `clef-pipelines` command line. Each command group lives in its own module, which
registers its commands on the app of `cli.app`; importing them here makes the full CLI."""

from __future__ import annotations

from clef_pipelines.cli import api_cmds as _api_cmds  # noqa: F401
from clef_pipelines.cli import clef_cmds as _clef_cmds  # noqa: F401
from clef_pipelines.cli import eval_cmds as _eval_cmds  # noqa: F401
from clef_pipelines.cli import guard_cmds as _guard_cmds  # noqa: F401
from clef_pipelines.cli import ingest_cmds as _ingest_cmds  # noqa: F401
from clef_pipelines.cli import query_cmds as _query_cmds  # noqa: F401
from clef_pipelines.cli import release_cmds as _release_cmds  # noqa: F401
from clef_pipelines.cli import steering_cmds as _steering_cmds  # noqa: F401
from clef_pipelines.cli.app import app

__all__ = ["app"]
