"""The ingestion steps as plain functions over polars frames (the assets call these).

Each step fails a broken document alone, with a reason, and lets the rest of the source through.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from clef_pipelines.chunking import chunk_blocks, count_tokens_batch
from clef_pipelines.chunking.models import Chunk, make_embed_text, section_path_of
from clef_pipelines.chunking.units import render
from clef_pipelines.clef.client import SyncClefClient
from clef_pipelines.config import ChunkingConfig, Settings, SourceConfig
from clef_pipelines.ingest.batches import BATCH, BatchWriter
from clef_pipelines.ingest.documents import TO_PROCESS, EntryState, document_hash
from clef_pipelines.ingest.fingerprints import files_fingerprint
from clef_pipelines.ingest.metadata import FieldTypes, MetadataError, metadata_fields
from clef_pipelines.ingest.progress import report as progress_report
from clef_pipelines.parsing import parse_document
from clef_pipelines.parsing.loaders import SourceEntry, iter_source_entries
from clef_pipelines.parsing.models import Block, ParseError
from clef_pipelines.parsing.remote import PREFETCH, prefetch
from clef_pipelines.records import (
    CHUNK_SCHEMA,
    PIPELINE_VERSION,
    content_hash,
    record_id,
    sha256_hex,
)
from clef_pipelines.steering.clef_chunking import ClefChunker
from clef_pipelines.steering.enrich import EnrichReport
from clef_pipelines.steering.enrich import enrich_chunks as enrich_frame
from clef_pipelines.steering.release import (
    ReleaseFileError,
    Releases,
    apply_releases,
    load_releases,
)
from clef_pipelines.steering.runtime import Steering
from clef_pipelines.steering.screen import QUARANTINE, ScreenReport, screen_blocks

#: A chunker over one document's kept blocks: (blocks, title, doc_id) -> chunks.
ChunkerFn = Callable[[list[Block], str, str], list[Chunk]]

#: Documents between two progress reports of the listing, parsing and chunking loops.
PROGRESS_EVERY = 50

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


def list_entries(settings: Settings, source: SourceConfig, fingerprint: str) -> list[EntryState]:
    """List a source's documents with their hashes, without parsing anything."""
    return list(iter_entries(settings, source, fingerprint))


def iter_entries(
    settings: Settings, source: SourceConfig, fingerprint: str
) -> Iterator[EntryState]:
    """`list_entries` one entry at a time."""
    n = 0
    released = source_releases(settings, source).digests(source.name)
    for entry in iter_source_entries(
        source, Path(settings.base_dir), settings.parsing, settings.object_store
    ):
        if n % PROGRESS_EVERY == 0:
            progress_report("list", n, 0)  # total unknown until the listing ends
        n += 1
        if entry.error is not None:
            yield EntryState(
                entry.doc_id, entry.source_uri, None, str(entry.error), entry.error.reason
            )
        else:
            # A release of the document changes its hash: the next run screens it again.
            mark = fingerprint + released.get(entry.doc_id, "")
            yield EntryState(entry.doc_id, entry.source_uri, document_hash(entry.raw_hash, mark))
    progress_report("list", n, n)


def source_fingerprint(settings: Settings, source: SourceConfig) -> str:
    """A cheap change signal for the sensor: file names, sizes and modification times, and the
    releases of the source's documents (`steering.release`: a release or its undoing asks for
    a run, which screens those documents again)."""
    files = files_fingerprint(settings, source)
    try:
        released = source_releases(settings, source).digests(source.name)
    except ReleaseFileError:  # the run names the broken file; the sensor keeps ticking
        released = {}
    if not released:  # no releases: the signal of the files alone, as before releases
        return files
    return sha256_hex(files + json.dumps(sorted(released.items())))[:16]


class _Wanted:
    """The documents a parse step looks for, as sorted polars columns (ids, and their batches
    when given), not as Python sets and dicts: those cost about 160 bytes a document (the id
    strings, the hash tables), so the parse step's memory grew with the source, 0.16 GB at a
    million documents to process, held through the parse and its regroup."""

    def __init__(self, doc_ids: pl.Series, batches: pl.Series | None = None) -> None:
        order = doc_ids.arg_sort()
        self.ids = doc_ids.gather(order).rename("doc_id")
        self.batches = batches.gather(order) if batches is not None else None
        self._found = bytearray(len(self.ids))
        self.found = 0

    def __len__(self) -> int:
        return len(self.ids)

    def _lookup(self, asked: pl.Series) -> tuple[pl.Series, pl.Series]:
        """Each asked id's row in `ids` (clipped in range) and whether it is that id."""
        at = self.ids.search_sorted(asked).clip(upper_bound=len(self.ids) - 1)
        return at, self.ids.gather(at) == asked

    def positions(self, doc_ids: list[str]) -> list[int]:
        """Each id's row in `ids`, or -1 when it is not wanted (one vectorised look-up for
        the list: a polars call per id costs a fraction of a millisecond)."""
        if not doc_ids or not len(self.ids):
            return [-1] * len(doc_ids)
        at, hit = self._lookup(pl.Series(doc_ids, dtype=pl.Utf8))
        return [i if ok else -1 for i, ok in zip(at.to_list(), hit.to_list(), strict=True)]

    def take(self, position: int) -> bool:
        """Mark a wanted document found; False when it was found before (a duplicate id)."""
        if self._found[position]:
            return False
        self._found[position] = 1
        self.found += 1
        return True

    def missing(self) -> list[str]:
        """The wanted ids never found, in id order."""
        found = pl.Series(list(self._found), dtype=pl.UInt8)
        return self.ids.filter(found == 0).to_list()

    def batches_of(self, doc_ids: pl.Series) -> pl.Series:
        """The inventory's batch of each id (every id must be wanted)."""
        assert self.batches is not None
        if not len(doc_ids):
            return self.batches.clear().rename(BATCH)
        if not len(self.ids):
            raise KeyError("a parsed document the inventory did not ask for")
        at, hit = self._lookup(doc_ids.cast(pl.Utf8))
        if not hit.all():
            raise KeyError("a parsed document the inventory did not ask for")
        return self.batches.gather(at).rename(BATCH)


#: Listing entries looked up in `_Wanted` at a time.
_LOOKUP_SLICE = 1024


def _parsed_documents(
    settings: Settings, source: SourceConfig, wanted: _Wanted, fingerprint: str
) -> Iterator[tuple[list[dict], dict | None]]:
    """One pass over the source: (block rows, None) per parsed document, ([], failure) per
    document that failed, then a failure per wanted document never found."""
    total = len(wanted)
    released = source_releases(settings, source).digests(source.name)
    entries = iter_source_entries(
        source, Path(settings.base_dir), settings.parsing, settings.object_store
    )
    while chunk := list(itertools.islice(entries, _LOOKUP_SLICE)):
        positions = wanted.positions([e.doc_id for e in chunk])
        base = wanted.found
        todo = [
            entry
            for entry, position in zip(chunk, positions, strict=True)
            if position >= 0 and wanted.take(position)  # a duplicate id is parsed once
        ]
        for start in range(0, len(todo), PREFETCH):
            window = todo[start : start + PREFETCH]
            if source.remote:  # the window's objects downloaded together, not one by one
                prefetch(window)
            for i, entry in enumerate(window):
                done = base + start + i
                if done % PROGRESS_EVERY == 0:
                    progress_report("parse", done, total)
                mark = fingerprint + released.get(entry.doc_id, "")
                yield from _parsed_entry(settings, source, entry, mark)
    for doc_id in wanted.missing():
        error = f"{doc_id}: vanished while parsing"
        yield [], {"doc_id": doc_id, "reason": "unreadable", "error": error}
    progress_report("parse", total, total)  # the totals: the loop reports every 50th only


def _parsed_entry(
    settings: Settings, source: SourceConfig, entry: SourceEntry, fingerprint: str
) -> Iterator[tuple[list[dict], dict | None]]:
    """One wanted entry of the listing: its block rows, or its failure."""
    try:
        if entry.error is not None:
            raise entry.error
        doc = entry.load()
        blocks: list[Block] = parse_document(doc, settings.parsing)
        if not blocks:
            raise ParseError("empty", f"{entry.source_uri}: no text blocks found")
    except ParseError as exc:
        yield [], {"doc_id": entry.doc_id, "reason": exc.reason, "error": str(exc)}
        return
    except Exception as exc:  # one broken document never stops the batch
        error = f"{type(exc).__name__}: {exc}"
        yield [], {"doc_id": entry.doc_id, "reason": "error", "error": error}
        return
    doc_hash = document_hash(doc.raw_hash, fingerprint)
    meta = json.dumps(doc.metadata, sort_keys=True, default=str)
    yield (
        [
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
            for i, block in enumerate(blocks)
        ],
        None,
    )


def parse_source(
    settings: Settings, source: SourceConfig, inventory: pl.DataFrame, fingerprint: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse the documents the inventory marks for processing; returns (blocks, failures)."""
    wanted = _Wanted(inventory.filter(pl.col("status").is_in(TO_PROCESS))["doc_id"])
    rows: list[dict] = []
    failures: list[dict] = []
    for doc_rows, failure in _parsed_documents(settings, source, wanted, fingerprint):
        rows.extend(doc_rows)
        if failure is not None:
            failures.append(failure)
    return (
        pl.DataFrame(rows, schema=BLOCK_SCHEMA),
        pl.DataFrame(failures, schema=FAILURE_SCHEMA),
    )


@dataclass
class ParseStats:
    documents: int = 0
    blocks: int = 0
    blocks_by_kind: dict[str, int] = field(default_factory=dict)


def parse_source_batches(
    settings: Settings,
    source: SourceConfig,
    inventory: pl.DataFrame,
    fingerprint: str,
    out: BatchWriter,
) -> tuple[ParseStats, pl.DataFrame]:
    """`parse_source` in bounded memory: one pass over the source, the blocks of every
    `batching.batch_documents` parsed documents written to `out` as one file (grouped by the
    documents' batches, from the inventory's `batch` column), then regrouped into one file
    per batch (`BatchWriter.regroup`). Returns (stats, failures)."""
    todo = inventory.filter(pl.col("status").is_in(TO_PROCESS))
    wanted = _Wanted(todo["doc_id"], todo[BATCH].cast(pl.Int64))
    del todo
    stats = ParseStats()
    kinds: Counter[str] = Counter()
    rows: list[dict] = []
    docs_in_part = 0
    failures: list[dict] = []

    def flush() -> None:
        nonlocal rows, docs_in_part
        if rows:
            frame = pl.DataFrame(rows, schema=BLOCK_SCHEMA)
            out.write(frame.with_columns(wanted.batches_of(frame["doc_id"])))
        rows, docs_in_part = [], 0

    for doc_rows, failure in _parsed_documents(settings, source, wanted, fingerprint):
        if failure is not None:
            failures.append(failure)
            continue
        rows.extend(doc_rows)
        stats.documents += 1
        stats.blocks += len(doc_rows)
        kinds.update(r["kind"] for r in doc_rows)
        docs_in_part += 1
        if docs_in_part >= settings.batching.batch_documents:
            flush()
    flush()
    out.regroup()  # one file per batch, so a later step's batch is one file's read
    stats.blocks_by_kind = dict(sorted(kinds.items()))
    return stats, pl.DataFrame(failures, schema=FAILURE_SCHEMA)


def screen_paragraphs(
    blocks: pl.DataFrame,
    steering: Steering,
    chunking: ChunkingConfig | None = None,
    on_judged: Callable[[int, int], None] | None = None,
) -> tuple[pl.DataFrame, ScreenReport]:
    """The paragraph screen (see `steering.screen`): keep / drop / quarantine per block.
    With the collection's `chunking` settings, the enrichment's questions about the chunks
    to come ride along, naming the paragraphs' parts (`steering.preask`)."""
    return screen_blocks(blocks, steering, chunking=chunking, on_judged=on_judged)


def source_releases(settings: Settings, source: SourceConfig | str) -> Releases:
    """The releases of the collection a source feeds (`steering.release`)."""
    cfg = settings.source(source) if isinstance(source, str) else source
    return load_releases(settings.data_path, settings.collection_of(cfg))


def release_blocks(
    screened: pl.DataFrame, releases: Releases, report: ScreenReport
) -> tuple[pl.DataFrame, int]:
    """Keep the released blocks the screen quarantined (`steering.release.apply_releases`),
    with the report's counts moved from quarantine to keep; returns the blocks and how many
    were released."""
    out, n = apply_releases(screened, releases)
    if n:
        report.quarantined -= n
        report.kept += n
        decisions = dict(report.decisions)
        decisions[QUARANTINE] = decisions.get(QUARANTINE, 0) - n
        decisions["keep"] = decisions.get("keep", 0) + n
        report.decisions = {k: v for k, v in decisions.items() if v}
    return out, n


def _rows_by_doc(frame: pl.DataFrame) -> dict[str, list[dict]]:
    """Each document's rows as dicts, documents in order of first appearance (as
    `group_by(maintain_order=True)`). One pass over the frame: iterating a polars group_by
    gathers every group from the whole frame, a few milliseconds a document at 2,000."""
    groups: dict[str, list[dict]] = {}
    for row in frame.iter_rows(named=True):
        groups.setdefault(row["doc_id"], []).append(row)
    return groups


def _blocks_of(rows: Iterable[dict]) -> list[Block]:
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
        for r in rows
    ]


def _quarantined_pieces(rows: list[dict], title: str, doc_id: str, chunker: str) -> list[Chunk]:
    """Each quarantined block alone, as its own record (left out of queries unless asked)."""
    if not rows:
        return []
    blocks = _blocks_of(rows)
    texts = [render(b) for b in blocks]
    tokens = count_tokens_batch(texts)
    out: list[Chunk] = []
    for b, text, n in zip(blocks, texts, tokens, strict=True):
        section = section_path_of(b.heading_path)
        out.append(
            Chunk(
                doc_id=doc_id,
                chunk_index=0,
                text=text,
                embed_text=make_embed_text(title, section, text),
                section_path=section,
                char_start=b.char_start,
                char_end=b.char_end,
                tokens=n,
                chunker=chunker,  # type: ignore[arg-type]
            )
        )
    return out


def _block_facts(rows: list[dict], start: int, end: int, whole_doc: bool) -> dict:
    """Steering facts a chunk inherits from the blocks it covers (by offsets; the whole
    document when offsets are unknown): the highest probabilities, and needs_rescreen."""
    if whole_doc or start < 0:
        covered = rows
    else:
        covered = [r for r in rows if r["char_start"] < end and r["char_end"] > start] or rows
    p_ai = [r["p_instructs_ai"] for r in covered if r.get("p_instructs_ai") is not None]
    p_guard = [r["p_guard"] for r in covered if r.get("p_guard") is not None]
    return {
        "p_instructs_ai": max(p_ai) if p_ai else None,
        "p_guard": max(p_guard) if p_guard else None,
        "needs_rescreen": any(bool(r.get("needs_rescreen")) for r in covered),
    }


def chunk_documents(
    settings: Settings,
    source: str,
    screened: pl.DataFrame,
    chunker: ChunkerFn | None = None,
    field_types: Mapping[str, str] | None = None,
    *,
    types: FieldTypes | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Chunk each document's kept blocks; each quarantined block becomes a record of its own
    (`quarantined`); dropped blocks are left out. Returns (chunks, failures).

    `chunker(blocks, title, doc_id)` replaces the configured structural / fixed chunker (the
    Clef chunker plugs in here). `field_types` are the metadata field types the collection
    already has; a document whose metadata does not fit them (or the first value of a new
    field) fails alone (see `ingest.metadata` for the rule). `types` carries the field types
    fixed so far from one batch of a run to the next (it is updated in place). `progress`
    is told the number of blocks chunked so far, every 50 documents.
    """
    cfg = settings.chunking
    now = datetime.now(UTC).isoformat(timespec="seconds")
    rows: list[dict] = []
    failures: list[dict] = []
    if types is None:
        types = FieldTypes(field_types)  # type: ignore[arg-type]
    used_fields: set[str] = set()
    if screened.height == 0:
        return pl.DataFrame(schema=CHUNK_SCHEMA), pl.DataFrame(schema=FAILURE_SCHEMA)
    if "screen_action" not in screened.columns:
        screened = screened.with_columns(pl.lit("keep").alias("screen_action"))
    kept = screened.filter(pl.col("screen_action") != "drop")
    blocks_done = 0
    for n, (doc_id, group) in enumerate(_rows_by_doc(kept).items()):
        if progress is not None and n % PROGRESS_EVERY == 0:
            progress(blocks_done)
        blocks_done += len(group)
        first = group[0]
        # No null screen_action reaches here (the filter above drops nulls, as polars did).
        block_rows = [r for r in group if r["screen_action"] != QUARANTINE]
        alone_rows = [r for r in group if r["screen_action"] == QUARANTINE]
        try:
            fields = metadata_fields(json.loads(first["metadata_json"] or "{}"))
        except MetadataError as exc:  # this document's metadata alone
            failures.append({"doc_id": doc_id, "reason": "metadata", "error": f"{doc_id}: {exc}"})
            continue
        try:
            kept_blocks = _blocks_of(block_rows)
            if chunker is not None:
                pieces = chunker(kept_blocks, first["title"], doc_id)
            else:
                pieces = chunk_blocks(kept_blocks, first["title"], doc_id, cfg)
            alone = _quarantined_pieces(alone_rows, first["title"], doc_id, cfg.strategy)
        except Exception as exc:  # one broken document never stops the batch
            failures.append(
                {"doc_id": doc_id, "reason": "chunking", "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        if not pieces and not alone:
            # Only headings (or nothing a chunk can hold): said, not dropped in silence.
            failures.append(
                {"doc_id": doc_id, "reason": "empty", "error": f"{doc_id}: no text to chunk"}
            )
            continue
        try:  # after chunking: a document that fails anyway does not fix a field's type
            types.admit(doc_id, fields)
        except MetadataError as exc:
            failures.append({"doc_id": doc_id, "reason": "metadata", "error": f"{doc_id}: {exc}"})
            continue
        used_fields.update(fields)
        seen: Counter[str] = Counter()
        total = len(pieces) + len(alone)
        whole_doc = any(r["char_start"] < 0 for r in block_rows)
        block_of_alone = {id(piece): r for piece, r in zip(alone, alone_rows, strict=True)}
        for index, piece in enumerate([*pieces, *alone]):
            chash = content_hash(piece.embed_text)
            occurrence = seen[chash]
            seen[chash] += 1
            alone_block = block_of_alone.get(id(piece))
            is_quarantined = alone_block is not None
            if alone_block is not None:
                facts = {
                    "p_instructs_ai": alone_block.get("p_instructs_ai"),
                    "p_guard": alone_block.get("p_guard"),
                    "needs_rescreen": bool(alone_block.get("needs_rescreen")),
                    "quarantine_reason": alone_block.get("screen_reason"),
                    "decided_by": alone_block.get("decided_by"),
                }
            else:
                facts = _block_facts(block_rows, piece.char_start, piece.char_end, whole_doc)
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
                "doc_chunk_count": total,
                "chunker": piece.chunker,
                "pipeline_version": PIPELINE_VERSION,
                "ingested_at": now,
                "text": piece.text,
                "embed_text": piece.embed_text,
                "quarantined": is_quarantined,
                "quarantine_reason": None,
                "decided_by": None,
                "needs_reenrich": False,
                "enrich_version": None,
                **facts,
            }
            row.update(fields)
            rows.append(row)
    schema = dict(CHUNK_SCHEMA)
    for name in sorted(used_fields):
        schema[name] = _POLARS_TYPES[types.types[name]]
    frame = pl.DataFrame(rows, schema=schema, strict=False)
    return frame, pl.DataFrame(failures, schema=FAILURE_SCHEMA)


_POLARS_TYPES: dict[str, pl.DataType] = {
    "bool": pl.Boolean(),
    "int": pl.Int64(),
    "float": pl.Float64(),
    "str": pl.Utf8(),
}


def open_steering(settings: Settings, clef: SyncClefClient | None) -> Steering:
    """The run's steering: the shared Clef client (None or off: the guard judges alone), the
    per-text answer cache under data_dir, the guard loaded on first use."""
    return Steering(
        settings.steering, clef=clef, data_dir=settings.data_path, base_dir=settings.base_dir
    )


def kept_documents(screened: pl.DataFrame) -> list[tuple[str, list[Block]]]:
    """Each document's blocks that chunking sees (neither dropped nor quarantined)."""
    if screened.height == 0:
        return []
    kept = screened.filter(~pl.col("screen_action").is_in(["drop", QUARANTINE]))
    return [(doc_id, _blocks_of(rows)) for doc_id, rows in _rows_by_doc(kept).items()]


def clef_chunker(settings: Settings, screened: pl.DataFrame, steering: Steering) -> ClefChunker:
    """The Clef chunker with every sentence pair of the run asked up front, packed."""
    chunker = ClefChunker(steering, settings.chunking)
    chunker.prepare(kept_documents(screened))
    return chunker


def enrich_chunks(chunks: pl.DataFrame, steering: Steering) -> tuple[pl.DataFrame, EnrichReport]:
    """Chunk enrichment (see `steering.enrich`)."""
    return enrich_frame(chunks, steering, steering.taxonomy())
