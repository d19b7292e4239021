"""What every command shares: the console, the --config option, .env loading, clean errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from clef_pipelines.cli.base import (  # noqa: F401 - re-exported for the command modules
    _LazyConsole,
    console,
    err_console,
    lit,
    load_env_file,
    make_console,
    print_error,
    shown,
    terminal_safe,
)
from clef_pipelines.config import ConfigError, Settings, load_settings
from clef_pipelines.privacy import apply_file_privacy

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
    print_error(message)
    raise typer.Exit(code)


def load_cli_settings(config: Path | None) -> Settings:
    load_env_file()
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        fail(str(exc))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    apply_file_privacy(settings)
    return settings


def require_config(config: Path | None, why: str) -> Path:
    """The config file this command would load (`find_config_file`), or a clear refusal when
    there is none. For the commands that read what an ingest wrote (`query`, `ask`) and the
    UI: with every default they would search an empty store they create in ./.clef, which a
    first-day user in the wrong folder reads as "no results", not as "no config"."""
    from clef_pipelines.config import CONFIG_ENV, DEFAULT_CONFIG_NAME, find_config_file

    found = find_config_file(config)
    if found is None:
        fail(
            f"no config found (no --config, no ${CONFIG_ENV}, no ./{DEFAULT_CONFIG_NAME} in "
            f"{Path.cwd()}): {why}. Run it from the folder that holds your "
            f"{DEFAULT_CONFIG_NAME}, or create one with `clef-pipelines init` and ingest"
        )
    return found


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
