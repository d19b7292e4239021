"""Recall: the query's candidates from the store, by vector, full text, or both fused
(`retrieval.mode`; see `clef_pipelines.retrieval.fusion`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clef_pipelines.embedding import Embedder
from clef_pipelines.retrieval.config import FusionConfig, RecallMode, RetrievalConfig
from clef_pipelines.retrieval.fusion import search
from clef_pipelines.stores import Hit, StoreError, VectorStore
from clef_pipelines.stores.manifest import check_manifest


@dataclass
class Passage:
    """A recalled chunk with what a reader needs to cite it."""

    rank: int
    id: str
    score: float
    text: str
    title: str
    section_path: str
    source_uri: str
    char_start: int
    char_end: int
    doc_id: str
    record: dict[str, Any]

    @property
    def citation(self) -> str:
        where = f"{self.source_uri}:{self.char_start}-{self.char_end}"
        path = self.section_path
        # A Markdown H1 is usually the title itself: do not say it twice.
        if self.title and not (path == self.title or path.startswith(self.title + " > ")):
            path = f"{self.title} > {path}" if path else self.title
        return f"{path} ({where})"

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.record.items() if k not in ("vector", "embed_text")}
        out.update(rank=self.rank, id=self.id, score=round(self.score, 6), citation=self.citation)
        return out


def _passage(rank: int, hit: Hit) -> Passage:
    r = hit.record
    return Passage(
        rank=rank,
        id=hit.id,
        score=hit.score,
        text=r.get("text") or "",
        title=r.get("title") or "",
        section_path=r.get("section_path") or "",
        source_uri=r.get("source_uri") or "",
        char_start=int(r.get("char_start") if r.get("char_start") is not None else -1),
        char_end=int(r.get("char_end") if r.get("char_end") is not None else -1),
        doc_id=r.get("doc_id") or "",
        record=r,
    )


def recall(
    query: str,
    *,
    store: VectorStore,
    embedder: Embedder,
    collection: str,
    top_k: int = 5,
    where: dict[str, Any] | None = None,
    mode: RecallMode = RetrievalConfig.model_fields["mode"].default,
    fusion: FusionConfig | None = None,
) -> list[Passage]:
    """The top_k passages for ``query``. ``mode``: ``vector`` (nearest embeddings), ``text``
    (full-text match; the embedder is not called) or ``hybrid`` (both, fused by ``fusion``);
    by default the configuration's default, ``retrieval.mode``. A hybrid passage's ``score``
    is its fused score."""
    if not query.strip():
        raise ValueError("the query is empty")
    if not store.has_collection(collection):
        known = ", ".join(store.list_collections()) or "none"
        raise StoreError(f"collection {collection!r} does not exist (collections: {known})")
    check_manifest(store.get_manifest(collection), collection, embedder)

    def embed() -> list[float]:
        return embedder.embed_queries([query])[0].tolist()  # type: ignore[no-any-return]

    # `search` embeds when it needs the vector: in hybrid mode after starting the full-text
    # leg (where the store's reads overlap), so embedding and text search run together.
    hits = search(
        store,
        collection,
        mode=mode,
        text=query,
        embed=embed if mode != "text" else None,
        where=where,
        top_k=top_k,
        fusion=fusion,
    )
    return [_passage(i + 1, h) for i, h in enumerate(hits)]
