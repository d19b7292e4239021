"""Releases: blocks a person put back after the screen wrongly quarantined them.

A release is a per-collection allow-list kept in `<data_dir>/releases/<collection>.json`,
beside the collection's other local state (its lock, the answer cache), so it outlives every
re-ingest. It holds

- records, by the quarantined record's id, with what makes the release last: the record's
  source, document and `content_hash` (the hash of its embedded text). When that document is
  screened again, a block the judges quarantine whose text hashes the same is kept instead
  (`decision` keep, `decided_by` `release`, its scores still recorded) and is chunked with its
  neighbours like any kept block. A block whose text changed (or its section's heading, or
  the document's title: they are embedded with it) is a new text: it is judged afresh, and
  quarantined again if the judges say so.
- documents, by source and document id: every block of them is kept, whatever it says and
  however it changes, until the release is undone. The judges' scores are still recorded.

The guard stays on for everything else. A release changes the hash of the documents it names
(`doc_digest`, folded into the document hash at listing and parsing), so the next ingest
processes exactly those documents again, with no `--force`; undoing it does the same.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from clef_pipelines.chunking.models import make_embed_text, section_path_of
from clef_pipelines.chunking.units import render
from clef_pipelines.parsing.models import Block
from clef_pipelines.records import content_hash, record_id, sha256_hex
from clef_pipelines.steering.release_file import release_path as release_path
from clef_pipelines.stores.base import VectorStore

#: What a released block's `decided_by` and `screen_reason` say.
RELEASED_BY = "release"
RELEASE_REASON = "released"
#: The release file's layout version.
_VERSION = 1


@dataclass
class ReleasedRecord:
    """A quarantined record put back: where it is and the text it had."""

    id: str
    source: str
    doc_id: str
    content_hash: str
    section: str = ""
    #: The first words of the text, for `release --list`.
    text: str = ""
    released_at: str = ""


@dataclass
class ReleasedDocument:
    """A document whose every block is kept."""

    source: str
    doc_id: str
    released_at: str = ""


@dataclass
class Releases:
    """A collection's releases (see the module's docstring)."""

    records: dict[str, ReleasedRecord] = field(default_factory=dict)
    documents: list[ReleasedDocument] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.records or self.documents)

    def document_released(self, source: str, doc_id: str) -> bool:
        return any(d.source == source and d.doc_id == doc_id for d in self.documents)

    def doc_digest(self, source: str, doc_id: str) -> str:
        """What the releases add to one document's hash: "" for a document with none (so
        collections without releases keep their hashes), else a short hash that changes
        whenever a release of the document is made or undone."""
        hashes = sorted(
            r.content_hash
            for r in self.records.values()
            if r.source == source and r.doc_id == doc_id
        )
        whole = self.document_released(source, doc_id)
        if not hashes and not whole:
            return ""
        return ":r" + sha256_hex(json.dumps([whole, hashes]))[:12]

    def digests(self, source: str) -> dict[str, str]:
        """`doc_digest` of each document of `source` that has a release (the others: "")."""
        docs = {r.doc_id for r in self.records.values() if r.source == source}
        docs |= {d.doc_id for d in self.documents if d.source == source}
        return {doc_id: self.doc_digest(source, doc_id) for doc_id in docs}

    def released_hashes(self) -> set[tuple[str, str, str]]:
        """(source, doc_id, content_hash) of every released record."""
        return {(r.source, r.doc_id, r.content_hash) for r in self.records.values()}

    def sources(self) -> set[str]:
        return {r.source for r in self.records.values()} | {d.source for d in self.documents}

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "records": [asdict(r) for r in sorted(self.records.values(), key=_record_order)],
            "documents": [asdict(d) for d in sorted(self.documents, key=_doc_order)],
        }


def _record_order(r: ReleasedRecord) -> tuple[str, str, str]:
    return (r.source, r.doc_id, r.id)


def _doc_order(d: ReleasedDocument) -> tuple[str, str]:
    return (d.source, d.doc_id)


class ReleaseFileError(ValueError):
    """The release file cannot be read."""


def load_releases(data_dir: str | os.PathLike[str], collection: str) -> Releases:
    """A collection's releases; none when it has no release file."""
    path = release_path(data_dir, collection)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Releases()
    except (OSError, ValueError) as exc:
        raise ReleaseFileError(f"{path}: cannot read the collection's releases: {exc}") from exc
    try:
        return Releases(
            records={r["id"]: ReleasedRecord(**r) for r in raw.get("records") or []},
            documents=[ReleasedDocument(**d) for d in raw.get("documents") or []],
        )
    except (TypeError, KeyError, AttributeError) as exc:
        raise ReleaseFileError(f"{path}: not a release file ({exc})") from exc


def save_releases(data_dir: str | os.PathLike[str], collection: str, releases: Releases) -> Path:
    """Write the releases atomically (a reader sees the old file or the new one)."""
    path = release_path(data_dir, collection)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(releases.as_dict(), fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def alone_embed_text(row: dict[str, Any]) -> str:
    """The embedded text of a block stored alone (a quarantined record), from its block row:
    what `ingest.stages` embeds, so its hash is the record's `content_hash`."""
    block = Block(
        kind=row["kind"],
        text=row["text"],
        heading_path=list(row.get("heading_path") or []),
        level=0,
        char_start=-1,
        char_end=-1,
    )
    section = section_path_of(block.heading_path)
    return make_embed_text(row.get("title") or "", section, render(block))


def alone_record_ids(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(record id, content hash) each quarantined block row will be stored under, in order:
    the ids `ingest.stages.chunk_documents` gives records of their own (a repeat of the same
    text in one document counts as its next occurrence)."""
    seen: dict[tuple[str, str, str], int] = {}
    out: list[tuple[str, str]] = []
    for row in rows:
        chash = content_hash(alone_embed_text(row))
        key = (row["source"], row["doc_id"], chash)
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        out.append((record_id(f"{row['source']}\x1f{row['doc_id']}", chash, occurrence), chash))
    return out


def apply_releases(screened: pl.DataFrame, releases: Releases) -> tuple[pl.DataFrame, int]:
    """The screened blocks with every released block the screen quarantined kept instead
    (`decision` and `screen_action` keep, `decided_by` release; the judges' probabilities stay),
    and how many there were."""
    if not releases or screened.height == 0:
        return screened, 0
    actions = screened["screen_action"].to_list()
    quarantined = [i for i, a in enumerate(actions) if a == "quarantine"]
    if not quarantined:
        return screened, 0
    hashes = releases.released_hashes()
    rows = screened[quarantined].to_dicts()
    released: list[int] = []
    for i, row in zip(quarantined, rows, strict=True):
        if releases.document_released(row["source"], row["doc_id"]) or (
            (row["source"], row["doc_id"], content_hash(alone_embed_text(row))) in hashes
        ):
            released.append(i)
    if not released:
        return screened, 0
    mask = pl.Series([False] * screened.height)
    mask[released] = True
    out = screened.with_columns(
        pl.when(mask).then(pl.lit("keep")).otherwise(pl.col(c)).alias(c)
        for c in ("decision", "screen_action")
    ).with_columns(
        pl.when(mask).then(pl.lit(RELEASED_BY)).otherwise(pl.col("decided_by")).alias("decided_by"),
        pl.when(mask)
        .then(pl.lit(RELEASE_REASON))
        .otherwise(pl.col("screen_reason"))
        .alias("screen_reason"),
    )
    return out, len(released)


class ReleaseError(ValueError):
    """A release names records or documents that are not there to release (or unrelease)."""


def _is_record_id(value: str) -> bool:
    """A record id is a canonical UUID (`records.record_id`); anything else names none."""
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def release_records(
    store: VectorStore,
    collection: str,
    releases: Releases,
    ids: Sequence[str],
    source: str | None = None,
) -> list[ReleasedRecord]:
    """Add quarantined records to the releases, by id; returns those newly released (one
    released before is not repeated). Raises `ReleaseError` naming every id that is not a
    quarantined record of the collection (of `source`, when given)."""
    wanted = [i for i in dict.fromkeys(ids) if i not in releases.records]
    asked = [i for i in wanted if _is_record_id(i)]
    found = {r["id"]: r for r in store.get(collection, asked)} if asked else {}
    unknown = [i for i in wanted if i not in found]
    elsewhere = [i for i in wanted if i in found and source and found[i].get("source") != source]
    kept = [i for i in wanted if i in found and not found[i].get("quarantined")]
    problems = []
    if unknown:
        problems.append(f"no record {', '.join(unknown)} in collection {collection!r}")
    if elsewhere:
        problems.append(f"not of source {source!r}: {', '.join(elsewhere)}")
    if kept:
        problems.append(f"not quarantined: {', '.join(kept)}")
    if problems:
        raise ReleaseError(
            "; ".join(problems)
            + " (`clef-pipelines guard --quarantined` lists the quarantined records and ids)"
        )
    at = now()
    added = []
    for i in wanted:
        r = found[i]
        entry = ReleasedRecord(
            id=i,
            source=str(r["source"]),
            doc_id=str(r["doc_id"]),
            content_hash=str(r["content_hash"]),
            section=str(r.get("section_path") or ""),
            text=" ".join(str(r.get("text") or "").split())[:120],
            released_at=at,
        )
        releases.records[i] = entry
        added.append(entry)
    return added


def release_documents(
    store: VectorStore,
    collection: str,
    releases: Releases,
    doc_ids: Sequence[str],
    source: str | None = None,
) -> list[ReleasedDocument]:
    """Add whole documents to the releases (each in every source of the collection that has
    it, or in `source`); returns those newly released. Raises `ReleaseError` naming every
    document the collection does not hold."""
    where: dict[str, Any] = {"doc_id": {"in": list(dict.fromkeys(doc_ids))}}
    if source:
        where["source"] = source
    held = {
        (str(r["source"]), str(r["doc_id"]))
        for r in store.scan(collection, where=where, fields=["source", "doc_id"])
    }
    missing = [d for d in dict.fromkeys(doc_ids) if not any(h[1] == d for h in held)]
    if missing:
        where_ = f" (source {source!r})" if source else ""
        raise ReleaseError(f"no document {', '.join(missing)} in collection {collection!r}{where_}")
    at = now()
    added = []
    for s, d in sorted(held):
        if not releases.document_released(s, d):
            entry = ReleasedDocument(source=s, doc_id=d, released_at=at)
            releases.documents.append(entry)
            added.append(entry)
    return added


def unrelease(
    releases: Releases,
    ids: Sequence[str] = (),
    doc_ids: Sequence[str] = (),
    source: str | None = None,
) -> tuple[list[ReleasedRecord], list[ReleasedDocument]]:
    """Take records (by id) and documents (by id, in `source` when given) off the releases;
    returns what was removed. Raises `ReleaseError` naming what was never released."""
    never = [i for i in dict.fromkeys(ids) if i not in releases.records]
    docs = [
        d
        for d in releases.documents
        if d.doc_id in doc_ids and (source is None or d.source == source)
    ]
    never += [d for d in dict.fromkeys(doc_ids) if not any(x.doc_id == d for x in docs)]
    if never:
        raise ReleaseError(f"not released: {', '.join(never)} (`clef-pipelines release --list`)")
    records = [releases.records.pop(i) for i in dict.fromkeys(ids)]
    releases.documents = [d for d in releases.documents if d not in docs]
    return records, docs
