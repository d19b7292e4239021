"""The `clef-pipelines` command line. Each command group lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="clef-pipelines",
    help="RAG ingestion, retrieval and evaluation on Dagster, steered by Clef.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        import dagster

        typer.echo(f"clef-pipelines {version('clef-pipelines')} (dagster {dagster.__version__})")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """RAG ingestion, retrieval and evaluation on Dagster, steered by Clef."""


# Command modules register themselves on `app` when imported.
from clef_pipelines.cli import api_cmds as _api_cmds  # noqa: E402,F401
from clef_pipelines.cli import clef_cmds as _clef_cmds  # noqa: E402,F401
from clef_pipelines.cli import eval_cmds as _eval_cmds  # noqa: E402,F401
from clef_pipelines.cli import guard_cmds as _guard_cmds  # noqa: E402,F401
from clef_pipelines.cli import ingest_cmds as _ingest_cmds  # noqa: E402,F401
from clef_pipelines.cli import query_cmds as _query_cmds  # noqa: E402,F401
from clef_pipelines.cli import steering_cmds as _steering_cmds  # noqa: E402,F401
