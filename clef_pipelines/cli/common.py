"""What every command shares: the console, the --config option, .env loading, clean errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from dotenv import load_dotenv
from rich.console import Console
from rich.markup import escape

from clef_pipelines.config import ConfigError, Settings, load_settings
from clef_pipelines.privacy import apply_file_privacy
from clef_pipelines.redact import redact


def make_console(*, stderr: bool = False) -> Console:
    """The one place consoles are made. Document text, paths and errors are user data: no
    emoji codes (`:x:`), no highlighting; our own styles use markup, and every piece of user
    data goes through `lit` so that `[INST]` or a file named `[/bold].md` prints as written."""
    return Console(stderr=stderr, highlight=False, emoji=False)


def lit(value: object) -> str:
    """User data (document text, a path, an error message) made safe to print literally in a
    markup string or a table cell; secrets in it (URL passwords, bearer keys) are redacted."""
    return escape(redact(str(value)))


console = make_console()
err_console = make_console(stderr=True)
_err = err_console

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Config file (default: $CLEF_PIPELINES_CONFIG, else ./clef-pipelines.yaml).",
        envvar=None,
    ),
]


def fail(message: str, code: int = 2) -> NoReturn:
    # soft_wrap: an error stays on its line(s), whatever the terminal width.
    _err.print(f"[red]error:[/] {lit(message)}", soft_wrap=True)
    raise typer.Exit(code)


def load_env_file(path: Path = Path(".env")) -> None:
    """Load `.env` without overriding the shell; warn when others can read the secrets in it."""
    if not path.exists():
        return
    mode = path.stat().st_mode
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        _err.print(
            f"[yellow]warning:[/] {lit(path)} is readable by other users; "
            f"run `chmod 600 {lit(path)}` to keep its secrets private"
        )
    load_dotenv(path, override=False)


def load_cli_settings(config: Path | None) -> Settings:
    load_env_file()
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        fail(str(exc))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    apply_file_privacy(settings)
    return settings


def collection_arg(name: str | None) -> str | None:
    """A --collection value checked before any store touches it (one line, not an OSError)."""
    if name is None:
        return None
    from clef_pipelines.stores._common import check_collection_name
    from clef_pipelines.stores.base import StoreError

    try:
        return check_collection_name(name)
    except StoreError as exc:
        fail(f"--collection: {exc}")
