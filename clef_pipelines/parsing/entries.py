"""Pieces of a source listing that local and remote sources share: the formats by file
suffix, a file's bytes as a document, a document's title from its first heading, and one
JSONL line as an entry."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

from clef_pipelines.config import ParsingConfig, SourceConfig
from clef_pipelines.parsing.decode import check_string, check_text, decode_text
from clef_pipelines.parsing.models import (
    TEXT_FORMATS,
    DocFormat,
    Document,
    MetaValue,
    ParseError,
    SourceEntry,
)
from clef_pipelines.parsing.parse import parse_blocks
from clef_pipelines.records import sha256_hex

#: File suffix -> document format.
SUFFIX_FORMATS: dict[str, DocFormat] = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".text": "txt",
    ".rst": "rst",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
_RECORD_FORMATS = ("md", "txt", "rst", "html")


def file_document(
    rel: str, uri: str, fmt: DocFormat, data: bytes, raw_hash: str, cfg: ParsingConfig
) -> Document:
    """A file's bytes (a local file's or an object's) as a ``Document`` named ``rel``: over
    ``max_file_bytes``, undecodable text or an empty binary file is a ``ParseError`` naming
    it; the title is the first heading, else the file's stem. ``raw_hash`` is what the next
    listing compares with (a local file's bytes' hash, an object's listing identity)."""
    if len(data) > cfg.max_file_bytes:
        raise ParseError("oversize", f"{rel}: over the {cfg.max_file_bytes} byte limit")
    content: str | bytes
    if fmt in TEXT_FORMATS:
        content = decode_text(data, cfg.encodings, rel)
    else:
        if not data.strip():
            raise ParseError("empty", f"{rel}: the document is empty")
        content = data
    doc = Document(
        doc_id=rel,
        source_uri=uri,
        title="",
        content=content,
        format=fmt,
        metadata={"path": rel},
        raw_hash=raw_hash,
        archive_limits=(cfg.max_unpacked_bytes, cfg.max_archive_entries),
    )
    doc.title = first_heading(doc) or PurePosixPath(rel).stem
    return doc


def first_heading(doc: Document) -> str:
    # Parsing once here finds the title; the blocks are kept on the document for reuse.
    for block in parse_blocks(doc):
        if block.kind == "heading":
            return block.text
    return ""


def _metadata(raw: Any, where: str) -> dict[str, MetaValue]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ParseError("malformed", f"{where}: 'metadata' must be an object")
    out: dict[str, MetaValue] = {}
    for k, v in raw.items():
        key = str(k)
        check_string(key, where, f"metadata key {key!r}")
        if v is None:
            continue
        if isinstance(v, str | int | float | bool):
            out[key] = v
        else:  # lists and objects are kept, as JSON text (which escapes NUL as \u0000)
            out[key] = json.dumps(v, ensure_ascii=False, sort_keys=True)
        if isinstance(out[key], str):
            check_string(out[key], where, f"field {'metadata.' + key!r}")
    return out


def jsonl_entry(
    source_cfg: SourceConfig,
    raw_line: bytes,
    where: str,
    lineno: int,
    file_uri: str,
    cfg: ParsingConfig,
    seen: set[str],
) -> SourceEntry:
    fallback_id = f"{where.split(' line ')[0]}#L{lineno}"

    def failed(err: ParseError, doc_id: str = fallback_id) -> SourceEntry:
        return SourceEntry(source_cfg.name, doc_id, f"{file_uri}#L{lineno}", None, None, err)

    if len(raw_line) > cfg.max_file_bytes:
        return failed(ParseError("oversize", f"{where}: {len(raw_line)} bytes, over the limit"))
    try:
        line = decode_text(raw_line, cfg.encodings, where)
        record = json.loads(line)
    except ParseError as exc:
        return failed(exc)
    except json.JSONDecodeError as exc:
        return failed(
            ParseError("malformed", f"{where}: invalid JSON ({exc.msg}, column {exc.colno})")
        )
    if not isinstance(record, dict):
        return failed(ParseError("malformed", f"{where}: a line must hold a JSON object"))
    raw_id = record.get("id", record.get("_id"))
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        return failed(ParseError("malformed", f"{where}: no 'id' or '_id' field"))
    doc_id = str(raw_id)
    try:  # an id no store can hold fails under the line's own id (`records.jsonl#L3`)
        check_string(doc_id, where, f"field {'id' if 'id' in record else '_id'!r}")
    except ParseError as exc:
        return failed(exc)
    uri = f"{file_uri}#{doc_id}"
    if doc_id in seen:
        return failed(ParseError("malformed", f"{where}: duplicate id {doc_id!r}"), doc_id)
    seen.add(doc_id)
    text = record.get("text")
    if not isinstance(text, str):
        what = "no 'text' field" if text is None else "'text' must be a string"
        return failed(ParseError("malformed", f"{where}: {what} (id {doc_id!r})"), doc_id)
    # A text read from a file with a byte-order mark and exported as it was keeps the mark as
    # its first character: it is not content, and offsets would count it (shifted by one).
    text = text.removeprefix("\ufeff")
    fmt = record.get("format", "txt")
    if fmt not in _RECORD_FORMATS:
        return failed(
            ParseError("unsupported", f"{where}: format {fmt!r} not one of {_RECORD_FORMATS}"),
            doc_id,
        )
    title = record.get("title")
    title = title if isinstance(title, str) else ""
    try:
        check_text(text, where)
        title = check_string(title, where, "field 'title'").strip()
        metadata = _metadata(record.get("metadata"), where)
    except ParseError as exc:
        return failed(exc, doc_id)
    canonical = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    # surrogatepass: a lone surrogate in a field that is not kept (any other key) still hashes;
    # every other string encodes as plain UTF-8, so hashes stay those of earlier versions.
    digest = sha256_hex(canonical.encode("utf-8", "surrogatepass"))

    def load(_override: ParsingConfig | None) -> Document:
        doc = Document(
            doc_id=doc_id,
            source_uri=uri,
            title=title,
            content=text,
            format=fmt,
            metadata=metadata,
            raw_hash=digest,
        )
        if not doc.title:
            doc.title = first_heading(doc) or doc_id
        return doc

    return SourceEntry(source_cfg.name, doc_id, uri, fmt, digest, None, load)
