"""Markdown (CommonMark + GFM tables, MyST directives and roles) -> blocks, via markdown-it-py
tokens.

Offsets come from each block token's `.map` (its source line range), so
`original[char_start:char_end]` is exactly the block's source lines, markers included.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.lines import LineIndex
from clef_pipelines.parsing.models import Block, BlockKind
from clef_pipelines.parsing.myst import rewrite_myst

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


# markdown-it stops descending past this many nested containers and drops what lies deeper;
# `_recover_deep_lines` flattens that content back in. 100 levels keep the parser's recursion
# far from Python's limit.
MAX_NESTING = 100
# Container markers at the start of a line: quote '>', bullets, ordered list numbers.
_MARKERS = re.compile(r"^(?:[ \t]*(?:>|[-*+](?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$)))+[ \t]*")
_LEAVES = frozenset(
    {"paragraph_open", "heading_open", "fence", "code_block", "html_block", "hr", "table_open"}
)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable("table")


@dataclass
class _Item:
    """An open list item: its own paragraphs (nested lists become their own items)."""

    first_line: int
    texts: list[str] = field(default_factory=list)
    last_line: int = -1
    emitted: bool = False


def _blank_front_matter(text: str) -> str:
    # YAML front matter is metadata, not content; blank it out line for line so that
    # token line numbers still match the original text.
    m = _FRONT_MATTER.match(text)
    if not m:
        return text
    blanked = re.sub(r"[^\r\n]", "", m.group(0))
    return blanked + text[m.end() :]


def _table_text(tokens: list[Token], i: int) -> tuple[str, int]:
    """Pipe-table text of the table starting at tokens[i]; returns (text, index after it)."""
    rows: list[list[str]] = []
    header_rows = 0
    in_head = False
    while i < len(tokens) and tokens[i].type != "table_close":
        t = tokens[i]
        if t.type == "thead_open":
            in_head = True
        elif t.type == "thead_close":
            in_head = False
        elif t.type == "tr_open":
            rows.append([])
            if in_head:
                header_rows += 1
        elif t.type == "inline" and rows:
            rows[-1].append(t.content.strip())
        i += 1
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    if header_rows and rows:
        lines.insert(header_rows, "| " + " | ".join("---" for _ in rows[0]) + " |")
    return "\n".join(lines), i + 1


def _recover_deep_lines(tokens: list[Token], idx: LineIndex, blocks: list[Block]) -> list[Block]:
    """Lines that markdown-it left out because they were nested too deep, flattened into
    blocks of their own (markers stripped) at their place in the document."""
    covered = bytearray(len(idx))
    for t in tokens:
        if t.type in _LEAVES and t.map:
            covered[t.map[0] : t.map[1]] = b"\x01" * (t.map[1] - t.map[0])
    extra: list[Block] = []
    for line_no, line in enumerate(idx.lines):
        if covered[line_no] or not line.strip():
            continue
        marker = _MARKERS.match(line)
        cut = marker.end() if marker else 0
        text = line[cut:].strip()
        if not text:
            continue
        kind: BlockKind = "paragraph"
        if marker:
            kind = "quote" if marker.group(0).lstrip().startswith(">") else "list_item"
        start = idx.starts[line_no] + cut + (len(line[cut:]) - len(line[cut:].lstrip()))
        extra.append(Block(kind, text, [], 0, start, start + len(text), verbatim=True))
    if not extra:
        return blocks
    merged = sorted([*blocks, *extra], key=lambda b: b.char_start)  # stable: ties keep order
    parsed = {id(b) for b in blocks}
    path: list[str] = []
    for order, block in enumerate(merged):
        block.order = order
        if id(block) in parsed:
            path = block.heading_path
        else:
            block.heading_path = list(path)
    return merged


class _Walk:
    """One pass over markdown-it's block tokens, adding blocks as it goes. Each handler
    takes the index of its token and returns the index of the next token to read."""

    def __init__(self, original: str, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.idx = LineIndex(original)
        self.out = BlockBuilder(original)
        self.items: list[_Item] = []

    def run(self) -> list[Block]:
        i = 0
        while i < len(self.tokens):
            handler = _HANDLERS.get(self.tokens[i].type)
            i = handler(self, i) if handler else i + 1
        return self.out.blocks

    def _span(self, t: Token) -> tuple[int, int]:
        return self.idx.span(*t.map) if t.map else (-1, -1)

    def _emit_item(self, item: _Item) -> None:
        if item.emitted or not item.texts:
            item.emitted = True
            return
        item.emitted = True
        s, e = self.idx.span(item.first_line, item.last_line)
        self.out.add("list_item", "\n".join(item.texts), s, e)

    def _emit_open_item(self) -> None:
        """The open list item's text so far, before a block of its own inside it."""
        if self.items:
            self._emit_item(self.items[-1])

    def heading(self, i: int) -> int:
        t = self.tokens[i]
        self.out.heading(self.tokens[i + 1].content, int(t.tag[1]), *self._span(t))
        return i + 3

    def quote(self, i: int) -> int:
        # A quote stays one block, whatever it holds.
        tokens, n = self.tokens, len(self.tokens)
        depth, j, parts = 1, i + 1, []
        while j < n and depth:
            tj = tokens[j]
            if tj.type == "blockquote_open":
                depth += 1
            elif tj.type == "blockquote_close":
                depth -= 1
            elif tj.type == "inline" or tj.type in ("fence", "code_block"):
                parts.append(tj.content.strip("\n"))
            j += 1
        self._emit_open_item()
        self.out.add("quote", "\n".join(parts), *self._span(tokens[i]))
        return j

    def table(self, i: int) -> int:
        text, j = _table_text(self.tokens, i)
        self._emit_open_item()
        self.out.add("table", text, *self._span(self.tokens[i]))
        return j

    def code(self, i: int) -> int:
        t = self.tokens[i]
        self._emit_open_item()
        self.out.add("code", t.content, *self._span(t))
        return i + 1

    def item_open(self, i: int) -> int:
        t = self.tokens[i]
        self._emit_open_item()
        self.items.append(_Item(first_line=t.map[0] if t.map else 0))
        return i + 1

    def item_close(self, i: int) -> int:
        self._emit_item(self.items.pop())
        return i + 1

    def list_open(self, i: int) -> int:
        self._emit_open_item()
        return i + 1

    def paragraph(self, i: int) -> int:
        t, inline = self.tokens[i], self.tokens[i + 1]
        items = self.items
        if items and not items[-1].emitted:
            items[-1].texts.append(inline.content)
            items[-1].last_line = t.map[1] if t.map else items[-1].first_line + 1
        elif not items:
            self.out.add("paragraph", inline.content, *self._span(t))
        else:
            # A paragraph after a nested list, inside the same item: its own block.
            self.out.add("list_item", inline.content, *self._span(t))
        return i + 3


_HANDLERS: dict[str, Callable[[_Walk, int], int]] = {
    "heading_open": _Walk.heading,
    "blockquote_open": _Walk.quote,
    "table_open": _Walk.table,
    "fence": _Walk.code,
    "code_block": _Walk.code,
    "list_item_open": _Walk.item_open,
    "list_item_close": _Walk.item_close,
    "bullet_list_open": _Walk.list_open,
    "ordered_list_open": _Walk.list_open,
    "paragraph_open": _Walk.paragraph,
}


def parse_markdown(original: str) -> list[Block]:
    # MyST directives, roles and labels become the CommonMark they stand for, line for line.
    tokens = _parser().parse(rewrite_myst(_blank_front_matter(original)))
    walk = _Walk(original, tokens)
    blocks = walk.run()
    if max((t.level for t in tokens), default=0) >= MAX_NESTING - 2:
        return _recover_deep_lines(tokens, walk.idx, blocks)
    return blocks
