"""The ingestion steps as plain functions over polars frames (the assets call these).

Each step fails a broken document alone, with a reason, and lets the rest of the source through.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from clef_pipelines.chunking import chunk_blocks
from clef_pipelines.config import Settings, SourceConfig
from clef_pipelines.ingest.documents import TO_PROCESS, EntryState, document_hash
from clef_pipelines.parsing import parse_document
from clef_pipelines.parsing.loaders import iter_source_entries, resolve_source_path
from clef_pipelines.parsing.models import Block, ParseError
from clef_pipelines.records import (
    PIPELINE_VERSION,
    content_hash,
    metadata_field,
    record_id,
    sha256_hex,
)

FAILURE_SCHEMA = {"doc_id": pl.Utf8, "reason": pl.Utf8, "error": pl.Utf8}

BLOCK_SCHEMA = {
    "source": pl.Utf8,
    "doc_id": pl.Utf8,
    "source_uri": pl.Utf8,
    "title": pl.Utf8,
    "doc_hash": pl.Utf8,
    "metadata_json": pl.Utf8,
    "block_index": pl.Int64,
    "kind": pl.Utf8,
    "text": pl.Utf8,
    "heading_path": pl.List(pl.Utf8),
    "level": pl.Int64,
    "char_start": pl.Int64,
    "char_end": pl.Int64,
    "verbatim": pl.Boolean,
}

CHUNK_SCHEMA = {
    "id": pl.Utf8,
    "source": pl.Utf8,
    "doc_id": pl.Utf8,
    "source_uri": pl.Utf8,
    "title": pl.Utf8,
    "section_path": pl.Utf8,
    "chunk_index": pl.Int64,
    "char_start": pl.Int64,
    "char_end": pl.Int64,
    "tokens": pl.Int64,
    "content_hash": pl.Utf8,
    "doc_hash": pl.Utf8,
    "doc_chunk_count": pl.Int64,
    "chunker": pl.Utf8,
    "pipeline_version": pl.Utf8,
    "ingested_at": pl.Utf8,
    "text": pl.Utf8,
    "embed_text": pl.Utf8,
    "quarantined": pl.Boolean,
}


def list_entries(settings: Settings, source: SourceConfig, fingerprint: str) -> list[EntryState]:
    """List a source's documents with their hashes, without parsing anything."""
    out: list[EntryState] = []
    for entry in iter_source_entries(source, Path(settings.base_dir), settings.parsing):
        if entry.error is not None:
            out.append(
                EntryState(
                    entry.doc_id, entry.source_uri, None, str(entry.error), entry.error.reason
                )
            )
        else:
            out.append(
                EntryState(
                    entry.doc_id, entry.source_uri, document_hash(entry.raw_hash, fingerprint)
                )
            )
    return out


def source_fingerprint(settings: Settings, source: SourceConfig) -> str:
    """A cheap change signal for the sensor: file names, sizes and modification times."""
    root = resolve_source_path(source, settings.base_dir)
    if not root.exists():
        return "missing"
    if root.is_file():
        st = root.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    parts: list[str] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in sorted(files):
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except OSError:
                continue
            parts.append(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}")
    return sha256_hex("\n".join(sorted(parts)))[:16]


def parse_source(
    settings: Settings, source: SourceConfig, inventory: pl.DataFrame, fingerprint: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse the documents the inventory marks for processing; returns (blocks, failures)."""
    wanted = set(inventory.filter(pl.col("status").is_in(TO_PROCESS))["doc_id"].to_list())
    rows: list[dict] = []
    failures: list[dict] = []
    if not wanted:
        return pl.DataFrame(schema=BLOCK_SCHEMA), pl.DataFrame(schema=FAILURE_SCHEMA)
    for entry in iter_source_entries(source, Path(settings.base_dir), settings.parsing):
        if entry.doc_id not in wanted:
            continue
        wanted.discard(entry.doc_id)  # a duplicate id is parsed once (the inventory failed it)
        try:
            if entry.error is not None:
                raise entry.error
            doc = entry.load()
            blocks: list[Block] = parse_document(doc, settings.parsing)
            if not blocks:
                raise ParseError("empty", f"{entry.source_uri}: no text blocks found")
        except ParseError as exc:
            failures.append({"doc_id": entry.doc_id, "reason": exc.reason, "error": str(exc)})
            continue
        except Exception as exc:  # one broken document never stops the batch
            failures.append(
                {"doc_id": entry.doc_id, "reason": "error", "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        doc_hash = document_hash(doc.raw_hash, fingerprint)
        meta = json.dumps(doc.metadata, sort_keys=True, default=str)
        for i, block in enumerate(blocks):
            rows.append(
                {
                    "source": source.name,
                    "doc_id": doc.doc_id,
                    "source_uri": doc.source_uri,
                    "title": doc.title,
                    "doc_hash": doc_hash,
                    "metadata_json": meta,
                    "block_index": i,
                    "kind": block.kind,
                    "text": block.text,
                    "heading_path": list(block.heading_path),
                    "level": block.level,
                    "char_start": block.char_start,
                    "char_end": block.char_end,
                    "verbatim": bool(getattr(block, "verbatim", False)),
                }
            )
    for doc_id in sorted(wanted):
        failures.append(
            {"doc_id": doc_id, "reason": "unreadable", "error": f"{doc_id}: vanished while parsing"}
        )
    return (
        pl.DataFrame(rows, schema=BLOCK_SCHEMA),
        pl.DataFrame(failures, schema=FAILURE_SCHEMA),
    )


def screen_paragraphs(blocks: pl.DataFrame) -> pl.DataFrame:
    """The seam for the Clef paragraph screen: every block kept until it is enabled.

    Columns: screen_action (keep / drop / quarantine), screen_reason, p_boilerplate,
    p_injection (probabilities from Clef), screen_mode (on / shadow / off).
    """
    return blocks.with_columns(
        pl.lit("keep").alias("screen_action"),
        pl.lit(None, dtype=pl.Utf8).alias("screen_reason"),
        pl.lit(None, dtype=pl.Float64).alias("p_boilerplate"),
        pl.lit(None, dtype=pl.Float64).alias("p_injection"),
        pl.lit("off").alias("screen_mode"),
    )


def _blocks_of(group: pl.DataFrame) -> list[Block]:
    return [
        Block(
            kind=r["kind"],
            text=r["text"],
            heading_path=list(r["heading_path"] or []),
            level=r["level"],
            char_start=r["char_start"],
            char_end=r["char_end"],
            order=r["block_index"],
            verbatim=r["verbatim"],
        )
        for r in group.iter_rows(named=True)
    ]


def chunk_documents(
    settings: Settings, source: str, screened: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Chunk each document's kept blocks; returns (chunks, failures)."""
    cfg = settings.chunking
    now = datetime.now(UTC).isoformat(timespec="seconds")
    rows: list[dict] = []
    failures: list[dict] = []
    meta_types: dict[str, pl.DataType] = {}
    if screened.height == 0:
        return pl.DataFrame(schema=CHUNK_SCHEMA), pl.DataFrame(schema=FAILURE_SCHEMA)
    kept = screened.filter(pl.col("screen_action") != "drop")
    for (doc_id,), group in kept.group_by(["doc_id"], maintain_order=True):
        first = group.row(0, named=True)
        quarantined_rows = group["screen_action"] == "quarantine"
        try:
            pieces = chunk_blocks(
                _blocks_of(group.filter(~quarantined_rows)), first["title"], doc_id, cfg
            )
        except Exception as exc:  # one broken document never stops the batch
            failures.append(
                {"doc_id": doc_id, "reason": "chunking", "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        metadata = json.loads(first["metadata_json"] or "{}")
        seen: Counter[str] = Counter()
        for index, piece in enumerate(pieces):
            chash = content_hash(piece.embed_text)
            occurrence = seen[chash]
            seen[chash] += 1
            row = {
                "id": record_id(f"{source}\x1f{doc_id}", chash, occurrence),
                "source": source,
                "doc_id": doc_id,
                "source_uri": first["source_uri"],
                "title": first["title"],
                "section_path": piece.section_path,
                "chunk_index": index,
                "char_start": piece.char_start,
                "char_end": piece.char_end,
                "tokens": piece.tokens,
                "content_hash": chash,
                "doc_hash": first["doc_hash"],
                "doc_chunk_count": len(pieces),
                "chunker": piece.chunker,
                "pipeline_version": PIPELINE_VERSION,
                "ingested_at": now,
                "text": piece.text,
                "embed_text": piece.embed_text,
                "quarantined": False,
            }
            for key, value in metadata.items():
                if isinstance(value, (dict, list)):
                    value = json.dumps(value, sort_keys=True)
                name = metadata_field(key)
                row[name] = value
                meta_types.setdefault(name, _dtype_of(value))
            rows.append(row)
    schema = dict(CHUNK_SCHEMA)
    for name, dtype in meta_types.items():
        schema[name] = dtype
    frame = pl.DataFrame(rows, schema=schema, strict=False)
    return frame, pl.DataFrame(failures, schema=FAILURE_SCHEMA)


def _dtype_of(value: object) -> pl.DataType:
    if isinstance(value, bool):
        return pl.Boolean()
    if isinstance(value, int):
        return pl.Int64()
    if isinstance(value, float):
        return pl.Float64()
    return pl.Utf8()


def enrich_chunks(chunks: pl.DataFrame) -> pl.DataFrame:
    """The seam for Clef enrichment: quality, taxonomy tags and custom answers, empty for now."""
    return chunks.with_columns(
        pl.lit(None, dtype=pl.Float64).alias("enrich_quality"),
        pl.lit(None, dtype=pl.Utf8).alias("enrich_tags"),
        pl.lit(None, dtype=pl.Utf8).alias("enrich_answers_json"),
        pl.lit("off").alias("enrich_mode"),
    )


def counts_by(frame: pl.DataFrame, column: str) -> dict[str, int]:
    if frame.height == 0:
        return {}
    return {str(k): int(v) for k, v in frame.group_by(column).len().sort(column).iter_rows()}
