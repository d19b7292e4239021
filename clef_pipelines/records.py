"""Chunk records: deterministic ids and the provenance every stored record carries."""

from __future__ import annotations

import hashlib
import uuid

import polars as pl

# Re-exported: the pipeline's version is read from here by the records' writers.
from clef_pipelines.pipeline_version import PIPELINE_VERSION as PIPELINE_VERSION
from clef_pipelines.stores.base import FieldType

# A fixed namespace so that ids are the same on every machine and in every store.
_ID_NAMESPACE = uuid.UUID("6f1c8a52-3c55-4f3a-9d1e-5f0b6c2f7a10")

#: The chunk record, declared once: every payload field a stored chunk carries, with its store
#: type. The Parquet schema of the `chunks` / `enrichments` intermediates (`CHUNK_SCHEMA`) and
#: the store's field types (`RECORD_FIELDS`) both derive from it, so adding a column here is
#: the only change a new provenance or steering field needs.
CHUNK_RECORD: dict[str, FieldType] = {
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
    # Steering: why a record is quarantined (left out of queries unless asked for), which
    # judge decided, and whether a failed Clef call left it to be asked again next run.
    "quarantined": "bool",
    "quarantine_reason": "str",
    "decided_by": "str",
    "p_instructs_ai": "float",
    "p_guard": "float",
    "needs_rescreen": "bool",
    "needs_reenrich": "bool",
    "enrich_version": "str",
}

#: Families of fields whose names are made at run time, by prefix, with how their store type
#: is chosen: user metadata ``m_<key>`` (typed from the values), enrichment quality answers
#: ``q_<name>`` (probabilities), taxonomy tags ``tag_<field>`` with their probability
#: ``p_tag_<field>``, and custom question answers ``x_<name>`` (typed from the values).
DYNAMIC_PREFIXES: tuple[str, ...] = ("m_", "q_", "tag_", "p_tag_", "x_")

#: Payload fields of a stored chunk record, with their store types (from `CHUNK_RECORD`).
RECORD_FIELDS: dict[str, FieldType] = dict(CHUNK_RECORD)

_POLARS_OF: dict[FieldType, pl.DataType] = {
    "str": pl.Utf8(),
    "int": pl.Int64(),
    "float": pl.Float64(),
    "bool": pl.Boolean(),
}

#: The Parquet / polars schema of a chunk frame: the record id, then every payload field.
CHUNK_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Utf8(),
    **{name: _POLARS_OF[t] for name, t in CHUNK_RECORD.items()},
}

#: Fields that filters use most; adapters index them.
FILTER_FIELDS: tuple[str, ...] = ("source", "doc_id", "doc_hash", "quarantined")


def is_payload_column(name: str) -> bool:
    """A frame column that becomes stored payload: a declared field or a dynamic family."""
    return name in CHUNK_RECORD or name.startswith(DYNAMIC_PREFIXES)


def field_type_of(dtype: pl.DataType) -> FieldType:
    """The store type of a polars column (dynamic fields are typed from their frame)."""
    if dtype == pl.Boolean:
        return "bool"
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    return "str"


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
    """User metadata key -> payload field name (``m_<key>``); the rule is `ingest.metadata`'s."""
    from clef_pipelines.ingest.metadata import metadata_field as field_name

    return field_name(key)
