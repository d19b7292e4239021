"""LangChain adapters (extra `langchain`): a retriever and a document compressor.

    from clef_pipelines.integrations.langchain import ClefRetriever, ClefDocumentCompressor
    docs = ClefRetriever(retriever=Retriever.from_config("clef-pipelines.yaml"), k=4).invoke("...")
    kept = ClefDocumentCompressor(token_budget=1500).compress_documents(docs, "...")

Documents carry `source` (the source URI, the key LangChain's chains read), the passage's
prompt number, citation and Clef scores in `metadata`. `k` (also `invoke(query, k=...)`) caps
the documents returned, best first. When the gate abstains the retriever returns no documents
(nothing there answers the question), unless `include_on_abstain=True`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.guard.config import GuardConfig
from clef_pipelines.integrations._common import passage_metadata, run_sync
from clef_pipelines.retrieval.result import RetrievalResult


def _documents(
    result: RetrievalResult, include_on_abstain: bool, k: int | None = None
) -> list[Document]:
    if result.abstain and not include_on_abstain:
        return []
    return [
        Document(page_content=c.text, metadata=passage_metadata(n, c), id=c.id)
        for n, c in result.numbered[:k]
    ]


class ClefRetriever(BaseRetriever):
    """Clef-steered retrieval from a clef-pipelines collection."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any
    """A `clef_pipelines.retrieval.Retriever` (kept warm by the caller)."""
    collection: str | None = None
    k: int | None = Field(default=None, ge=1)
    """Documents returned at most, best first (within `retrieval.select.max_passages`)."""
    top_k: int | None = None
    """Candidates recalled for Clef to judge (default `retrieval.top_k`)."""
    where: dict[str, Any] | None = None
    include_on_abstain: bool = False

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        result = self.retriever.retrieve(
            query, where=self.where, top_k=self.top_k, collection=self.collection
        )
        return _documents(result, self.include_on_abstain, k or self.k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: Any, k: int | None = None
    ) -> list[Document]:
        result = await self.retriever.aretrieve(
            query, where=self.where, top_k=self.top_k, collection=self.collection
        )
        return _documents(result, self.include_on_abstain, k or self.k)


class ClefDocumentCompressor(BaseDocumentCompressor):
    """Keep the documents that answer the query, within a token budget; drop irrelevant
    ones and planted instructions. Text is never rewritten; order is best first."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    token_budget: int | None = None
    max_passages: int | None = None
    clef: ClefConfig | None = None
    """Clef settings (default `auto`); ignored when `client` is given."""
    data_dir: str | None = None
    guard: GuardConfig | None = None
    """The offline guard that drops planted instructions when Clef is off (default: on, the
    package's weights; `GuardConfig(mode="off")` turns it off)."""

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Any = None
    ) -> Sequence[Document]:
        from clef_pipelines.retrieval.compaction import acompact

        if not documents:
            return []
        passages = [
            {
                "id": str(i),
                "text": d.page_content,
                **{k: v for k, v in d.metadata.items() if k not in ("id", "text", "score")},
            }
            for i, d in enumerate(documents)
        ]
        result = await acompact(
            query,
            passages,
            token_budget=self.token_budget,
            max_passages=self.max_passages,
            clef=self.clef,
            data_dir=self.data_dir,
            guard=self.guard,
        )
        out = []
        for n, c in result.numbered:
            original = documents[int(c.id)]
            meta = {**original.metadata, **passage_metadata(n, c)}
            meta["id"] = original.metadata.get("id", original.id)
            if "source" in original.metadata:  # the caller's own source stays theirs
                meta["source"] = original.metadata["source"]
            out.append(Document(page_content=original.page_content, metadata=meta, id=original.id))
        return out

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Any = None
    ) -> Sequence[Document]:
        return run_sync(self.acompress_documents(documents, query, callbacks))
