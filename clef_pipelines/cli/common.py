"""What every command shares: the console, the --config option, .env loading, clean errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from dotenv import load_dotenv
from rich.console import Console

from clef_pipelines.config import ConfigError, Settings, load_settings

console = Console(highlight=False)
_err = Console(stderr=True, highlight=False)

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
    _err.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


def load_env_file(path: Path = Path(".env")) -> None:
    """Load `.env` without overriding the shell; warn when others can read the secrets in it."""
    if not path.exists():
        return
    mode = path.stat().st_mode
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        _err.print(
            f"[yellow]warning:[/] {path} is readable by other users; "
            f"run `chmod 600 {path}` to keep its secrets private"
        )
    load_dotenv(path, override=False)


def load_cli_settings(config: Path | None) -> Settings:
    load_env_file()
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        fail(str(exc))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return settings
