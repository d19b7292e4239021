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

from clef_pipelines.parsing.archive import (
    DEFAULT_MAX_ARCHIVE_ENTRIES,
    DEFAULT_MAX_UNPACKED_BYTES,
    check_zip,
)
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


def _table_text(table: Any, entities: dict[str, str]) -> str:
    rows = []
    for row in table.rows:
        rows.append(
            [" ".join(_cell_text(c, entities).split()).replace("|", "\\|") for c in row.cells]
        )
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    if len(lines) > 1:
        lines.insert(1, "| " + " | ".join("---" for _ in rows[0]) + " |")
    return "\n".join(lines)


def _paragraph_styles(document: Any) -> tuple[dict[str, str], str]:
    """Paragraph style id -> name, and the default paragraph style's name, read once: what
    python-docx's `Paragraph.style` finds with two XPath queries per paragraph."""
    from docx.enum.style import WD_STYLE_TYPE

    names: dict[str, str] = {}
    for style in document.styles:
        if style.type == WD_STYLE_TYPE.PARAGRAPH and style.style_id is not None:
            names.setdefault(style.style_id, style.name or "")
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    return names, (default.name or "") if default is not None else ""


def _w(tag: str) -> str:
    return f"{{{_W_NS}}}{tag}"


_W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_P, _TBL, _R, _HYPERLINK = _w("p"), _w("tbl"), _w("r"), _w("hyperlink")
_PPR, _PSTYLE, _VAL, _T = _w("pPr"), _w("pStyle"), _w("val"), _w("t")
#: What `CT_R.text` joins (python-docx's element classes give each its text with `str`).
_RUN_PARTS = frozenset(_w(t) for t in ("br", "cr", "noBreakHyphen", "ptab", "t", "tab"))


def _internal_entities(document: Any) -> dict[str, str]:
    """The entities the part's internal DTD declares, name -> replacement text (Word never
    writes a DTD; a crafted or converted file may). External entities are not read."""
    dtd = document.element.getroottree().docinfo.internalDTD
    if dtd is None:
        return {}
    return {e.name: e.content for e in dtd.iterentities() if e.content is not None}


def _t_text(t: Any, entities: dict[str, str]) -> str:
    """A ``w:t``'s text with its entity references in place. python-docx's parser leaves
    entities unresolved (an XML bomb never expands), and `str(CT_Text)` returns only the
    text before the first one: the rest of the run was lost without a word. A declared
    internal entity becomes its replacement text (one level, never expanded further); any
    other stays as written (``&name;``)."""
    if not len(t):
        return t.text or ""
    from lxml import etree  # (python-docx's own parser; only here, where a child is found)

    parts = [t.text or ""]
    for child in t:
        if isinstance(child, etree._Entity):
            parts.append(entities.get(child.name, child.text or ""))
        parts.append(child.tail or "")
    return "".join(parts)


def _run_text(run: Any, entities: dict[str, str]) -> str:
    return "".join(
        _t_text(e, entities) if e.tag == _T else str(e) for e in run if e.tag in _RUN_PARTS
    )


def _paragraph_text(p: Any, entities: dict[str, str]) -> str:
    """`Paragraph.text` (runs and hyperlinks' runs, in order) in one pass over the children."""
    parts: list[str] = []
    for child in p:
        if child.tag == _R:
            parts.append(_run_text(child, entities))
        elif child.tag == _HYPERLINK:
            parts.extend(_run_text(r, entities) for r in child if r.tag == _R)
    return "".join(parts)


def _cell_text(cell: Any, entities: dict[str, str]) -> str:
    """`_Cell.text` (its paragraphs, a line each), with `_paragraph_text`'s entity care."""
    return "\n".join(_paragraph_text(p, entities) for p in cell._tc.iterchildren(_P))


def _style_id(p: Any) -> str | None:
    ppr = p.find(_PPR)
    style = ppr.find(_PSTYLE) if ppr is not None else None
    return style.get(_VAL) if style is not None else None


def parse_docx(
    data: bytes,
    name: str,
    *,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
    max_entries: int = DEFAULT_MAX_ARCHIVE_ENTRIES,
) -> list[Block]:
    """Blocks of a DOCX; ParseError `too_large` when it unpacks past the limits (checked on
    the zip's directory and on the decompressed bytes before python-docx reads a part)."""
    try:
        import docx
        from docx.table import Table
    except ImportError:
        raise ParseError(
            "unsupported", f"{name}: DOCX support is not installed; install clef-pipelines[docx]"
        ) from None
    check_zip(data, name, max_unpacked_bytes=max_unpacked_bytes, max_entries=max_entries)
    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ParseError("malformed", f"{name}: not a readable DOCX ({exc})") from exc

    styles, default_style = _paragraph_styles(document)
    entities = _internal_entities(document)
    items: list[tuple[BlockKind, int, str]] = []
    body = document.element.body
    for el in body.iterchildren():
        if el.tag == _P:
            text = _paragraph_text(el, entities).strip()
            if text:
                sid = _style_id(el)
                style = styles.get(sid, default_style) if sid is not None else default_style
                kind, level = _style_kind(style)
                items.append((kind, level, text))
        elif el.tag == _TBL:
            text = _table_text(Table(el, document), entities)
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
