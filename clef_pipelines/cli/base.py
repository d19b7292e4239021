"""What every command shares, without typer or the settings models: the console, text made
safe to print, the error line, .env loading. `compact`'s fast path (`cli.compact_cmd`) uses
these alone; `cli.common` re-exports them beside the typer pieces."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def print_error(message: str) -> None:
    """The one-line error every command prints before it exits (soft_wrap: an error stays on
    its line(s), whatever the terminal width)."""
    err_console.print(f"[red]error:[/] {lit(message)}", soft_wrap=True)


def load_env_file(path: Path = Path(".env")) -> None:
    """Load `.env` without overriding the shell; warn when others can read the secrets in it."""
    if not path.exists():
        return
    from dotenv import load_dotenv  # only when there is a file to load (0.04 s of CPU)

    mode = path.stat().st_mode
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        err_console.print(
            f"[yellow]warning:[/] {lit(path)} is readable by other users; "
            f"run `chmod 600 {lit(path)}` to keep its secrets private"
        )
    load_dotenv(path, override=False)
