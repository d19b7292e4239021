"""One entry point from a document (or a listed source entry) to its blocks."""

from __future__ import annotations

from clef_pipelines.config import ParsingConfig
from clef_pipelines.parsing.decode import check_string
from clef_pipelines.parsing.models import Block, Document, ParseError, SourceEntry


def _parse(doc: Document) -> list[Block]:
    fmt = doc.format
    if fmt in ("pdf", "docx"):
        data = doc.content if isinstance(doc.content, bytes) else doc.content.encode("utf-8")
        if fmt == "pdf":
            from clef_pipelines.parsing.pdf import parse_pdf

            limit = doc.archive_limits[0] if doc.archive_limits is not None else None
            return parse_pdf(data, doc.source_uri, limit)
        from clef_pipelines.parsing.docx import parse_docx

        if doc.archive_limits is None:
            return parse_docx(data, doc.source_uri)
        unpacked, entries = doc.archive_limits
        return parse_docx(data, doc.source_uri, max_unpacked_bytes=unpacked, max_entries=entries)
    text = doc.text
    if fmt == "md":
        from clef_pipelines.parsing.markdown import parse_markdown

        return parse_markdown(text)
    if fmt == "html":
        from clef_pipelines.parsing.html import parse_html

        return parse_html(text)
    if fmt == "rst":
        from clef_pipelines.parsing.rst import parse_rst

        return parse_rst(text)
    if fmt == "txt":
        from clef_pipelines.parsing.text import parse_text

        return parse_text(text)
    raise ParseError("unsupported", f"{doc.source_uri}: no parser for format {fmt!r}")


def parse_blocks(doc: Document) -> list[Block]:
    """Blocks of a loaded document; ParseError('empty') when nothing readable is left."""
    if doc._blocks is not None:
        return doc._blocks
    try:
        blocks = _parse(doc)
    except ParseError:
        raise
    except RecursionError as exc:
        raise ParseError("malformed", f"{doc.source_uri}: nested too deeply to parse") from exc
    except Exception as exc:  # a parser bug or odd input must fail this document alone
        raise ParseError(
            "malformed", f"{doc.source_uri}: cannot parse ({exc.__class__.__name__}: {exc})"
        ) from exc
    if not blocks:
        raise ParseError("empty", f"{doc.source_uri}: no text content after parsing")
    for block in blocks:  # what a parser extracted (a PDF's text) must be storable too
        check_string(block.text, doc.source_uri, "the extracted text", nul_reason="binary")
    doc._blocks = blocks
    return blocks


def parse_document(
    doc: Document | SourceEntry, parsing_cfg: ParsingConfig | None = None
) -> list[Block]:
    """Load (for a source entry) and parse a document into ordered blocks.

    Raises ParseError with a reason code; callers record the failure for this document
    alone and carry on with the others.
    """
    if not isinstance(doc, Document):
        doc = doc.load(parsing_cfg)
    return parse_blocks(doc)
