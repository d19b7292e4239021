"""PDF -> blocks via pypdf (extra `pdf`).

The text of each page is extracted and the pages are joined with a blank line; that
extracted text is then read like plain text (see `text.py`). Offsets refer to the extracted
text, which `extract_pdf_text` returns.
"""

from __future__ import annotations

import io

from clef_pipelines.parsing.models import Block, ParseError
from clef_pipelines.parsing.text import parse_text


def extract_pdf_text(data: bytes, name: str, max_text_bytes: int | None = None) -> str:
    """The pages' text joined; ParseError `too_large` when a stream inflates past pypdf's own
    limits or the text passes `max_text_bytes` (`parsing.max_unpacked_bytes`)."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import LimitReachedError, PdfReadError
    except ImportError:
        raise ParseError(
            "unsupported", f"{name}: PDF support is not installed; install clef-pipelines[pdf]"
        ) from None
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ParseError("unreadable", f"{name}: the PDF is encrypted")
        pages: list[str] = []
        size = 0
        for page in reader.pages:
            pages.append((page.extract_text() or "").strip())
            size += len(pages[-1])
            if max_text_bytes is not None and size > max_text_bytes:
                raise ParseError(
                    "too_large",
                    f"{name}: its text passes parsing.max_unpacked_bytes ({max_text_bytes})",
                )
    except ParseError:
        raise
    except LimitReachedError as exc:
        raise ParseError(
            "too_large", f"{name}: a stream inflates past pypdf's limit ({exc})"
        ) from exc
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ParseError("malformed", f"{name}: not a readable PDF ({exc})") from exc
    text = "\n\n".join(p for p in pages if p)
    if not text.strip():
        raise ParseError("empty", f"{name}: the PDF has no extractable text (scanned images?)")
    return text


def parse_pdf(data: bytes, name: str, max_text_bytes: int | None = None) -> list[Block]:
    return parse_text(extract_pdf_text(data, name, max_text_bytes))
