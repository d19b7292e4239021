"""What a run's screen quarantined, for a person: counts per kind of document, the highest
scoring examples, the documents with the most, and how to review and release them.

Built batch by batch from the screened blocks (`QuarantineSummary.add`); the `ingest` command,
its `--json` report, the `screened_paragraphs` asset's metadata and the quarantine-rate check
all show it.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from clef_pipelines.parsing.loaders import SUFFIX_FORMATS
from clef_pipelines.steering.release import alone_record_ids

#: How many examples and documents a summary keeps.
EXAMPLES = 3
TOP_DOCUMENTS = 5
#: An example's text is shown up to this many characters.
SHOWN_CHARS = 160

#: Document formats by the names a person knows them by.
_KIND_NAMES = {
    "md": "markdown",
    "txt": "text",
    "rst": "rst",
    "html": "html",
    "pdf": "pdf",
    "docx": "docx",
}
_JSONL_SUFFIXES = (".jsonl", ".ndjson")


def document_kind(doc_id: str, source_uri: str | None) -> str:
    """A document's kind: its file format (markdown, rst, html, text, pdf, docx), or jsonl for
    a record of a JSONL source."""
    uri = source_uri or ""
    if "#" in uri and uri.split("#", 1)[0].lower().endswith(_JSONL_SUFFIXES):
        return "jsonl"
    name = doc_id.lower()
    for suffix, fmt in SUFFIX_FORMATS.items():
        if name.endswith(suffix):
            return _KIND_NAMES.get(fmt, fmt)
    return "other"


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """One line of at most `limit` characters (whitespace runs become one space)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _score(row: dict[str, Any]) -> float:
    values = [v for v in (row.get("p_guard"), row.get("p_instructs_ai")) if v is not None]
    return float(max(values)) if values else 0.0


@dataclass
class QuarantineSummary:
    """A run's quarantine, added up over its batches."""

    judged: Counter[str] = field(default_factory=Counter)
    quarantined: Counter[str] = field(default_factory=Counter)
    quarantined_blocks: Counter[str] = field(default_factory=Counter)
    documents: Counter[tuple[str, str]] = field(default_factory=Counter)
    released: int = 0
    #: (score, order, example) of the highest-scoring quarantined blocks.
    _top: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    _seen: int = 0

    @property
    def total(self) -> int:
        return sum(self.quarantined.values())

    def add(self, screened: pl.DataFrame, released: int = 0) -> None:
        """Count one batch of screened blocks (the screen's columns added)."""
        self.released += released
        if screened.height == 0 or "screen_action" not in screened.columns:
            return
        judged = screened.filter(pl.col("screened")) if "screened" in screened.columns else screened
        for doc_id, uri, n in judged.group_by("doc_id", "source_uri").len().iter_rows():
            self.judged[document_kind(doc_id, uri)] += n
        rows = judged.filter(pl.col("screen_action") == "quarantine").to_dicts()
        for row, (rid, _) in zip(rows, alone_record_ids(rows), strict=True):
            self.quarantined[document_kind(row["doc_id"], row.get("source_uri"))] += 1
            self.quarantined_blocks[str(row["kind"])] += 1
            self.documents[(row["source"], row["doc_id"])] += 1
            self._keep(row, rid)

    def _keep(self, row: dict[str, Any], rid: str) -> None:
        self._seen += 1
        score = _score(row)
        example = {
            "record_id": rid,
            "source": row["source"],
            "doc_id": row["doc_id"],
            "section": " > ".join(h for h in row.get("heading_path") or [] if h),
            "text": shorten(row["text"]),
            "score": round(score, 4),
            "decided_by": row.get("decided_by") or "",
            "p_guard": row.get("p_guard"),
            "p_instructs_ai": row.get("p_instructs_ai"),
        }
        # A min-heap of the best EXAMPLES; the earlier block wins a tie.
        item = (score, -self._seen, example)
        if len(self._top) < EXAMPLES:
            heapq.heappush(self._top, item)
        elif item[:2] > self._top[0][:2]:
            heapq.heapreplace(self._top, item)

    def examples(self) -> list[dict[str, Any]]:
        """The highest-scoring quarantined blocks, highest first."""
        return [e for _, _, e in sorted(self._top, key=lambda t: t[:2], reverse=True)]

    def top_documents(self, n: int = TOP_DOCUMENTS) -> list[dict[str, Any]]:
        """The documents with the most quarantined blocks, most first."""
        ranked = sorted(self.documents.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [{"source": s, "doc_id": d, "quarantined": c} for (s, d), c in ranked]

    def by_kind(self) -> dict[str, dict[str, int]]:
        """Per document kind: blocks judged and quarantined."""
        kinds = sorted(set(self.judged) | set(self.quarantined))
        return {k: {"quarantined": self.quarantined[k], "judged": self.judged[k]} for k in kinds}

    def as_dict(self) -> dict[str, Any]:
        return {
            "quarantined": self.total,
            "judged": sum(self.judged.values()),
            "released": self.released,
            "by_kind": self.by_kind(),
            "by_block_kind": dict(sorted(self.quarantined_blocks.items())),
            "examples": self.examples(),
            "top_documents": self.top_documents(),
        }


def review_commands(collection: str, source: str | None = None) -> list[str]:
    """The commands that review a quarantine and release a block of it."""
    only = f" --source {source}" if source else ""
    return [
        f"clef-pipelines guard --quarantined --collection {collection}{only}",
        f"clef-pipelines release --collection {collection} --record ID",
    ]
