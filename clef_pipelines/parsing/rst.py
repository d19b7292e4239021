"""reStructuredText -> blocks, with a small line-based reader (no docutils needed).

Covers what documentation pages mostly use: section titles (underlined, optionally
overlined, levels by order of first appearance of each adornment style), paragraphs,
bullet/enumerated lists, `::` literal blocks and `.. code-block::`/`.. code::` as code,
admonitions (`.. note::` ...) as paragraphs, grid and simple tables as table blocks (their
source text), indented block quotes. Other directives and comments are skipped. Offsets are
exact line spans of the source.
"""

from __future__ import annotations

import re
import textwrap

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.lines import LineIndex
from clef_pipelines.parsing.models import Block

#: The first line of a doctest block (an interactive Python session): code, not prose.
_DOCTEST = re.compile(r"^\s*>>>(?:\s|$)")
_ADORN = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^\.\.\s+([A-Za-z][\w:+-]*)::(.*)$")
_COMMENT = re.compile(r"^\.\.(?:\s|$)")
_BULLET = re.compile(r"^([-*+•]|\d+[.)]|#\.|\(\w+\))\s+")
_SIMPLE_TABLE = re.compile(r"^=+(?:\s+=+)+\s*$")
_CODE_DIRECTIVES = {"code-block", "code", "sourcecode", "literalinclude-inline"}
_ADMONITIONS = {
    "note", "warning", "tip", "important", "caution", "attention", "danger", "hint",
    "error", "admonition", "seealso", "versionadded", "versionchanged", "deprecated",
}  # fmt: skip


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


class _Reader:
    def __init__(self, original: str) -> None:
        self.idx = LineIndex(original)
        self.lines = self.idx.lines
        self.out = BlockBuilder(original)
        self.styles: list[tuple[str, bool]] = []
        #: The paragraph before ended in "::": indented text next is a literal (code) block.
        self.literal_next = False

    def level(self, ch: str, over: bool) -> int:
        if (ch, over) not in self.styles:
            self.styles.append((ch, over))
        return self.styles.index((ch, over)) + 1

    def blank(self, i: int) -> bool:
        return i >= len(self.lines) or not self.lines[i].strip()

    def indented_block(self, i: int, min_indent: int = 1) -> int:
        """End (exclusive) of the block of lines indented by >= min_indent from line i on,
        blank lines inside included, trailing blank lines excluded."""
        end = i
        j = i
        while j < len(self.lines):
            line = self.lines[j]
            if line.strip():
                if _indent(line) < min_indent:
                    break
                end = j + 1
            j += 1
        return end

    def add_lines(self, kind: str, first: int, stop: int, text: str | None = None) -> None:
        if stop <= first:
            return
        s, e = self.idx.span(first, stop)
        if text is None:
            text = textwrap.dedent("\n".join(self.lines[first:stop]))
        self.out.add(kind, text, s, e)  # type: ignore[arg-type]

    def run(self) -> list[Block]:
        i = 0
        while i < len(self.lines):
            i = self.block(i)
        return self.out.blocks

    def block(self, i: int) -> int:
        """Read the block starting at line i; returns the line after it."""
        line = self.lines[i]
        if not line.strip():
            return i + 1
        if _indent(line) > 0:
            return self.indented(i)
        self.literal_next = False
        after_title = self.title(i)
        return self.unindented(i) if after_title is None else after_title

    def indented(self, i: int) -> int:
        # Indented text after a paragraph ending in "::" is a literal (code) block, and so is
        # an interactive session (a doctest block: its first line starts with ">>>").
        end = self.indented_block(i)
        code = self.literal_next or _DOCTEST.match(self.lines[i]) is not None
        self.add_lines("code" if code else "quote", i, end)
        self.literal_next = False
        return end

    def title(self, i: int) -> int | None:
        """The line after a section title (or a transition line) at line i; None if none."""
        lines, n, line = self.lines, len(self.lines), self.lines[i]
        # Overlined section title.
        m = _ADORN.match(line)
        if (
            m
            and i + 2 < n
            and lines[i + 1].strip()
            and _ADORN.match(lines[i + 2])
            and lines[i + 2].strip()[0] == m.group(1)
        ):
            s, e = self.idx.span(i, i + 3)
            self.out.heading(lines[i + 1], self.level(m.group(1), True), s, e)
            return i + 3
        # Underlined section title.
        if i + 1 < n and not m:
            u = _ADORN.match(lines[i + 1])
            if u and len(lines[i + 1].strip()) >= min(len(line.strip()), 3):
                s, e = self.idx.span(i, i + 2)
                self.out.heading(line, self.level(u.group(1), False), s, e)
                return i + 2
        if m:  # a transition line (----) on its own
            return i + 1
        return None

    def unindented(self, i: int) -> int:
        """A directive, comment, table, list item or paragraph starting at line i."""
        line = self.lines[i]
        d = _DIRECTIVE.match(line)
        if d:
            return self.directive(i, d.group(1).lower())
        if _COMMENT.match(line):
            return max(self.indented_block(i + 1), i + 1)
        if line.startswith(("+-", "+=")):
            return self.grid_table(i)
        if _SIMPLE_TABLE.match(line):
            return self.simple_table(i)
        b = _BULLET.match(line)
        if b:
            return self.list_item(i, len(b.group(0)))
        return self.paragraph(i)

    def grid_table(self, i: int) -> int:
        lines = self.lines
        end = i
        while end < len(lines) and lines[end].strip():
            end += 1
        self.add_lines("table", i, end, "\n".join(lines[i:end]))
        return end

    def paragraph(self, i: int) -> int:
        # Paragraph: up to a blank line.
        lines, n = self.lines, len(self.lines)
        end = i
        while end < n and lines[end].strip() and not (end > i and _indent(lines[end]) > 0):
            end += 1
        text = "\n".join(lines[i:end]).strip()
        if _DOCTEST.match(lines[i]):  # a doctest block: code, as docutils reads it
            self.add_lines("code", i, end)
            return end
        if text.endswith("::"):
            self.literal_next = True
            text = text[:-3].rstrip() if text.endswith(" ::") or text == "::" else text[:-1]
        if text:
            self.add_lines("paragraph", i, end, text)
        return end

    def directive(self, i: int, name: str) -> int:
        end = max(self.indented_block(i + 1), i + 1)
        body_start = i + 1
        # Skip the directive's option lines (":linenos:") before its content.
        while body_start < end and self.lines[body_start].strip().startswith(":"):
            body_start += 1
        if name in _CODE_DIRECTIVES:
            self.add_lines("code", body_start, end)
        elif name in _ADMONITIONS:
            argument = _DIRECTIVE.match(self.lines[i])
            head = argument.group(2).strip() if argument else ""
            body = textwrap.dedent("\n".join(self.lines[body_start:end])).strip()
            text = "\n".join(p for p in (head, body) if p)
            if text:
                s, e = self.idx.span(i, end)
                self.out.add("paragraph", text, s, e)
        return end

    def simple_table(self, i: int) -> int:
        lines = self.lines
        borders = 0
        end = i
        while end < len(lines):
            if _SIMPLE_TABLE.match(lines[end]):
                borders += 1
                if borders >= 2 and self.blank(end + 1):
                    end += 1
                    break
            end += 1
        self.add_lines("table", i, end, "\n".join(lines[i:end]))
        return end

    def list_item(self, i: int, marker_len: int) -> int:
        # The item runs on over its continuation lines (indented past column 0).
        end = max(self.indented_block(i + 1), i + 1)
        first = self.lines[i][marker_len:]
        rest = textwrap.dedent("\n".join(self.lines[i + 1 : end]))
        text = "\n".join(p for p in (first, rest) if p.strip())
        self.add_lines("list_item", i, end, text)
        return end


def parse_rst(original: str) -> list[Block]:
    return _Reader(original).run()
