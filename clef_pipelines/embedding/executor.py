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
    #: Takes batches once it is up (has said which node it is on): work never waits on an
    #: actor the cluster cannot place, and a lost actor's node is known.
    usable: bool = False
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
        # Replacements due, each with the node of the actor it replaces (None: not known)
        # and when that one was lost; see `_start_due_replacements`.
        self._owed: list[tuple[str | None, float]] = []
        self._alive_checked = 0.0
        self._alive: set[str] = set()
        self._nodes_at_start = self._alive_nodes()
        try:
            for _ in range(ray_cfg.num_actors):
                self._start_actor()
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

    def _start_actor(self) -> _Slot:
        name = f"{EMBED_ACTOR_PREFIX}{self.run_id}-{len(self._slots)}"
        handle = self._actor_cls.options(
            name=name,
            namespace=self.settings.namespace,
            num_cpus=self.settings.num_cpus_per_actor,
            num_gpus=self.num_gpus_per_actor,
            scheduling_strategy=self.settings.scheduling,
            max_restarts=0,  # a lost actor is replaced here, where it is counted
        ).remote(self._payload)
        slot = _Slot(name=name, handle=handle)
        self._slots.append(slot)
        self._starting[handle.node_id.remote()] = slot
        return slot

    def _actor_started(self, ref: Any) -> list[tuple[Any, int]]:
        """Take an actor's answer to `node_id`; returns what `_lose` does if it is lost."""
        slot = self._starting.pop(ref)
        try:
            slot.node_id = self.ray.get(ref)
            slot.usable = not slot.lost
        except self._lost_errors as exc:
            return self._lose(slot, exc)
        return []

    def _take_node_id(self, slot: _Slot) -> None:
        for ref, waiting in list(self._starting.items()):
            if waiting is slot and self.ray.wait([ref], timeout=0)[0]:
                del self._starting[ref]
                with contextlib.suppress(*self._lost_errors):
                    slot.node_id = self.ray.get(ref)

    def _free_slot(self) -> _Slot | None:
        free = [
            s for s in self._slots if s.usable and not s.lost and len(s.in_flight) < self.in_flight
        ]
        return min(free, key=lambda s: len(s.in_flight)) if free else None

    def _alive_nodes(self, max_age_s: float = 0.0) -> set[str]:
        now = time.monotonic()
        if now - self._alive_checked >= max_age_s:
            self._alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
            self._alive_checked = now
        return self._alive

    def _lose(self, slot: _Slot, exc: BaseException) -> list[tuple[Any, int]]:
        """Mark an actor lost; returns the (ref, batch) it held that had not been taken."""
        if slot.lost:
            return []
        if getattr(exc, "actor_init_failed", False):
            # The embedder failed to load in the actor: another actor would fail the same.
            raise EmbedExecutorError(f"the Ray embedding actor failed to start: {exc}") from exc
        slot.lost = True
        self.counters.actors_lost += 1
        if slot.node_id is None:  # it may have said where it is before it went
            self._take_node_id(slot)
        # Kept for the error if the pass cannot go on.
        self._last_loss = f"{type(exc).__name__}: {str(exc)[:800]}"
        if slot.node_id:
            self._lost_nodes.add(slot.node_id)
        with contextlib.suppress(Exception):  # ours; gone already, or unreachable
            self.ray.kill(slot.handle, no_restart=True)
        refs = list(slot.in_flight)
        slot.in_flight.clear()
        orphans = [(ref, self._in_flight.pop(ref)[0]) for ref in refs]
        if self.settings.replace_lost_actors:
            self._owed.append((slot.node_id, time.monotonic()))
        return orphans

    def _start_due_replacements(self) -> None:
        """Start the replacements whose lost actor's node the cluster reports dead (or
        whose node is not known, once some node is), or that waited `node_loss_wait_s`.

        Not at once: the first sign of a lost node is its actors' sockets closing, and the
        cluster still counts the node alive for its health-check period; a replacement
        started then may be placed on that same node and be lost with it."""
        if not self._owed:
            return
        budget = self.settings.num_actors * max(1, self.settings.max_batch_retries)
        alive = self._alive_nodes(max_age_s=0.5)
        self._count_dead(alive)
        some_node_died = bool(self._nodes_at_start - alive)
        now = time.monotonic()
        owed = []
        for node, since in self._owed:
            due = (node not in alive) if node else some_node_died
            if due or now - since >= self.settings.node_loss_wait_s:
                if self.counters.actors_replaced < budget:
                    self._start_actor()
                    self.counters.actors_replaced += 1
            else:
                owed.append((node, since))
        self._owed = owed

    def _count_dead(self, alive: set[str]) -> None:
        dead = {n for n in self._lost_nodes if n not in alive}
        self.counters.nodes_lost += len(dead)
        self._lost_nodes -= dead

    def map(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        """Embed every batch on the actors; yields the results in batch order."""
        run = _Pass(self, batches)
        while True:
            run.submit()
            if run.next_out in run.results:
                yield from run.in_order()
                continue  # room in the window again: take more batches first
            if run.exhausted and not run.texts:
                break
            self._start_due_replacements()
            run.check_stalled()
            wait_for = list(self._in_flight) + list(self._starting)
            # Owed replacements are looked at again every half second.
            timeout = 0.5 if self._owed or not self._in_flight else None
            done = self.ray.wait(wait_for, num_returns=1, timeout=timeout)[0] if wait_for else []
            if not done:
                if not wait_for:
                    time.sleep(0.5)
                continue
            # Whatever else finished too: fewer wakeups than one ref at a time.
            rest = [r for r in wait_for if r not in done]
            if rest:
                done += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            run.collect(done)
        self._count_lost_nodes()

    __call__ = map

    def _count_lost_nodes(self) -> None:
        """Which nodes of lost actors the cluster reports dead (it notices a dead node within
        its health-check period, so wait a bounded time for it to say so)."""
        deadline = time.monotonic() + self.settings.node_loss_wait_s
        while self._lost_nodes:
            self._count_dead(self._alive_nodes())
            if not self._lost_nodes or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        # What is left: actors lost on a live node (not a lost node); a later pass of the
        # same pool does not wait for these again.
        self._lost_nodes.clear()

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


class _Pass:
    """The state of one `RayEmbedPool.map`: batches taken, results waiting for an earlier
    batch, batches to send again."""

    def __init__(self, pool: RayEmbedPool, batches: Iterable[Sequence[str]]) -> None:
        self.pool = pool
        self.source = enumerate(batches)
        self.exhausted = False
        self.texts: dict[int, list[str]] = {}  # batches taken and not yet yielded
        self.results: dict[int, np.ndarray] = {}
        self.retry: deque[int] = deque()
        self.attempts: dict[int, int] = {}
        # Batches held at once (in flight, waiting for an earlier one, or to retry): bounds
        # the memory a slow or retried early batch can make the later ones take.
        self.window = 2 * pool.settings.num_actors * pool.in_flight
        self.next_out = 0
        self.stalled_since: float | None = None

    def submit(self) -> None:
        """Fill the free actors: batches to retry first, then new ones."""
        pool = self.pool
        while (slot := pool._free_slot()) is not None:
            if self.retry:
                batch = self.retry.popleft()
            elif not self.exhausted and len(self.texts) < self.window:
                try:
                    batch, chunk = next(self.source)
                except StopIteration:
                    self.exhausted = True
                    return
                self.texts[batch] = list(chunk)
            else:
                return
            ref = slot.handle.embed.remote(self.texts[batch])
            slot.in_flight.add(ref)
            pool._in_flight[ref] = (batch, slot)

    def in_order(self) -> Iterator[np.ndarray]:
        while self.next_out in self.results:
            del self.texts[self.next_out]
            yield self.results.pop(self.next_out)
            self.next_out += 1

    def check_stalled(self) -> None:
        """Nothing in flight (no actor up yet, or every one lost): wait, but not forever."""
        pool = self.pool
        if pool._in_flight:
            self.stalled_since = None
            return
        self.stalled_since = self.stalled_since or time.monotonic()
        waited = time.monotonic() - self.stalled_since
        limit = pool.settings.actor_start_wait_s
        if (pool._starting or pool._owed) and waited <= limit:
            return
        if not pool.counters.actors_lost:
            raise EmbedExecutorError(
                f"no Ray embedding actor started within {limit} s "
                "(embedder.ray.actor_start_wait_s): does the cluster have room for one "
                f"({pool.settings.num_cpus_per_actor} CPU, {pool.num_gpus_per_actor} GPU)?"
            )
        raise EmbedExecutorError(
            f"every Ray embedding actor was lost and no replacement started within {limit} s "
            "(embedder.ray.replace_lost_actors, actor_start_wait_s); last loss: "
            f"{pool._last_loss}"
        )

    def collect(self, done: list[Any]) -> None:
        pool = self.pool
        for ref in done:
            if ref in pool._starting:
                self.requeue(pool._actor_started(ref))
                continue
            if ref not in pool._in_flight:
                continue  # its actor was lost earlier in this loop; the batch is requeued
            batch, slot = pool._in_flight[ref]
            try:
                out = pool.ray.get(ref)
            except pool._lost_errors as exc:
                self.requeue(pool._lose(slot, exc))
                continue
            del pool._in_flight[ref]
            slot.in_flight.discard(ref)
            self.results[batch] = out

    def requeue(self, orphans: list[tuple[Any, int]]) -> None:
        """Send a lost actor's batches again; one it finished before it went is taken."""
        pool = self.pool
        refs = [ref for ref, _ in orphans]
        ready = set(pool.ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
        for ref, batch in orphans:
            if ref in ready:
                with contextlib.suppress(*pool._lost_errors):
                    self.results[batch] = pool.ray.get(ref)
                    continue
            self.attempts[batch] = self.attempts.get(batch, 0) + 1
            if self.attempts[batch] > pool.settings.max_batch_retries:
                raise EmbedExecutorError(
                    f"embedding batch {batch} was lost with its Ray actor "
                    f"{self.attempts[batch]} times (embedder.ray.max_batch_retries="
                    f"{pool.settings.max_batch_retries})"
                )
            pool.counters.batches_retried += 1
            self.retry.append(batch)


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
