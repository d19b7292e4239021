"""What every command shares: the console, the --config option, .env loading, clean errors."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from clef_pipelines.config import ConfigError, Settings, load_settings
from clef_pipelines.privacy import apply_file_privacy
from clef_pipelines.redact import redact

if TYPE_CHECKING:
    from rich.console import Console


def make_console(*, stderr: bool = False) -> Console:
    """The one place consoles are made. Document text, paths and errors are user data: no
    emoji codes (`:x:`), no highlighting; our own styles use markup, and every piece of user
    data goes through `lit` so that `[INST]` or a file named `[/bold].md` prints as written."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, emoji=False)


class _LazyConsole:
    """A console made on first use. Why: every command module is imported on every start, and
    rich's console costs about 0.07 s of CPU to import, while `query --json` (and any
    command that fails before printing) never prints through it."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_console", "_stderr"):
            raise AttributeError(name)
        return getattr(self.get(), name)

    def get(self) -> Console:
        """The console itself, for rich objects that hold one (a progress bar)."""
        if self._console is None:
            self._console = make_console(stderr=self._stderr)
        return self._console


#: Characters that move the cursor, recolour or rewrite a terminal, or reorder what it shows:
#: C0 and C1 controls (ESC starts every escape sequence, CR rewrites a line, BEL rings), DEL,
#: the line and paragraph separators, and the bidirectional marks, overrides and isolates.
#: Newline and tab are left to multi-line text (`lit`); one-line text (`shown`) escapes them.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_CONTROL_ONE_LINE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(value: object, *, one_line: bool = False) -> str:
    """User data with every control character written as its escape (``\\x1b``,
    ``\\u202e``) and secrets redacted, for a line printed without markup (`markup=False`,
    `typer.echo`). `one_line`: newlines and tabs escaped too."""
    pattern = _CONTROL_ONE_LINE if one_line else _CONTROL
    return pattern.sub(_escaped, redact(str(value)))


def lit(value: object) -> str:
    """User data (document text, a path, an error message) made safe to print literally in a
    markup string or a table cell: secrets in it (URL passwords, bearer keys) are redacted,
    control characters (an escape sequence that would clear or retitle the terminal, a bidi
    override that would reorder the line) shown as escapes, markup made literal. Newlines
    and tabs stay (an error message may span lines); see `shown` for one-line text."""
    from rich.markup import escape

    return escape(terminal_safe(value))


def shown(value: object) -> str:
    """User text (a document's words) made safe to print on one terminal line: like `lit`,
    and newlines and tabs escaped too."""
    from rich.markup import escape

    return escape(terminal_safe(value, one_line=True))


console: Console = _LazyConsole()  # type: ignore[assignment]
err_console: Console = _LazyConsole(stderr=True)  # type: ignore[assignment]
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
    from dotenv import load_dotenv  # only when there is a file to load (0.04 s of CPU)

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
