"""Issue 54 (Medium 6): a document cannot clear, retitle or reorder the operator's terminal.
Its text and its file name hold an OSC title sequence, a clear-screen sequence and a bidi
override; every human-readable line of the real CLI (ingest, its failure lines, inspect, query,
guard) shows them escaped, and JSON output stays JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.common import lit, shown, terminal_safe
from clef_pipelines.cli.main import app
from tests.ingest.conftest import Workspace, make_workspace

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e"
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J\\u202e"
#: What must never reach a terminal raw (tab and newline are layout, not attacks).
RAW = ["\x1b", "\x07", "\u202e", "\x9b", "\u2066", "\u200f"]


def assert_terminal_safe(output: str) -> None:
    leaked = [hex(ord(c)) for c in RAW if c in output]
    assert not leaked, (leaked, output)


def cli(ws: Workspace, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--config", str(ws.config_path)])
    return result.exit_code, result.output


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    ws = make_workspace(tmp_path, monkeypatch)
    shutil.rmtree(ws.corpus)
    ws.corpus.mkdir()
    (ws.corpus / f"rotate{HOSTILE}.md").write_text(
        f"# Token rotation {HOSTILE}\n\n"
        f"Rotate the access token every month {HOSTILE} from the admin console.\n",
        encoding="utf-8",
    )
    # Not a PDF at all: its ingest failure line names the file.
    (ws.corpus / f"broken{HOSTILE}.pdf").write_bytes(b"%PDF-1.4 not really\x00\x01")
    return ws


def test_every_human_line_escapes_control_and_bidi_characters(hostile: Workspace) -> None:
    ws = hostile
    code, out = cli(ws, "ingest")
    assert_terminal_safe(out)
    # The failure line names the file, escaped.
    assert f"broken{ESCAPED}.pdf" in "".join(out.split()), out
    assert code in (0, 1), out

    doc = next(ws.corpus.glob("rotate*.md"))
    code, out = cli(ws, "inspect", str(doc))
    assert code == 0, out
    assert_terminal_safe(out)
    unwrapped = "".join(out.split())  # rich wraps a long path at the terminal's width
    assert f"Tokenrotation{ESCAPED}" in unwrapped and f"rotate{ESCAPED}.md" in unwrapped

    for verbose in ([], ["-v"]):
        code, out = cli(ws, "query", "rotate the access token", *verbose)
        assert code == 0, out
        assert_terminal_safe(out)
        assert "every month \\x1b]0;pwned" in out, out

    code, out = cli(ws, "guard", str(ws.corpus / f"missing{HOSTILE}.md"))
    assert_terminal_safe(out)
    assert f"missing{ESCAPED}.md" in "".join(out.split()), out

    # JSON stays JSON, and carries the text as it is.
    code, out = cli(ws, "query", "rotate the access token", "--json")
    assert code == 0, out
    assert_terminal_safe(out)
    (result,) = json.loads(out)
    assert HOSTILE in result["passages"][0]["text"]


def test_the_helpers_escape_every_kind() -> None:
    text = "a\x1b[2Jb\r\x9b\u2066\u200f\u2028[bold]\tc\nd"
    assert terminal_safe(text) == "a\\x1b[2Jb\\x0d\\x9b\\u2066\\u200f\\u2028[bold]\tc\nd"
    assert lit(text) == "a\\x1b[2Jb\\x0d\\x9b\\u2066\\u200f\\u2028\\[bold]\tc\nd"
    assert shown(text) == "a\\x1b[2Jb\\x0d\\x9b\\u2066\\u200f\\u2028\\[bold]\\x09c\\x0ad"
