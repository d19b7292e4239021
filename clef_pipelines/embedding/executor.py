"""Where embedding batches run: in this process (`local`), or mapped over Ray actors (`ray`).

With ``embedder.executor: ray`` each actor builds the same embedder from the same config (so
the vectors are the ones the in-process embedder returns) and batches go to the least-loaded
actor, a bounded number in flight per actor, results taken back in batch order. Actors ask
for a GPU each when the cluster has GPUs (or ``ray.num_gpus_per_actor`` says so), and are
spread over the cluster's nodes (``ray.scheduling``). They belong to this driver (not
detached): when the work ends, fails or is interrupted (a cancelled Dagster run interrupts its
step) the pending tasks are cancelled and the actors killed, so a cancelled run leaves nothing
running on the cluster. Only actors this pool created are ever killed. ray is imported only
here, lazily.

Losing an actor (its node died, its process was killed) does not lose its batches: the
batches it had in flight whose results had not come back are sent again to the surviving
actors (at most ``ray.max_batch_retries`` times each), a replacement actor is started where
the cluster has room, and the pool counts what happened (`ExecutorCounters`). Each batch's
result is taken once, so a retried batch is never stored twice.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from clef_pipelines.embedding.config import EmbedderConfig

if TYPE_CHECKING:
    from clef_pipelines.embedding.base import Embedder

#: Named actors carry this prefix (and a per-run id) so that only ours are ever killed.
EMBED_ACTOR_PREFIX = "clef-embed-"


class EmbedExecutorError(RuntimeError):
    """The Ray pass cannot go on: a batch was retried too often, or every actor was lost."""


@dataclass
class ExecutorCounters:
    """What a runner survived. All zero for the in-process runner."""

    #: Actors that died or became unreachable during the pass.
    actors_lost: int = 0
    #: Distinct nodes of lost actors that the cluster reported dead.
    nodes_lost: int = 0
    #: Batches sent again after their actor was lost (one batch retried twice counts 2).
    batches_retried: int = 0
    #: Replacement actors started for lost ones.
    actors_replaced: int = 0

    def minus(self, before: ExecutorCounters) -> ExecutorCounters:
        return ExecutorCounters(
            **{f.name: getattr(self, f.name) - getattr(before, f.name) for f in fields(self)}
        )

    def copy(self) -> ExecutorCounters:
        return ExecutorCounters(**{f.name: getattr(self, f.name) for f in fields(self)})


class BatchRunner(Protocol):
    """Embeds batches of texts, yielding one matrix per batch in batch order."""

    counters: ExecutorCounters

    def __call__(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]: ...


def _embed_actor_class() -> Any:
    import ray

    @ray.remote
    class EmbedActor:
        def __init__(self, config_json: str) -> None:
            from clef_pipelines.embedding import make_embedder

            cfg = EmbedderConfig.model_validate_json(config_json)
            self.embedder = make_embedder(cfg.model_copy(update={"executor": "local"}))

        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def embed(self, texts: list[str]) -> np.ndarray:
            return self.embedder.embed(texts)

    return EmbedActor


@dataclass
class _Slot:
    """One actor of the pool and the batches it holds."""

    name: str
    handle: Any
    #: Usable before it is known to be up: the first actors queue work at once (as Ray does),
    #: replacements only once up, so that work never waits on one the cluster cannot place.
    usable: bool
    node_id: str | None = None
    lost: bool = False
    in_flight: set[Any] = field(default_factory=set)  # ObjectRefs


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Errors that mean the actor (or its node, or the result stored there) is gone, as opposed
    to an error the embedder itself raised (that one fails the pass, as in-process)."""
    ex = ray.exceptions
    names = ("RayActorError", "ObjectLostError", "NodeDiedError", "WorkerCrashedError")
    return tuple(getattr(ex, n) for n in names if hasattr(ex, n))


class RayEmbedPool:
    """Actors for one embedding pass; use as a context manager (they die on exit)."""

    def __init__(self, config: EmbedderConfig) -> None:
        from clef_pipelines.clef.backends.ray_pool import connect

        ray_cfg = config.ray
        import ray

        self._started_ray = not ray.is_initialized()
        self.ray = connect(ray_cfg.address, ray_cfg.namespace, ray_cfg.local_num_cpus)
        gpus = ray_cfg.num_gpus_per_actor
        if gpus is None:
            gpus = 1.0 if self.ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
        self.settings = ray_cfg
        self.run_id = uuid.uuid4().hex[:10]
        self.in_flight = ray_cfg.in_flight_per_actor
        self.num_gpus_per_actor = gpus
        self.counters = ExecutorCounters()
        self._lost_errors = _lost_errors(ray)
        self._actor_cls = _embed_actor_class()
        self._payload = config.model_dump_json()
        self._slots: list[_Slot] = []
        self._in_flight: dict[Any, tuple[int, _Slot]] = {}  # batch ref -> (batch, actor)
        self._starting: dict[Any, _Slot] = {}  # node_id ref -> actor
        self._lost_nodes: set[str] = set()  # nodes of lost actors not yet counted dead
        self._last_loss = ""
        try:
            for _ in range(ray_cfg.num_actors):
                self._start_actor(usable=True)
        except BaseException:
            self.close()  # the actors already started must not outlive a failed start
            raise

    @property
    def actors(self) -> list[Any]:
        """The handles of the actors not lost."""
        return [s.handle for s in self._slots if not s.lost]

    @property
    def placement(self) -> dict[str, str]:
        """Actor name -> node id, for every actor known to be up (lost ones included)."""
        return {s.name: s.node_id for s in self._slots if s.node_id}

    def wait_placed(self, timeout: float | None = None) -> dict[str, str]:
        """Block until every actor not lost is up; returns `placement`."""
        refs = list(self._starting)
        if refs:
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
            for ref in done:
                self._actor_started(ref)
        return self.placement

    def _start_actor(self, *, usable: bool) -> _Slot:
        name = f"{EMBED_ACTOR_PREFIX}{self.run_id}-{len(self._slots)}"
        handle = self._actor_cls.options(
            name=name,
            namespace=self.settings.namespace,
            num_cpus=self.settings.num_cpus_per_actor,
            num_gpus=self.num_gpus_per_actor,
            scheduling_strategy=self.settings.scheduling,
            max_restarts=0,  # a lost actor is replaced here, where it is counted
        ).remote(self._payload)
        slot = _Slot(name=name, handle=handle, usable=usable)
        self._slots.append(slot)
        self._starting[handle.node_id.remote()] = slot
        return slot

    def _actor_started(self, ref: Any) -> None:
        slot = self._starting.pop(ref)
        try:
            slot.node_id = self.ray.get(ref)
            slot.usable = not slot.lost
        except self._lost_errors as exc:
            self._lose(slot, exc)

    def _free_slot(self) -> _Slot | None:
        free = [
            s for s in self._slots if s.usable and not s.lost and len(s.in_flight) < self.in_flight
        ]
        return min(free, key=lambda s: len(s.in_flight)) if free else None

    def _lose(self, slot: _Slot, exc: BaseException) -> list[tuple[Any, int]]:
        """Mark an actor lost; returns the (ref, batch) it held that had not been taken."""
        if slot.lost:
            return []
        slot.lost = True
        self.counters.actors_lost += 1
        # Kept for the error if the pass cannot go on (an embedder that fails to load in
        # the actor shows up here, not as "actors lost").
        self._last_loss = f"{type(exc).__name__}: {str(exc)[:800]}"
        if slot.node_id:
            self._lost_nodes.add(slot.node_id)
        with contextlib.suppress(Exception):  # ours; gone already, or unreachable
            self.ray.kill(slot.handle, no_restart=True)
        refs = list(slot.in_flight)
        slot.in_flight.clear()
        orphans = [(ref, self._in_flight.pop(ref)[0]) for ref in refs]
        replaced = len(self._slots) - self.settings.num_actors
        if self.settings.replace_lost_actors and replaced < self.settings.num_actors:
            self._start_actor(usable=False)
            self.counters.actors_replaced += 1
        return orphans

    def map(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        """Embed every batch on the actors; yields the results in batch order."""
        ray = self.ray
        source = enumerate(batches)
        exhausted = False
        texts: dict[int, list[str]] = {}  # batches taken and not yet yielded
        results: dict[int, np.ndarray] = {}
        retry: deque[int] = deque()
        attempts: dict[int, int] = {}
        # Batches held at once (in flight, waiting for an earlier one, or to retry): bounds
        # the memory a slow or retried early batch can make the later ones take.
        window = 2 * self.settings.num_actors * self.in_flight
        next_out = 0

        def requeue(orphans: list[tuple[Any, int]]) -> None:
            # A batch the lost actor finished before it went is taken, not sent again.
            refs = [ref for ref, _ in orphans]
            ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
            for ref, batch in orphans:
                if ref in ready:
                    with contextlib.suppress(*self._lost_errors):
                        results[batch] = ray.get(ref)
                        continue
                attempts[batch] = attempts.get(batch, 0) + 1
                if attempts[batch] > self.settings.max_batch_retries:
                    raise EmbedExecutorError(
                        f"embedding batch {batch} was lost with its Ray actor "
                        f"{attempts[batch]} times (embedder.ray.max_batch_retries="
                        f"{self.settings.max_batch_retries})"
                    )
                self.counters.batches_retried += 1
                retry.append(batch)

        while True:
            while (slot := self._free_slot()) is not None:
                if retry:
                    batch = retry.popleft()
                elif not exhausted and len(texts) < window:
                    try:
                        batch, chunk = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    texts[batch] = list(chunk)
                else:
                    break
                ref = slot.handle.embed.remote(texts[batch])
                slot.in_flight.add(ref)
                self._in_flight[ref] = (batch, slot)
            if next_out in results:
                while next_out in results:
                    del texts[next_out]
                    yield results.pop(next_out)
                    next_out += 1
                continue  # room in the window again: take more batches first
            if exhausted and not texts:
                break
            if not self._in_flight and not self._starting:
                raise EmbedExecutorError(
                    "every Ray embedding actor was lost and none can be started "
                    f"(embedder.ray.replace_lost_actors); last loss: {self._last_loss}"
                )
            wait_for = list(self._in_flight) + list(self._starting)
            timeout = None
            if not self._in_flight:  # only replacements left: wait for one, not forever
                timeout = self.settings.replacement_wait_s
            done, _ = ray.wait(wait_for, num_returns=1, timeout=timeout)
            if not done:
                raise EmbedExecutorError(
                    "every Ray embedding actor was lost and no replacement started within "
                    f"{self.settings.replacement_wait_s} s (embedder.ray.replacement_wait_s); "
                    f"last loss: {self._last_loss}"
                )
            # Whatever else finished too: fewer wakeups than one ref at a time.
            rest = [r for r in wait_for if r not in done]
            if rest:
                done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in done:
                if ref in self._starting:
                    self._actor_started(ref)
                    continue
                if ref not in self._in_flight:
                    continue  # its actor was lost earlier in this loop; the batch is requeued
                batch, slot = self._in_flight[ref]
                try:
                    out = ray.get(ref)
                except self._lost_errors as exc:
                    requeue(self._lose(slot, exc))
                    continue
                del self._in_flight[ref]
                slot.in_flight.discard(ref)
                results[batch] = out
        self._count_lost_nodes()

    __call__ = map

    def _count_lost_nodes(self) -> None:
        """Which nodes of lost actors the cluster reports dead (it notices a dead node within
        its health-check period, so wait a bounded time for it to say so)."""
        pending = self._lost_nodes
        if not pending:
            return
        deadline = time.monotonic() + self.settings.node_loss_wait_s
        while True:
            alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
            dead = {n for n in pending if n not in alive}
            if dead == pending or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        self.counters.nodes_lost += len(dead)
        self._lost_nodes = pending - dead  # an actor lost on a live node is not a lost node

    def close(self) -> None:
        """Cancel what is still queued and kill our actors (never anything else)."""
        for ref in list(self._in_flight):
            with contextlib.suppress(Exception):  # already finished or gone
                self.ray.cancel(ref, force=False)
        self._in_flight.clear()
        self._starting.clear()
        for slot in self._slots:
            with contextlib.suppress(Exception):  # already gone
                self.ray.kill(slot.handle, no_restart=True)
        self._slots = []
        if self._started_ray:
            self.ray.shutdown()  # the local Ray this pool started; nothing else

    def __enter__(self) -> RayEmbedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalRunner:
    """Batches embedded in this process, one after the other."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.counters = ExecutorCounters()

    def __call__(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        for batch in batches:
            yield self.embedder.embed(list(batch))


def local_batches(embedder: Embedder) -> BatchRunner:
    return LocalRunner(embedder)


@contextlib.contextmanager
def open_batch_runner(config: EmbedderConfig, embedder: Embedder) -> Iterator[BatchRunner]:
    """The runner `config.executor` names; Ray actors live only inside the `with` block."""
    if config.executor == "ray":
        with RayEmbedPool(config) as pool:
            yield pool
    else:
        yield local_batches(embedder)
