"""PDF -> blocks via pypdf (extra `pdf`).

The text of each page is extracted and the pages are joined with a blank line; that
extracted text is then read like plain text (see `text.py`). Offsets refer to the extracted
text, which `extract_pdf_text` returns.
"""

from __future__ import annotations

import io

from clef_pipelines.parsing.models import Block, ParseError
from clef_pipelines.parsing.text import parse_text


def extract_pdf_text(data: bytes, name: str) -> str:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise ParseError(
            "unsupported", f"{name}: PDF support is not installed; install clef-pipelines[pdf]"
        ) from None
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ParseError("unreadable", f"{name}: the PDF is encrypted")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
    except ParseError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ParseError("malformed", f"{name}: not a readable PDF ({exc})") from exc
    text = "\n\n".join(p for p in pages if p)
    if not text.strip():
        raise ParseError("empty", f"{name}: the PDF has no extractable text (scanned images?)")
    return text


def parse_pdf(data: bytes, name: str) -> list[Block]:
    return parse_text(extract_pdf_text(data, name))
