"""Raw bytes -> text, with the per-document failure reasons (binary, encoding, empty)."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from clef_pipelines.parsing.models import ErrorReason, ParseError

# Bytes that never occur in text (controls other than tab, newlines, form feed, escape).
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27))
_SNIFF = 8192


def looks_binary(raw: bytes) -> bool:
    """NUL bytes, or more than 10% control bytes in the first 8 KiB."""
    head = raw[:_SNIFF]
    if b"\x00" in head:
        return True
    if not head:
        return False
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
    return controls / len(head) > 0.10


#: Byte-order marks of the encodings whose text is full of NUL bytes (UTF-32 before UTF-16:
#: its little-endian mark begins with UTF-16's). Their codecs read the mark and drop it.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _wide_encoding(raw: bytes) -> str | None:
    """UTF-16 or UTF-32 when `raw` starts with its byte-order mark, else None."""
    return next((enc for bom, enc in _WIDE_BOMS if raw.startswith(bom)), None)


def decode_text(raw: bytes, encodings: Sequence[str], name: str) -> str:
    """Decode with the first encoding that works; raise ParseError naming `name` otherwise.

    A UTF-16 or UTF-32 byte-order mark picks that encoding first: such text is half NUL
    bytes, which the binary sniff would otherwise take for a binary file. A byte-order mark
    is never part of the text: offsets count from the first real character."""
    if not raw.strip():
        raise ParseError("empty", f"{name}: the document is empty")
    wide = _wide_encoding(raw)
    if wide is None and looks_binary(raw):
        raise ParseError("binary", f"{name}: looks like a binary file, not text")
    errors: list[str] = []
    for enc in [wide] if wide else encodings:
        try:
            text = raw.decode(enc)
        except (UnicodeDecodeError, LookupError) as exc:
            errors.append(f"{enc}: {exc.__class__.__name__}")
            continue
        # Drop a UTF-8 byte-order mark (the wide codecs drop theirs).
        return _checked(text.removeprefix("\ufeff"), name)
    tried = wide or ", ".join(encodings)
    raise ParseError("encoding", f"{name}: cannot be decoded with {tried} ({'; '.join(errors)})")


def _checked(text: str, name: str) -> str:
    if not text.strip():
        raise ParseError("empty", f"{name}: the document holds only whitespace")
    # Past the sniffed head too: no store keeps a NUL (PostgreSQL refuses it in text).
    pos = text.find("\x00")
    if pos >= 0:
        raise ParseError(
            "binary", f"{name}: the text holds a NUL character (U+0000) at position {pos}"
        )
    return text


def check_text(text: str, name: str, field: str = "text") -> str:
    """The same checks for text that arrives already decoded (a JSONL field): not empty, no
    NUL (reason `binary`, as for a file) and no lone surrogate (`invalid_text`) anywhere."""
    if not text.strip():
        raise ParseError("empty", f"{name}: the document text is empty")
    check_string(text, name, f"field {field!r}", nul_reason="binary")
    return text


def check_string(
    value: str, name: str, what: str, *, nul_reason: ErrorReason = "invalid_text"
) -> str:
    """Refuse a string no store can hold as it is: a lone surrogate (UTF-8 cannot encode it:
    not Parquet, LanceDB, Qdrant's JSON nor PostgreSQL) and NUL (PostgreSQL's text cannot hold
    it; refused in every store so that a source gives the same result in each). The error
    names `what` (e.g. ``field 'id'``) and the position; other control characters are kept."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        raise ParseError(
            "invalid_text",
            f"{name}: {what} holds a lone surrogate (U+{code:04X}) at position {exc.start}",
        ) from None
    pos = value.find("\x00")
    if pos >= 0:
        raise ParseError(
            nul_reason, f"{name}: {what} holds a NUL character (U+0000) at position {pos}"
        )
    return value
