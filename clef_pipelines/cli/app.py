"""The `clef-pipelines` Typer app and its top-level options.

Command modules import `app` from here and register their commands on it; `cli.main` imports
the command modules. Nothing here imports a command module or `cli.main`, so the registration
has no import cycle.
"""

from __future__ import annotations

import typer

from clef_pipelines.child_signals import let_children_be_terminated
from clef_pipelines.cli.damage import DamageAwareGroup

app = typer.Typer(
    # Damaged state on disk (Dagster's SQLite, a LanceDB table) is one line, not a traceback.
    cls=DamageAwareGroup,
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
    # Every command, however invoked (the console script, typer's CliRunner), on the main
    # thread: runs work in a thread of their own, where signals cannot be set.
    let_children_be_terminated()
