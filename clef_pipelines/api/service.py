"""One warm service behind every surface (HTTP, OpenAI-compatible, MCP): a `Retriever` per
collection sharing one store connection and one loaded embedder, and a Clef client per event
loop for compaction. Nothing is loaded per request.

The guarantees are the Python API's: queries never return quarantined records (the stores
leave them out and no surface can ask for them), passages carry citations, and a Clef failure
degrades a result to vector order instead of failing it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from clef_pipelines.api.config import ApiConfig
from clef_pipelines.config import Settings
from clef_pipelines.retrieval.answer import AnswerResult
from clef_pipelines.retrieval.result import RetrievalResult
from clef_pipelines.retrieval.retriever import Retriever, query_embedder, screened_at_ingest
from clef_pipelines.stores import StoreError, VectorStore, open_store


class UnknownCollection(LookupError):
    """The request names a collection this service does not serve."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        super().__init__(
            f"collection {name!r} is not served here (collections: {', '.join(known) or 'none'})"
        )
        self.name = name


class RetrievalService:
    """Warm retrieval, answers and compaction for any number of callers."""

    def __init__(
        self,
        settings: Settings,
        *,
        api: ApiConfig | None = None,
        store: VectorStore | None = None,
        embedder: Any = None,
    ) -> None:
        self.settings = settings
        self.api = api or getattr(settings, "api", None) or ApiConfig()
        self._owns_store = store is None
        self._owns_embedder = embedder is None
        self.store = store if store is not None else open_store(settings.store, settings.data_path)
        self.embedder = (
            embedder if embedder is not None else query_embedder(settings, settings.retrieval)
        )
        self._retrievers: dict[str, Retriever] = {}
        self._lock = threading.Lock()
        # One Clef client per event loop: a client belongs to the loop it was made on.
        self._compact_clients: dict[int, Any] = {}

    # ---- collections -----------------------------------------------------------------

    def collections(self) -> list[str]:
        names = self.store.list_collections()
        if self.api.collections is not None:
            names = [n for n in names if n in self.api.collections]
        return sorted(names)

    def describe_collections(self) -> list[dict[str, Any]]:
        """Each served collection with its record count and how it was built."""
        out = []
        for name in self.collections():
            manifest = self.store.get_manifest(name) or {}
            out.append(
                {
                    "name": name,
                    "records": self.store.count(name, where={"quarantined": False}),
                    "embedder": manifest.get("embedder"),
                    "default": name == self.settings.collection,
                    "screened": screened_at_ingest(manifest),
                }
            )
        return out

    def retriever(self, collection: str | None = None) -> Retriever:
        """The warm `Retriever` of a collection, made on first use."""
        name = collection or self.settings.collection
        with self._lock:
            found = self._retrievers.get(name)
            if found is not None:
                return found
            known = self.collections()
            if name not in known:
                raise UnknownCollection(name, known)
            found = Retriever(
                self.settings, collection=name, store=self.store, embedder=self.embedder
            )
            self._retrievers[name] = found
            return found

    def _raise_if_dropped(self, name: str, exc: StoreError) -> None:
        """A store error on a collection dropped since its retriever was made is the caller's
        unknown collection (404), not a fault in the request's filter."""
        known = self.collections()
        if name in known:
            return
        with self._lock:
            self._retrievers.pop(name, None)  # a later request finds it gone, or rebuilt
        raise UnknownCollection(name, known) from exc

    def warm(self) -> None:
        """Load the embedder (and connect Clef) before the first request."""
        self.embedder.embed_queries(["warm up"])
        if self.settings.collection in self.collections():
            self.retriever().warm()

    # ---- operations ------------------------------------------------------------------

    def clef_deadline_s(self) -> float:
        """How long a request's Clef work may take, retries included: the retrieval setting,
        within 80% of the request's deadline so that a Clef outage degrades the answer (vector
        order) in time instead of ending in a 504; the rest is for recall and the reply."""
        retrieval = getattr(self.settings, "retrieval", None)
        configured = retrieval.clef_deadline_s if retrieval is not None else None
        within_request = 0.8 * self.api.request_timeout_s
        return min(configured or within_request, within_request)

    def guard_deadline_s(self) -> float:
        """By when (90% of the request's deadline) the offline guard must have judged the
        passages a failed Clef left: a guard still loading then withholds them, and the reply
        leaves before the 504."""
        return 0.9 * self.api.request_timeout_s

    async def retrieve(
        self,
        query: str,
        *,
        collection: str | None = None,
        top_k: int | None = None,
        where: dict[str, Any] | None = None,
    ) -> RetrievalResult:
        r = self.retriever(collection)
        try:
            return await r.aretrieve(
                query,
                where=where,
                top_k=top_k,
                clef_deadline_s=self.clef_deadline_s(),
                guard_deadline_s=self.guard_deadline_s(),
            )
        except StoreError as exc:
            self._raise_if_dropped(r.collection, exc)
            raise

    async def answer(
        self,
        query: str,
        *,
        collection: str | None = None,
        top_k: int | None = None,
        where: dict[str, Any] | None = None,
    ) -> AnswerResult:
        r = self.retriever(collection)
        try:
            return await r.aanswer(
                query,
                where=where,
                top_k=top_k,
                clef_deadline_s=self.clef_deadline_s(),
                guard_deadline_s=self.guard_deadline_s(),
            )
        except StoreError as exc:
            self._raise_if_dropped(r.collection, exc)
            raise

    async def compact(
        self,
        query: str,
        passages: Sequence[Any],
        *,
        token_budget: int | None = None,
        max_passages: int | None = None,
        gate: bool = False,
    ) -> RetrievalResult:
        from clef_pipelines.clef.client import clef_deadline
        from clef_pipelines.retrieval.compaction import acompact

        with clef_deadline(self.clef_deadline_s()):
            return await acompact(
                query,
                passages,
                token_budget=token_budget,
                max_passages=max_passages,
                gate=gate,
                config=getattr(self.settings, "retrieval", None),
                client=self._compact_client(),
                # With Clef off, the ingest screen's guard judges planted instructions.
                guard=self.settings.steering.guard,
                base_dir=self.settings.base_dir,
                # After a Clef failure (80% of the request's time), the guard judges what
                # Clef did not, within 90%: the reply still leaves before the 504.
                guard_deadline_s=self.guard_deadline_s(),
            )

    def _compact_client(self) -> Any:
        from clef_pipelines.clef.client import ClefClient

        loop_id = id(asyncio.get_running_loop())
        client = self._compact_clients.get(loop_id)
        if client is None:
            client = ClefClient(self.settings.clef, data_dir=self.settings.data_path)
            self._compact_clients[loop_id] = client
        return client

    async def aclose_loop_clients(self) -> None:
        """Close the compaction client of the running loop (a server's shutdown)."""
        client = self._compact_clients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        with self._lock:
            retrievers, self._retrievers = list(self._retrievers.values()), {}
        for r in retrievers:
            r.close()
        if self._owns_store:
            self.store.close()
        if self._owns_embedder:
            self.embedder.close()

    def __enter__(self) -> RetrievalService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
