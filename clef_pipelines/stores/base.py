"""The vector store interface every adapter implements, and the types it speaks.

Records are flat dicts: ``id`` (a UUID string, valid in every store), ``vector`` (a sequence
of floats or a 1-d numpy array) and scalar payload fields (str, int, float, bool or None).
Filters use the portable language in `clef_pipelines.stores.filters`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Metric = Literal["cosine", "l2", "dot"]
FieldType = Literal["str", "int", "float", "bool"]
Record = dict[str, Any]
Filter = dict[str, Any]

#: Every record carries this boolean; queries skip True unless asked to include them.
QUARANTINE_FIELD = "quarantined"


class StoreError(RuntimeError):
    """A store operation failed or was refused; the message says which collection and why."""


class NoTextSearch(StoreError):
    """A full-text query on a collection made without text fields (or a store without it)."""


@dataclass(frozen=True)
class CollectionSpec:
    """What a collection holds: vector size, metric, and the payload fields with their types.

    ``filter_fields`` are the payload fields that get an index (scalar, payload or B-tree).
    ``text_fields`` are the str fields full-text search reads (joined in this order); none
    means the collection has no full-text search. ``text_language`` picks stemming and stop
    words (see `clef_pipelines.stores.text.LANGUAGES`).
    """

    name: str
    dimension: int
    metric: Metric = "cosine"
    fields: dict[str, FieldType] = field(default_factory=dict)
    filter_fields: tuple[str, ...] = ()
    text_fields: tuple[str, ...] = ()
    text_language: str = "english"


@dataclass(frozen=True)
class Hit:
    """One query result: similarity in [0, 1] (higher is better) and the engine's raw score."""

    id: str
    score: float
    raw_score: float
    record: Record


def normalise_score(metric: Metric, raw_distance: float) -> float:
    """Map a distance to a similarity in [0, 1]: cosine 1 - d (clipped), L2 1 / (1 + d),
    dot product (1 + d) / 2 on unit vectors (clipped)."""
    if metric == "cosine":
        return min(1.0, max(0.0, 1.0 - raw_distance))
    if metric == "l2":
        return 1.0 / (1.0 + max(0.0, raw_distance))
    # dot: raw value is the inner product, higher is better
    return min(1.0, max(0.0, (1.0 + raw_distance) / 2.0))


class VectorStore(ABC):
    """A small base class; one file per backend; all held to tests/stores/test_conformance.py."""

    kind: str = "base"
    #: Reads may run from two threads at once and then overlap (the engine works outside the
    #: GIL): hybrid search then asks for the vector and the full-text list concurrently.
    concurrent_reads: bool = False

    @abstractmethod
    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection if missing; refuse (StoreError) if it exists with another
        dimension or metric."""

    @abstractmethod
    def has_collection(self, name: str) -> bool: ...

    @abstractmethod
    def list_collections(self) -> list[str]: ...

    @abstractmethod
    def upsert(self, collection: str, records: Sequence[Record]) -> int:
        """Insert or replace by id; returns the number of records written."""

    def insert(self, collection: str, records: Sequence[Record]) -> int:
        """Write records whose ids the collection does not hold; returns the number written.

        The caller knows the ids are new (the sync: chunks of documents the store held no
        record of, checked under the collection's lock), so a store that can append without
        looking every id up does (LanceDB: an upsert joins against the whole table, a cost
        that grows with it). An id that is stored already is the caller's error: the store
        may then hold it twice. By default an upsert."""
        return self.upsert(collection, records)

    @abstractmethod
    def delete(
        self, collection: str, *, ids: Sequence[str] | None = None, where: Filter | None = None
    ) -> int:
        """Delete by ids, or by filter (or both: ids AND filter); returns the number deleted."""

    @abstractmethod
    def get(
        self, collection: str, ids: Sequence[str], *, with_vectors: bool = False
    ) -> list[Record]:
        """The records with these ids that exist (missing ids are skipped), any order."""

    @abstractmethod
    def scan(
        self,
        collection: str,
        *,
        where: Filter | None = None,
        fields: Sequence[str] | None = None,
    ) -> Iterator[Record]:
        """Every record matching the filter (quarantined included), with ``id`` and the given
        payload fields (all payload fields when None), without vectors."""

    def list_ids(self, collection: str, *, where: Filter | None = None) -> list[str]:
        return [r["id"] for r in self.scan(collection, where=where, fields=[])]

    def count(self, collection: str, *, where: Filter | None = None) -> int:
        return sum(1 for _ in self.scan(collection, where=where, fields=[]))

    @abstractmethod
    def query(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        """The top_k nearest records matching the filter, best first."""

    def text_query(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        """The top_k records whose text fields best match ``text`` (any of its terms, stemmed,
        ranked by the engine's relevance), filtered exactly like `query`, best first.
        ``Hit.score`` is the raw relevance mapped into [0, 1) (`stores.text.text_score`)."""
        raise NoTextSearch(f"the {self.kind} store has no full-text search")

    def query_refs(
        self,
        collection: str,
        vector: Sequence[float],
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        """`query`, where a hit's record may hold only what `fill_records` needs: for hybrid
        search, which fuses two lists and keeps only top_k of them (a store that reads
        columns per row saves reading them for hits fusion drops)."""
        return self.query(
            collection, vector, where=where, top_k=top_k, include_quarantined=include_quarantined
        )

    def text_query_refs(
        self,
        collection: str,
        text: str,
        *,
        where: Filter | None = None,
        top_k: int = 10,
        include_quarantined: bool = False,
    ) -> list[Hit]:
        """`text_query`, with records as in `query_refs`."""
        return self.text_query(
            collection, text, where=where, top_k=top_k, include_quarantined=include_quarantined
        )

    def fill_records(self, collection: str, hits: Sequence[Hit]) -> list[Hit]:
        """The hits of `query_refs` / `text_query_refs` with their full records, in order.
        Default: the hits as they are (their records were read with the lists). A store
        that reads them here drops a hit whose record was removed meanwhile."""
        return list(hits)

    def ensure_text_index(self, collection: str) -> dict[str, Any]:
        """Make the full-text index current: create it if missing, fold in rows written since
        (where the engine indexes in batches); nothing when it is already current. Writes keep
        text search correct without it (unindexed rows are searched directly); an index step
        may call it to keep queries fast. Returns what was done."""
        return {"text_index": "maintained on write"}

    def complete_indexes(self, collection: str) -> dict[str, Any]:
        """Find index upkeep an interrupted run left undone and finish it: compare what the
        scalar and full-text indexes cover with the table, and fold in the rows they miss (or
        build an index that is missing). Nothing when coverage is complete. Called by a run
        that has nothing else to write (every document unchanged), since a run killed, or out
        of disk, during its upkeep leaves rows no index covers and the rerun writes nothing
        that would trigger one. Returns what was found and done; {} where the engine indexes
        every write as it happens (Qdrant, PostgreSQL)."""
        return {}

    @abstractmethod
    def get_manifest(self, collection: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def put_manifest(self, collection: str, manifest: dict[str, Any]) -> None: ...

    @abstractmethod
    def drop(self, collection: str) -> None:
        """Remove the collection and its manifest; a missing collection is not an error."""

    def maintain(self, collection: str) -> dict[str, Any]:
        """Cheap housekeeping after a sync (compaction, statistics); returns what was done.
        ANN indexes are not built here: see `build_indexes`."""
        return {}

    def build_indexes(self, collection: str) -> dict[str, Any]:
        """Build or refresh the collection's ANN index, incrementally where the engine can.

        Called by its own ingestion step after the data is synced, never inside a write, so a
        large load is not held up by it; until it runs, queries search exactly (correct, only
        slower). Returns what was done and the `index_status` afterwards."""
        return {"vector_index": "none (exact search)", **self.index_status(collection)}

    def index_status(self, collection: str) -> dict[str, Any]:
        """``rows``, ``ann_index`` (None when queries search exactly), ``indexed_rows`` and
        ``unindexed_rows`` (rows a query reaches only by exact search)."""
        rows = self.count(collection)
        return {"rows": rows, "ann_index": None, "indexed_rows": 0, "unindexed_rows": rows}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
