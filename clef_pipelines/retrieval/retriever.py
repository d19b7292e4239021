"""`Retriever`: the one Python API for queries, used by the CLI, the eval assets and services.

    with Retriever.from_config("clef-pipelines.yaml") as r:
        result = r.retrieve("How do I limit upload bandwidth?")
        print(result.to_prompt())
        reply = r.answer("How do I limit upload bandwidth?")   # cited, or "not in the documents"

A warm object: the store stays open, the embedder stays loaded and one Clef client (with its
rate limiter, retries and answer cache) is shared by every query. Its work runs on one private
event loop thread, so the sync methods (`retrieve`, `answer`) and the async twins
(`aretrieve`, `aanswer`, callable from any event loop) share that client safely and queries
may run concurrently.

The path: recall -> route -> classify -> select -> compact -> gate (-> answer). Recall is the
plain `retrieval.recall.recall` function, so whatever recall modes it offers plug in here.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from clef_pipelines.config import Settings, load_settings
from clef_pipelines.retrieval.config import RetrievalConfig
from clef_pipelines.retrieval.result import RetrievalResult, StageTrace
from clef_pipelines.steering.candidates import Candidate, recall_score_kind

if TYPE_CHECKING:
    from clef_pipelines.clef.client import ClefClient
    from clef_pipelines.embedding.base import Embedder
    from clef_pipelines.retrieval.answer import AnswerResult, ChatProvider
    from clef_pipelines.retrieval.recall import Passage
    from clef_pipelines.steering.route import RouteField
    from clef_pipelines.stores.base import VectorStore

T = TypeVar("T")

#: What a query imports on first use (recall, the steering stages); `Retriever.warm` imports
#: them up front.
_QUERY_PATH_MODULES = (
    "clef_pipelines.chunking.tokens",
    "clef_pipelines.clef.errors",
    "clef_pipelines.retrieval.recall",
    "clef_pipelines.retrieval.steer",
    "clef_pipelines.steering.route",
)


class _LoopThread:
    """A private event loop on a daemon thread: the home of the shared Clef client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="clef-retriever-loop", daemon=True
        )
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError("call the async twin (aretrieve / aanswer) from inside the loop")
        return self.submit(coro).result()

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


def screened_at_ingest(manifest: dict[str, Any] | None) -> bool:
    """Whether the collection's text was screened for planted instructions at ingest (then
    classify need not ask `instructs_ai` again): every source screened, as `store_sync`
    records it (`steering.manifest.screened_at_ingest`), or a collection-wide
    `steering.screened` flag. A missing manifest or an unscreened source means no."""
    from clef_pipelines.steering.manifest import screened_at_ingest as every_source_screened

    steering = (manifest or {}).get("steering")
    if isinstance(steering, dict) and steering.get("screened"):
        return True
    return every_source_screened(manifest)


def routable_fields(settings: Settings) -> list[RouteField]:
    """Taxonomy fields marked for routing, from the enrichment taxonomy when one is set."""
    from clef_pipelines.steering.route import RouteField

    steering = getattr(settings, "steering", None)
    enrich = getattr(steering, "enrich", None)
    if enrich is None or not hasattr(enrich, "resolved_taxonomy"):
        return []
    taxonomy = enrich.resolved_taxonomy(settings.base_dir)
    return [
        RouteField(name=f.name, options=dict(f.options), description=f.description or "")
        for f in taxonomy.fields
        if getattr(f, "route", False)
    ]


class Retriever:
    """Clef-steered retrieval over one configured store; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        *,
        collection: str | None = None,
        store: VectorStore | None = None,
        embedder: Embedder | None = None,
        clef: ClefClient | None = None,
        provider: ChatProvider | None = None,
        config: RetrievalConfig | None = None,
        route_fields: Sequence[RouteField] | None = None,
    ) -> None:
        """`store`, `embedder`, `clef`, `provider`: shared objects (not closed here); else
        made from `settings` and owned. `route_fields`: the fields routing may filter on
        (default: the enrichment taxonomy's fields marked `route`)."""
        from clef_pipelines.clef.client import ClefClient
        from clef_pipelines.stores import open_store

        self.settings = settings
        self.config = config or _retrieval_config(settings)
        self.collection = collection or settings.collection
        self._owns_store = store is None
        self._owns_embedder = embedder is None
        self._owns_clef = clef is None
        if store is None and settings.store.kind == "lancedb":
            from clef_pipelines.retrieval.fast_start import LANCE_REST_CLIENT, defer_package

            defer_package(LANCE_REST_CLIENT)
        self.store = store if store is not None else open_store(settings.store, settings.data_path)
        self.embedder = embedder if embedder is not None else query_embedder(settings, self.config)
        self.clef = (
            clef if clef is not None else ClefClient(settings.clef, data_dir=settings.data_path)
        )
        self._provider = provider
        self._routable: list[RouteField] | None = (
            list(route_fields) if route_fields is not None else None
        )
        self._loop = _LoopThread()
        self._closed = False
        # classify.waves auto: how often recent queries' first waves settled the result
        # (made with the first query: the steering modules load on first use).
        self._wave_history: Any = None

    @classmethod
    def from_config(
        cls, config: Settings | str | os.PathLike[str] | None = None, **kw: Any
    ) -> Retriever:
        """From a Settings object, a config file path, or (None) the usual config lookup."""
        settings = config if isinstance(config, Settings) else load_settings(config)
        return cls(settings, **kw)

    # ---- public ----------------------------------------------------------------------

    def _warm_guard(self) -> None:
        """Load the offline guard now where it would judge what a failed Clef leaves (guard
        on, a collection nothing screened at ingest): a Clef outage then finds it ready within
        a request's deadline, instead of withholding those passages while MiniLM loads."""
        from clef_pipelines.retrieval.passage_guard import warm_guard
        from clef_pipelines.stores.base import StoreError

        guard_cfg = self.settings.steering.guard
        if guard_cfg.mode == "off":
            return
        try:
            manifest = self.store.get_manifest(self.collection)
        except StoreError:
            return  # no collection yet: nothing to judge
        if not screened_at_ingest(manifest):
            warm_guard(guard_cfg, self.settings.base_dir)

    def warm(self) -> Retriever:
        """Load the embedder (and let it lay itself out for many queries), start the Clef
        backend and import the query path's modules now, not on the first query; then
        collect the start's garbage once.

        Why the collection: a warm process holds about 125k objects from its imports and
        loads, and Python's cyclic collector goes through all of them in its next full
        collection, which the start's allocations bring within the first few dozen queries.
        Measured in the retrieval bench: one such collection took about 85 ms of CPU (load 6)
        in the middle of the timed queries. After `warm`, they are in the collector's oldest
        generation, and a full collection waits until a quarter as many new objects
        survive."""
        import gc
        import importlib

        for module in _QUERY_PATH_MODULES:
            importlib.import_module(module)
        # An embedder may lay itself out for many queries (the numpy MiniLM's row-major
        # weights), which a cold one-query process would not pay for.
        prepare = getattr(self.embedder, "warm", None)
        if callable(prepare):
            prepare()
        self.embedder.embed_queries(["warm up"])
        if self.clef.enabled:
            self._loop.run(self.clef.start())
            self._warm_guard()
        gc.collect()
        return self

    def retrieve(
        self,
        query: str,
        *,
        where: dict[str, Any] | None = None,
        top_k: int | None = None,
        collection: str | None = None,
    ) -> RetrievalResult:
        """Retrieve for one query: see `aretrieve` for the arguments.

        When the query will not be routed, recall runs here, on the caller's thread, and only
        the steering goes to the private loop. Why: the caller waits anyway, and recall sent
        to a worker thread from the loop costs two more thread wake-ups a query (a few tenths
        of a ms, more on a busy machine) on its critical path."""
        recalled = None
        if query.strip() and not self._may_route(where):
            coll = collection or self.collection
            k = top_k or self.config.top_k
            t = time.perf_counter()
            passages, manifest = self._recall_and_manifest(query, coll, k, where)
            recalled = (passages, manifest, t, (time.perf_counter() - t) * 1e3)
        return self._loop.run(
            self._retrieve(
                query, where=where, top_k=top_k, collection=collection, recalled=recalled
            )
        )

    async def aretrieve(
        self,
        query: str,
        *,
        where: dict[str, Any] | None = None,
        top_k: int | None = None,
        collection: str | None = None,
        clef_deadline_s: float | None = None,
        guard_deadline_s: float | None = None,
    ) -> RetrievalResult:
        """Recall `top_k` candidates (the caller's `where` filter, else a route filter when
        Clef is confident), then classify, select, compact and gate them. `clef_deadline_s`:
        how long Clef may take, retries included (default `retrieval.clef_deadline_s`); past
        it the result is degraded. `guard_deadline_s`: seconds from the call's start by which
        the offline guard must have judged what a failed Clef left (a server's request
        deadline); passages it has not judged by then are withheld (default: no limit)."""
        return await asyncio.wrap_future(
            self._loop.submit(
                self._retrieve(
                    query,
                    where=where,
                    top_k=top_k,
                    collection=collection,
                    clef_deadline_s=clef_deadline_s,
                    guard_deadline_s=guard_deadline_s,
                )
            )
        )

    def answer(self, query: str, **kw: Any) -> AnswerResult:
        """Retrieve, then write a cited answer; see `aanswer`."""
        return self._loop.run(self._answer(query, **kw))

    async def aanswer(self, query: str, **kw: Any) -> AnswerResult:
        """Retrieve, then ask the configured LLM for an answer citing passages by number.
        When the gate abstains the answer is "not in the documents" and no LLM is called."""
        return await asyncio.wrap_future(self._loop.submit(self._answer(query, **kw)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._owns_clef:
                self._loop.run(self.clef.aclose())
            if self._provider is not None:
                self._loop.run(self._provider.aclose())
        finally:
            self._loop.stop()
            if self._owns_store:
                self.store.close()
            if self._owns_embedder:
                self.embedder.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Retriever:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # ---- inside (on the private loop) --------------------------------------------------

    def _recall(
        self, query: str, collection: str, top_k: int, where: dict[str, Any] | None
    ) -> list[Passage]:
        from clef_pipelines.retrieval.recall import recall

        return recall(
            query,
            store=self.store,
            embedder=self.embedder,
            collection=collection,
            top_k=top_k,
            where=where,
            mode=self.config.mode,
            fusion=self.config.fusion,
        )

    def _recall_and_manifest(
        self, query: str, collection: str, top_k: int, where: dict[str, Any] | None
    ) -> tuple[list[Passage], dict[str, Any] | None]:
        """Recall, then the collection's manifest, in one worker-thread call (each trip
        between the event loop and a worker thread costs a wake-up of both)."""
        passages = self._recall(query, collection, top_k, where)
        return passages, self.store.get_manifest(collection)

    async def _retrieve(
        self,
        query: str,
        *,
        clef_deadline_s: float | None = None,
        **kw: Any,
    ) -> RetrievalResult:
        """`_steered_retrieval` with every Clef request of it (routing, classify, gate) done
        within `clef_deadline_s` (default `retrieval.clef_deadline_s`)."""
        from clef_pipelines.clef.client import clef_deadline

        with clef_deadline(clef_deadline_s or self.config.clef_deadline_s):
            return await self._steered_retrieval(query, **kw)

    async def _steered_retrieval(
        self,
        query: str,
        *,
        where: dict[str, Any] | None = None,
        top_k: int | None = None,
        collection: str | None = None,
        recalled: tuple[list[Passage], dict[str, Any] | None, float, float] | None = None,
        guard_deadline_s: float | None = None,
    ) -> RetrievalResult:
        """`recalled`: the passages, the manifest, when recall started (perf_counter) and its
        ms, when the caller recalled already (`retrieve`, for a query that is not routed)."""
        from clef_pipelines.retrieval.steer import clef_price, clef_unavailable, steer
        from clef_pipelines.steering.classify import WaveHistory

        if self._wave_history is None:
            self._wave_history = WaveHistory(self.config.classify.waves_window)

        started = recalled[2] if recalled is not None else time.perf_counter()
        if not query.strip():
            raise ValueError("the query is empty")
        cfg = self.config
        coll = collection or self.collection
        top_k = top_k or cfg.top_k
        result = RetrievalResult(query=query, collection=coll)
        unavailable = clef_unavailable(self.clef)

        route_filter = await self._route(result, where, unavailable, clef_price(self.clef))
        assert recalled is None or route_filter is None

        t = time.perf_counter()
        used = where if where is not None else route_filter
        rtrace = StageTrace("recall", details={"top_k": top_k, "recall_mode": cfg.mode})
        result.stages.insert(0, rtrace)
        manifest: dict[str, Any] | None = None
        if route_filter is not None and where is None:
            try:
                passages, manifest = await asyncio.to_thread(
                    self._recall_and_manifest, query, coll, top_k, route_filter
                )
            except ValueError as exc:  # a tag field this collection does not hold
                rtrace.details["route_filter_error"] = str(exc)
                passages = []
                manifest = await asyncio.to_thread(self.store.get_manifest, coll)
            if len(passages) < cfg.route.min_candidates:
                rtrace.details["retried_unfiltered"] = True
                used = None
                passages, manifest = await asyncio.to_thread(
                    self._recall_and_manifest, query, coll, top_k, None
                )
        elif recalled is not None:
            passages, manifest, _, _ = recalled
        else:
            passages, manifest = await asyncio.to_thread(
                self._recall_and_manifest, query, coll, top_k, where
            )
        result.filter_used = used
        rtrace.ms = recalled[3] if recalled is not None else (time.perf_counter() - t) * 1e3
        rtrace.details["candidates"] = len(passages)
        kind = recall_score_kind(cfg.mode, cfg.fusion.method)
        candidates = [candidate_from_passage(p, kind) for p in passages]

        from clef_pipelines.retrieval.compaction import clef_judges_instructions
        from clef_pipelines.retrieval.passage_guard import screen_what_clef_left, screen_with_guard

        screened = screened_at_ingest(manifest)
        mode = cfg.classify.instructs_ai
        ask_instructs_ai = mode == "always" or (mode == "auto" and not screened)

        expand = None
        if cfg.select.expand_neighbours:
            expand = self._expander(coll, screened, result)
        by_clef = clef_judges_instructions(cfg, self.clef, ask_instructs_ai=ask_instructs_ai)
        guard_cfg = self.settings.steering.guard
        guarded = not screened and guard_cfg.mode != "off"
        if guarded and not by_clef:
            # Nothing screened this collection's text at ingest and Clef will not judge it:
            # the offline guard judges the recalled passages, as compaction does with passages
            # of unknown provenance, so that no planted instruction is shown with Clef off.
            await screen_with_guard(result, candidates, guard_cfg, self.settings.base_dir)
        await steer(
            result,
            candidates,
            cfg,
            self.clef,
            ask_instructs_ai=ask_instructs_ai,
            expand=expand,
            wave_history=self._wave_history,
        )
        if guarded and by_clef and result.degraded:
            await screen_what_clef_left(
                result,
                guard_cfg,
                self.settings.base_dir,
                deadline_s=guard_deadline_s,
                started=started,
            )
        result.total_ms = (time.perf_counter() - started) * 1e3
        return result

    def _may_route(self, where: dict[str, Any] | None) -> bool:
        """Whether `_route` could ask Clef for a filter (else recall needs no route first)."""
        from clef_pipelines.retrieval.steer import clef_unavailable

        if self._routable is None:
            self._routable = routable_fields(self.settings)
        return (
            self.config.route.mode != "off"
            and where is None
            and bool(self._routable)
            and not clef_unavailable(self.clef)
        )

    async def _route(
        self,
        result: RetrievalResult,
        where: dict[str, Any] | None,
        unavailable: str | None,
        price: float,
    ) -> dict[str, Any] | None:
        from clef_pipelines.clef.errors import ClefError
        from clef_pipelines.steering.route import route

        rcfg = self.config.route
        trace = StageTrace("route", mode=rcfg.mode)
        result.stages.append(trace)
        if self._routable is None:
            self._routable = routable_fields(self.settings)
        if rcfg.mode == "off":
            trace.skipped = "mode off"
        elif where is not None:
            trace.skipped = "the caller passed a filter"
        elif not self._routable:
            trace.skipped = "no taxonomy field is marked for routing"
        elif unavailable:
            trace.skipped = unavailable
        else:
            t = time.perf_counter()
            try:
                decision = await route(self.clef, result.query, self._routable, rcfg)
            except ClefError as exc:
                # An unrouted query is still a good query: not degraded, just wider.
                trace.error = f"{type(exc).__name__}: {exc}"
                return None
            finally:
                trace.ms = (time.perf_counter() - t) * 1e3
            trace.requests = 1
            trace.input_tokens = decision.input_tokens
            trace.cost_usd = decision.input_tokens * price
            trace.details.update(fields=decision.fields, filter=decision.filter)
            if rcfg.mode == "on":
                return decision.filter
        return None

    def _expander(self, collection: str, screened: bool, result: RetrievalResult) -> Any:
        """Neighbour expansion: the chunks before and after a kept chunk that is not
        self-contained. Only on collections screened at ingest: a neighbour is never asked
        about by classify, so it must not be able to carry a planted instruction in."""
        cfg = self.config.select

        async def expand(kept: list[Candidate]) -> list[Candidate]:
            if not screened:
                result.stages.append(
                    StageTrace("expand", skipped="the collection was not screened at ingest")
                )
                return kept
            return await asyncio.to_thread(expand_neighbours, self.store, collection, kept, cfg)

        return expand

    async def _answer(self, query: str, **kw: Any) -> AnswerResult:
        from clef_pipelines.retrieval.answer import answer_from_result, make_provider

        result = await self._retrieve(query, **kw)
        if self._provider is None and not result.abstain:
            self._provider = make_provider(self.config.answer)
        return await answer_from_result(result, self._provider)


def candidate_from_passage(p: Passage, score_kind: str = "vector_similarity") -> Candidate:
    from clef_pipelines.chunking.tokens import count_tokens

    return Candidate(
        id=p.id,
        text=p.text,
        vector_score=p.score,
        rank=p.rank,
        score_kind=score_kind,
        record={k: v for k, v in p.record.items() if k not in ("vector", "embed_text")},
        tokens=int(p.record.get("tokens") or 0) or count_tokens(p.text),
    )


def expand_neighbours(
    store: VectorStore, collection: str, kept: list[Candidate], cfg: Any
) -> list[Candidate]:
    """Kept chunks in order, each with its missing neighbours around it in reading order,
    within `expand_max_tokens` in all. Quarantined neighbours are never added."""
    from clef_pipelines.chunking.tokens import count_tokens

    out: list[Candidate] = []
    seen = {c.id for c in kept}
    left = cfg.expand_max_tokens

    def take(c: Candidate, records: list[dict[str, Any]]) -> list[Candidate]:
        nonlocal left
        added = []
        for r in records:
            tokens = int(r.get("tokens") or 0) or count_tokens(r.get("text") or "")
            if r["id"] in seen or tokens > left:
                continue
            left -= tokens
            seen.add(r["id"])
            added.append(
                Candidate(
                    id=r["id"],
                    text=r.get("text") or "",
                    vector_score=c.vector_score,
                    rank=c.rank,
                    score_kind=c.score_kind,
                    record={k: v for k, v in r.items() if k not in ("vector", "embed_text")},
                    tokens=tokens,
                    expanded_from=c.id,
                )
            )
        return added

    for c in kept:
        sc = c.record.get("q_self_contained")
        index = c.record.get("chunk_index")
        if sc is None or index is None or float(sc) >= cfg.expand_below_self_contained:
            out.append(c)
            continue
        i = int(index)
        where = {"doc_id": c.doc_id, "chunk_index": {"in": [i - 1, i + 1]}}
        around = [r for r in store.scan(collection, where=where) if not r.get("quarantined")]
        out += take(c, [r for r in around if int(r.get("chunk_index") or 0) < i])
        out.append(c)
        out += take(c, [r for r in around if int(r.get("chunk_index") or 0) > i])
    return out


def _retrieval_config(settings: Settings) -> RetrievalConfig:
    return getattr(settings, "retrieval", None) or RetrievalConfig()


def query_embedder(settings: Settings, config: RetrievalConfig) -> Embedder:
    """The collection's embedder for queries; MiniLM runs on numpy unless told otherwise."""
    if settings.embedder.kind == "minilm" and config.query_embedder == "numpy":
        from clef_pipelines.embedding.minilm_numpy import NumpyMiniLMEmbedder

        return NumpyMiniLMEmbedder()
    if settings.embedder.kind == "minilm":
        from clef_pipelines.embedding.minilm import MiniLMEmbedder

        # "torch" means torch: not the numpy MiniLM the embedder gives small work.
        return MiniLMEmbedder(batch_size=settings.embedder.batch_size, small_work_tokens=0)
    from clef_pipelines.embedding import make_embedder

    return make_embedder(settings.embedder)
