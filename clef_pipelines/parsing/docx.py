"""DOCX -> blocks via python-docx (extra `docx`).

Paragraph styles decide the kind: `Title` and `Heading N` are headings, `List ...` styles
list items, `Quote`/`Intense Quote` quotes, styles naming code (`Code`, `HTML Code`...)
code; tables become pipe tables. A DOCX has no source text, so offsets refer to the
extracted text: the block texts joined with a blank line, in order.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.models import Block, BlockKind, ParseError

_HEADING = re.compile(r"^heading\s*(\d)$", re.I)


def _style_kind(style: str) -> tuple[BlockKind, int]:
    s = style.strip()
    m = _HEADING.match(s)
    if m:
        return "heading", int(m.group(1))
    low = s.lower()
    if low == "title":
        return "heading", 1
    if low.startswith("list"):
        return "list_item", 0
    if "quote" in low:
        return "quote", 0
    if "code" in low:
        return "code", 0
    return "paragraph", 0


def _table_text(table: Any) -> str:
    rows = []
    for row in table.rows:
        rows.append([" ".join(c.text.split()).replace("|", "\\|") for c in row.cells])
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    if len(lines) > 1:
        lines.insert(1, "| " + " | ".join("---" for _ in rows[0]) + " |")
    return "\n".join(lines)


def parse_docx(data: bytes, name: str) -> list[Block]:
    try:
        import docx
        from docx.table import Table
        from docx.text.paragraph import Paragraph
    except ImportError:
        raise ParseError(
            "unsupported", f"{name}: DOCX support is not installed; install clef-pipelines[docx]"
        ) from None
    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ParseError("malformed", f"{name}: not a readable DOCX ({exc})") from exc

    items: list[tuple[BlockKind, int, str]] = []
    body = document.element.body
    for el in body.iterchildren():
        tag = el.tag.rsplit("}", 1)[-1]
        if tag == "p":
            para = Paragraph(el, document)
            text = para.text.strip()
            if text:
                style = para.style.name if para.style is not None else ""
                kind, level = _style_kind(style or "")
                items.append((kind, level, text))
        elif tag == "tbl":
            text = _table_text(Table(el, document))
            if text.strip():
                items.append(("table", 0, text))

    out = BlockBuilder(None)
    pos = 0
    for kind, level, text in items:
        start, end = pos, pos + len(text)
        if kind == "heading":
            out.heading(text, level, start, end)
        else:
            out.add(kind, text, start, end)
        pos = end + 2  # the blank line between blocks in the extracted text
    return out.blocks
