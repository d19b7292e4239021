"""The `clef-pipelines` command line: `app`, the console script's entry point.

Each command group lives in its own module, which registers its commands on the Typer app of
`cli.app`; `typer_app()` imports them all and returns that app. `app` stands in for it: a
call (the console script's `app()`, or `app(["compact", ...])`) first offers the arguments
to `compact`'s fast path (`cli.compact_cmd.fast_main`), which runs a plain `compact`
without typer, the other commands or the whole settings model, and exits; anything else,
help and usage errors included, goes to the Typer app, as does every attribute (so typer's
`CliRunner().invoke(app, ...)` gets the full command line).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from clef_pipelines.child_signals import let_children_be_terminated

if TYPE_CHECKING:
    import typer

#: The modules whose `@app.command()`s make the full command line.
COMMAND_MODULES = (
    "api_cmds",
    "clef_cmds",
    "deploy_cmds",
    "eval_cmds",
    "guard_cmds",
    "ingest_cmds",
    "query_cmds",
    "release_cmds",
    "steering_cmds",
)


def typer_app() -> typer.Typer:
    """The Typer app with every command registered."""
    for module in COMMAND_MODULES:
        importlib.import_module(f"clef_pipelines.cli.{module}")
    from clef_pipelines.cli.app import app as full

    return full


class ConsoleApp:
    """`compact`'s fast path, then the Typer app (see the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs.get("args", args[0] if args else None)
        let_children_be_terminated()
        if len(args) <= 1 and not kwargs.keys() - {"args"}:  # standalone, as the script runs
            from clef_pipelines.cli.compact_cmd import fast_main

            fast_main(sys.argv[1:] if argv is None else list(argv))  # exits when it ran
        return typer_app()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(typer_app(), name)


app: typer.Typer = ConsoleApp()  # type: ignore[assignment]

__all__ = ["COMMAND_MODULES", "app", "typer_app"]
