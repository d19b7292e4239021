"""The prose a block holds, as the guard reads it: inline markup set aside, and whether any
prose is left to judge.

Why. The guard was trained on prose: its training paragraphs came through a filter that
dropped text with much inline code, link markup or short lines. Technical documentation as
ingest sees it is full of exactly that (``stream (``bool``)``, ``:py:class:`dict```,
``CORS_ALWAYS_SEND: True``), and on it the guard read code tokens as the odd, imperative text of
an injection: one block in ten of real READMEs was quarantined although none was addressed to an
AI. So the guard reads a block's prose reading instead (``prose_reading``):

- an inline code span, a reStructuredText role or literal that holds a short name or
  expression (a function, a type, a path: fewer than ``SPAN_WORDS`` words) stands as the
  neutral word ``CODE_WORD``; a span that holds a sentence keeps its words, so an instruction
  cannot hide from the guard by being put in backticks;
- a reStructuredText reference (```text <url>`_``, ```text`_``) keeps its text;
- a table (Markdown, reStructuredText grid, HTML as the parser renders it) is read cell by
  cell, each cell a sentence of its own, its rules dropped.

Links, URLs and images are left as written: an exfiltration order is made of them.

A block with fewer than ``MIN_WORDS`` words (``_WORD``) outside its code spans (a settings
line, a parameter name and its type, a command) holds no prose for the guard to judge: the
screen records it as not judged by the guard (``no-prose``), keeps it, and Clef judges it
when on. Unless its decoded reading holds prose (``InjectionGuard.judges``): an instruction in
percent codes or base64 has no spaces as written.
"""

from __future__ import annotations

import re

#: A code span holding fewer words than this (``_WORD``) is a name or an expression, not a
#: sentence.
SPAN_WORDS = 4
#: Fewer words than this outside code spans: nothing for the guard to judge.
MIN_WORDS = 2
#: Why a text is not judged by the guard when it holds no prose (the screen's
#: `guard_not_judged` key, the guard check's `not_judged`).
NO_PROSE = "no-prose"
#: What a code span stands as in the prose reading: a plain noun, as a reader would say it.
CODE_WORD = "code"

#: :role:`text` or :role:`text <target>` (reStructuredText, Sphinx).
_ROLE = re.compile(r":[\w+.-]+(?::[\w+.-]+)*:`([^`]*)`")
#: ``literal`` (reStructuredText).
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
#: `text <url>`_ , `text`_ , `text`__ (reStructuredText references).
_REFERENCE = re.compile(r"`([^`]+?)`__?(?!\w)")
#: `code` (Markdown, and reStructuredText's default role).
_CODE = re.compile(r"`([^`\n]+)`")
_TARGET = re.compile(r"\s*<[^<>]*>\s*$")
#: A table's rule line: pipes, dashes, pluses, equals signs, colons and spaces only.
_RULE = re.compile(r"[|+\-=:\s]+")
#: A word: letters and digits with at least one letter, in any script ("True", "v2", leetspeak
#: "1gn0r3"), an apostrophe inside allowed; a name with underscores, dots, slashes or brackets
#: inside ("CORS_ALWAYS_SEND", "a.b()", "c++") is none.
_WORD = re.compile(r"(?=\w*[^\W\d_])[^\W_]+(?:['’][^\W_]+)?")


def _words(text: str) -> list[str]:
    """The words of ``text`` (``_WORD``), outer punctuation set aside."""
    return [w for w in text.split() if _WORD.fullmatch(w.strip(".,;:!?\"'()[]{}«»“”‘’"))]


def _reading(text: str, stand_in: str) -> str:
    if "`" not in text:
        return text

    def span(match: re.Match[str]) -> str:
        inner = _TARGET.sub("", match.group(1))
        return inner if len(_words(inner)) >= SPAN_WORDS else stand_in

    def reference(match: re.Match[str]) -> str:
        return _TARGET.sub("", match.group(1))

    out = _ROLE.sub(span, text)
    out = _LITERAL.sub(span, out)
    out = _REFERENCE.sub(reference, out)
    return _CODE.sub(span, out)


def _table_cells(text: str) -> str | None:
    """A table's cells as sentences of their own (``None`` when ``text`` is no table): the
    rows of a Markdown, reStructuredText grid or HTML table (``| a | b |``, ``+---+``) with
    the rules dropped and each cell ended as a sentence, so that the guard reads a cell as a
    reader does, not a run of pipes and dashes, and a planted cell stays its own window."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or sum(line[0] in "|+" for line in lines) < len(lines) * 0.8:
        return None
    cells = [
        cell.strip()
        for line in lines
        if not _RULE.fullmatch(line)
        for cell in line.strip("|").split("|")
        if cell.strip()
    ]
    return " ".join(c if c[-1] in ".!?:;" else c + "." for c in cells)


def prose_reading(text: str) -> str:
    """``text`` with its inline markup set aside, as the guard reads it (module docstring)."""
    return _reading(_table_cells(text) or text, CODE_WORD)


def has_prose(text: str) -> bool:
    """Whether ``text`` holds at least ``MIN_WORDS`` words outside its code spans: else it is
    code, a setting or a name, not prose for the guard to judge."""
    return len(_words(_reading(_table_cells(text) or text, " "))) >= MIN_WORDS
