"""Markdown (CommonMark + GFM tables) -> blocks, via markdown-it-py tokens.

Offsets come from each block token's `.map` (its source line range), so
`original[char_start:char_end]` is exactly the block's source lines, markers included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.lines import LineIndex
from clef_pipelines.parsing.models import Block

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


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


def parse_markdown(original: str) -> list[Block]:
    tokens = _parser().parse(_blank_front_matter(original))
    idx = LineIndex(original)
    out = BlockBuilder(original)
    items: list[_Item] = []

    def emit_item(item: _Item) -> None:
        if item.emitted or not item.texts:
            item.emitted = True
            return
        item.emitted = True
        s, e = idx.span(item.first_line, item.last_line)
        out.add("list_item", "\n".join(item.texts), s, e)

    i = 0
    n = len(tokens)
    while i < n:
        t = tokens[i]
        typ = t.type
        if typ == "heading_open":
            inline = tokens[i + 1]
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.heading(inline.content, int(t.tag[1]), s, e)
            i += 3
            continue
        if typ == "blockquote_open":
            # A quote stays one block, whatever it holds.
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
            if items:
                emit_item(items[-1])
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.add("quote", "\n".join(parts), s, e)
            i = j
            continue
        if typ == "table_open":
            text, j = _table_text(tokens, i)
            if items:
                emit_item(items[-1])
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.add("table", text, s, e)
            i = j
            continue
        if typ in ("fence", "code_block"):
            if items:
                emit_item(items[-1])
            s, e = idx.span(*t.map) if t.map else (-1, -1)
            out.add("code", t.content, s, e)
        elif typ == "list_item_open":
            if items:
                emit_item(items[-1])
            items.append(_Item(first_line=t.map[0] if t.map else 0))
        elif typ == "list_item_close":
            emit_item(items.pop())
        elif typ in ("bullet_list_open", "ordered_list_open") and items:
            emit_item(items[-1])
        elif typ == "paragraph_open":
            inline = tokens[i + 1]
            if items and not items[-1].emitted:
                items[-1].texts.append(inline.content)
                items[-1].last_line = t.map[1] if t.map else items[-1].first_line + 1
            elif not items:
                s, e = idx.span(*t.map) if t.map else (-1, -1)
                out.add("paragraph", inline.content, s, e)
            else:
                # A paragraph after a nested list, inside the same item: its own block.
                s, e = idx.span(*t.map) if t.map else (-1, -1)
                out.add("list_item", inline.content, s, e)
            i += 3
            continue
        i += 1
    return out.blocks
