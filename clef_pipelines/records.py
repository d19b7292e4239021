"""Chunk records: deterministic ids and the provenance every stored record carries."""

from __future__ import annotations

import hashlib
import uuid

from clef_pipelines.stores.base import FieldType

PIPELINE_VERSION = "1"

# A fixed namespace so that ids are the same on every machine and in every store.
_ID_NAMESPACE = uuid.UUID("6f1c8a52-3c55-4f3a-9d1e-5f0b6c2f7a10")

#: Payload fields of a stored chunk record, with their store types. User metadata is added as
#: ``m_<key>`` string fields.
RECORD_FIELDS: dict[str, FieldType] = {
    "source": "str",
    "doc_id": "str",
    "source_uri": "str",
    "title": "str",
    "section_path": "str",
    "chunk_index": "int",
    "char_start": "int",
    "char_end": "int",
    "tokens": "int",
    "content_hash": "str",
    "doc_hash": "str",
    "doc_chunk_count": "int",
    "chunker": "str",
    "pipeline_version": "str",
    "ingested_at": "str",
    "text": "str",
    "embed_text": "str",
    "quarantined": "bool",
}

#: Fields that filters use most; adapters index them.
FILTER_FIELDS: tuple[str, ...] = ("source", "doc_id", "doc_hash", "quarantined")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_hash(embed_text: str) -> str:
    """Hash of what is embedded: same hash, same vector."""
    return sha256_hex(embed_text)[:32]


def record_id(doc_id: str, chunk_content_hash: str, occurrence: int = 0) -> str:
    """Deterministic UUID from document id + content hash (+ which repeat of the same text in
    the document), valid as a primary key in LanceDB, Qdrant and Postgres alike."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{doc_id}\x1f{chunk_content_hash}\x1f{occurrence}"))


def metadata_field(key: str) -> str:
    """User metadata key -> payload field name (``m_<key>``, safe characters only)."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
    return f"m_{safe}"
