"""Plain text -> blocks: paragraphs split on blank lines, with light heading/list detection.

A heading is a line underlined with `===` (level 1) or `---` (level 2), or a short line in
ALL CAPS at the start of a paragraph (level 2: FAQ sections under an underlined title). A paragraph whose first line starts with a bullet
(`-`, `*`, `•`, `1.`, `1)`) becomes one list item per bullet line. Paragraph and list-item
text is the exact source span, so offsets are exact.
"""

from __future__ import annotations

import re

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.lines import LineIndex
from clef_pipelines.parsing.models import Block

_UNDERLINE = re.compile(r"^\s*(=+|-+)\s*$")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+\S")


def _is_caps_heading(line: str) -> bool:
    s = line.strip()
    if len(s) > 80 or s.endswith((".", ",", ";")):
        return False
    letters = [c for c in s if c.isalpha()]
    return len(letters) >= 3 and all(c.isupper() for c in letters)


def _paragraphs(idx: LineIndex) -> list[tuple[int, int]]:
    """Runs of non-blank lines as [first, stop) line ranges."""
    runs: list[tuple[int, int]] = []
    first = None
    for n, line in enumerate(idx.lines):
        if line.strip():
            if first is None:
                first = n
        elif first is not None:
            runs.append((first, n))
            first = None
    if first is not None:
        runs.append((first, len(idx.lines)))
    return runs


def parse_text(original: str) -> list[Block]:
    idx = LineIndex(original)
    out = BlockBuilder(original)
    lines = idx.lines
    for first, stop in _paragraphs(idx):
        # Underlined heading: "Title" / "=====" (the underline at least 3 long).
        if stop - first >= 2:
            m = _UNDERLINE.match(lines[first + 1])
            if m and len(m.group(1)) >= 3 and lines[first].strip():
                s, e = idx.span(first, first + 2)
                out.heading(lines[first], 1 if m.group(1)[0] == "=" else 2, s, e)
                first += 2
                if first >= stop:
                    continue
        if _is_caps_heading(lines[first]):
            s, e = idx.span(first, first + 1)
            out.heading(lines[first], 2, s, e)
            first += 1
            if first >= stop:
                continue
        if _BULLET.match(lines[first]):
            starts = [n for n in range(first, stop) if _BULLET.match(lines[n])] + [stop]
            for a, b in zip(starts, starts[1:], strict=False):
                s, e = idx.span(a, b)
                out.add("list_item", original[s:e], s, e)
            continue
        s, e = idx.span(first, stop)
        out.add("paragraph", original[s:e], s, e)
    return out.blocks
