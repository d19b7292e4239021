"""Where embedding batches run: in this process (`local`), or mapped over Ray actors (`ray`).

With ``embedder.executor: ray`` each actor builds the same embedder from the same config (so
the vectors are the ones the in-process embedder returns) and batches are sent to the actors
round-robin, a bounded number in flight per actor, results taken back in order. Actors ask
for a GPU each when the cluster has GPUs (or ``ray.num_gpus_per_actor`` says so). They belong
to this driver (not detached): when the work ends, fails or is interrupted (a cancelled
Dagster run interrupts its step) the pending tasks are cancelled and the actors killed, so a
cancelled run leaves nothing running on the cluster. ray is imported only here, lazily.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from clef_pipelines.embedding.config import EmbedderConfig

if TYPE_CHECKING:
    from clef_pipelines.embedding.base import Embedder

#: Named actors carry this prefix (and a per-run id) so that only ours are ever killed.
EMBED_ACTOR_PREFIX = "clef-embed-"


def _embed_actor_class() -> Any:
    import ray

    @ray.remote
    class EmbedActor:
        def __init__(self, config_json: str) -> None:
            from clef_pipelines.embedding import make_embedder

            cfg = EmbedderConfig.model_validate_json(config_json)
            self.embedder = make_embedder(cfg.model_copy(update={"executor": "local"}))

        def embed(self, texts: list[str]) -> np.ndarray:
            return self.embedder.embed(texts)

    return EmbedActor


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
        self.run_id = uuid.uuid4().hex[:10]
        self.in_flight = ray_cfg.in_flight_per_actor
        self.num_gpus_per_actor = gpus
        self._pending: deque[Any] = deque()
        self.actors: list[Any] = []
        actor_cls = _embed_actor_class()
        payload = config.model_dump_json()
        try:
            for i in range(ray_cfg.num_actors):
                self.actors.append(
                    actor_cls.options(
                        name=f"{EMBED_ACTOR_PREFIX}{self.run_id}-{i}",
                        namespace=ray_cfg.namespace,
                        num_cpus=ray_cfg.num_cpus_per_actor,
                        num_gpus=gpus,
                    ).remote(payload)
                )
        except BaseException:
            self.close()  # the actors already started must not outlive a failed start
            raise

    def map(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        """Embed every batch on the actors; yields the results in batch order."""
        pending = self._pending
        limit = len(self.actors) * self.in_flight
        for i, batch in enumerate(batches):
            pending.append(self.actors[i % len(self.actors)].embed.remote(list(batch)))
            if len(pending) >= limit:
                yield self.ray.get(pending.popleft())
        while pending:
            yield self.ray.get(pending.popleft())

    def close(self) -> None:
        """Cancel what is still queued and kill our actors (never anything else)."""
        for ref in list(self._pending):
            with contextlib.suppress(Exception):  # already finished or gone
                self.ray.cancel(ref, force=False)
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone
                self.ray.kill(actor, no_restart=True)
        self.actors = []
        if self._started_ray:
            self.ray.shutdown()  # the local Ray this pool started; nothing else

    def __enter__(self) -> RayEmbedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BatchRunner = Callable[[Iterable[Sequence[str]]], Iterator[np.ndarray]]


def local_batches(embedder: Embedder) -> BatchRunner:
    def run(batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        for batch in batches:
            yield embedder.embed(list(batch))

    return run


@contextlib.contextmanager
def open_batch_runner(config: EmbedderConfig, embedder: Embedder) -> Iterator[BatchRunner]:
    """The runner `config.executor` names; Ray actors live only inside the `with` block."""
    if config.executor == "ray":
        with RayEmbedPool(config) as pool:
            yield pool.map
    else:
        yield local_batches(embedder)
