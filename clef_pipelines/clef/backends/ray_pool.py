"""`ray`: a pool of named, detached actors, each holding a local engine on one GPU (or CPU),
started on a local Ray or joined to a cluster by address. Requests are batched per actor.

The actors outlive the driver (and so Dagster runs) on a cluster; `shutdown_pool` kills them
explicitly and kills nothing else. They are spread over the cluster's nodes, and Ray restarts
one whose node is lost on a node with room (`clef.ray_max_restarts`), sending the batches it
held again (an answer depends on its request only, so a retried batch answers the same).
ray is imported only here, lazily.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from clef_pipelines.clef import errors as _errors
from clef_pipelines.clef.backends.base import Backend
from clef_pipelines.clef.engine import Batcher
from clef_pipelines.clef.errors import ClefError, ClefNotConfigured
from clef_pipelines.clef.tokens import counter_for
from clef_pipelines.clef.wire import SystemOneRequest

ACTOR_PREFIX = "clef-engine-"


def error_to_dict(exc: ClefError) -> dict[str, Any]:
    return {
        "__clef_error__": type(exc).__name__,
        "message": str(exc),
        "field": getattr(exc, "field", ""),
    }


def error_from_dict(d: dict[str, Any]) -> ClefError:
    cls = getattr(_errors, str(d.get("__clef_error__")), ClefError)
    if not (isinstance(cls, type) and issubclass(cls, ClefError)):
        cls = ClefError
    if issubclass(cls, _errors.ClefValidationError):
        return cls(d.get("message", ""), field=d.get("field", ""))
    if cls is _errors.ClefRetriesExhausted:
        return ClefError(d.get("message", ""))
    return cls(d.get("message", ""))


class EngineActor:
    """The actor body (wrapped with ray.remote at pool start)."""

    def __init__(self, release_dir: str, device: str | None, max_length: int) -> None:
        from clef_pipelines.clef.engine import Engine

        self.engine = Engine(release_dir, device=device, max_length=max_length)

    def answer_batch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        reqs = [SystemOneRequest.model_validate(b) for b in bodies]
        out = self.engine.answer_batch(reqs)
        return [r if isinstance(r, dict) else error_to_dict(r) for r in out]

    def info(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return self.engine.info() | {
            "pid": os.getpid(),
            "node_id": context.get_node_id(),
            "restarted": context.was_current_actor_reconstructed,
        }


def local_ray_env() -> None:
    """Keep a local Ray quiet and on loopback (see docs: usage stats off, no auth prompt)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def connect(address: str | None, namespace: str, num_cpus: int | None = None) -> Any:
    import ray

    if not ray.is_initialized():
        kw: dict[str, Any] = {
            "namespace": namespace,
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        if address:
            kw["address"] = address
        elif not os.environ.get("RAY_ADDRESS"):
            # A fresh local instance: without "local", Ray joins whatever cluster another
            # program last started on this machine (its /tmp/ray session file), with our
            # num_cpus refused. RAY_ADDRESS, Ray's own convention, still names a cluster.
            kw["address"] = "local"
            local_ray_env()
            if num_cpus is not None:
                kw["num_cpus"] = num_cpus
        ray.init(**kw)
    return ray


def shutdown_pool(
    namespace: str, *, address: str | None = None, disconnect: bool = True
) -> list[str]:
    """Kill this pool's named actors (only those: prefix and namespace are ours); returns
    their names. Then, if asked, disconnect this driver (`ray.shutdown()`)."""
    import ray

    connect(address, namespace)
    killed = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name, ns = entry.get("name", ""), entry.get("namespace")
        if ns == namespace and name.startswith(ACTOR_PREFIX):
            try:
                ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
                killed.append(name)
            except ValueError:  # already gone
                pass
    if disconnect:
        ray.shutdown()
    return killed


class RayBackend(Backend):
    name = "ray"

    def __init__(
        self,
        model: str,
        *,
        release_dir: str | None,
        address: str | None,
        namespace: str,
        num_actors: int,
        num_gpus_per_actor: float | None,
        num_cpus_per_actor: float,
        device: str | None,
        max_length: int,
        max_batch: int,
        batch_wait_ms: float,
        local_num_cpus: int | None = None,
        max_restarts: int = 3,
    ) -> None:
        super().__init__(model)
        if not release_dir:
            raise ClefNotConfigured("clef.backend 'ray' needs clef.release_dir")
        self.release_dir = os.path.abspath(release_dir)
        self.address = address
        self.namespace = namespace
        self.num_actors = num_actors
        self.num_gpus = num_gpus_per_actor
        self.num_cpus = num_cpus_per_actor
        self.device = device
        self.context_tokens = max_length
        self.max_length = max_length
        self.max_batch = max_batch
        self.batch_wait_ms = batch_wait_ms
        self.local_num_cpus = local_num_cpus
        self.max_restarts = max_restarts
        self.counter = counter_for(release_dir)
        self.actors: list[Any] = []
        self._batchers: list[Batcher] = []
        self._inflight: list[int] = []
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    def _start_sync(self) -> None:
        ray = connect(self.address, self.namespace, self.local_num_cpus)
        gpus = self.num_gpus
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
        device = self.device or ("cuda" if gpus > 0 else "cpu")
        remote_cls = ray.remote(EngineActor)
        actors = []
        for i in range(self.num_actors):
            actors.append(
                remote_cls.options(
                    name=f"{ACTOR_PREFIX}{i}",
                    namespace=self.namespace,
                    lifetime="detached",
                    get_if_exists=True,
                    num_gpus=gpus,
                    num_cpus=self.num_cpus,
                    max_concurrency=1,
                    scheduling_strategy="SPREAD",  # a lost node takes as few as it can
                    max_restarts=self.max_restarts,
                    max_task_retries=self.max_restarts,
                ).remote(self.release_dir, device, self.max_length)
            )
        infos = ray.get([a.info.remote() for a in actors])
        for i, info in enumerate(infos):
            # A pool left by an earlier run with another release is not ours to reuse.
            if os.path.realpath(info["release_dir"]) != os.path.realpath(self.release_dir):
                raise ClefNotConfigured(
                    f"Ray actor {ACTOR_PREFIX}{i} in namespace {self.namespace!r} serves "
                    f"{info['release_dir']}, not {self.release_dir}: run "
                    "`clef-pipelines clef-shutdown` (or shutdown_pool) first"
                )
        self.actors = actors

    async def start(self) -> None:
        if self._started:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:  # concurrent first requests start the pool once
            if self._started:
                return
            await asyncio.get_running_loop().run_in_executor(None, self._start_sync)
            self._batchers = [
                Batcher(self._runner_for(a), max_batch=self.max_batch, wait_ms=self.batch_wait_ms)
                for a in self.actors
            ]
            self._inflight = [0] * len(self.actors)
            self._started = True

    def _runner_for(self, actor: Any):  # type: ignore[no-untyped-def]
        async def run(reqs: list[SystemOneRequest]) -> list[dict[str, Any] | ClefError]:
            raw = await actor.answer_batch.remote([r.wire() for r in reqs])
            return [error_from_dict(r) if "__clef_error__" in r else r for r in raw]

        return run

    async def send(self, request: SystemOneRequest) -> dict[str, Any]:
        await self.start()
        # Least-loaded actor: each batches its own queue.
        i = min(range(len(self._batchers)), key=self._inflight.__getitem__)
        self._inflight[i] += 1
        try:
            return await self._batchers[i].submit(request)
        finally:
            self._inflight[i] -= 1

    async def aclose(self) -> None:
        # The actors stay up (detached) for the next run; only this driver's queues close.
        for b in self._batchers:
            await b.aclose()
        self._batchers = []
        self._started = False

    def describe(self) -> str:
        where = self.address or "local Ray"
        return f"ray ({self.num_actors} actor(s) on {where}, {self.release_dir})"
