"""`embedder.executor: ray` on a local Ray with 2 CPUs: the same vectors as in-process, actors
killed when the pass ends or is interrupted (only ours), and a whole ingestion run through it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from clef_pipelines.config import EmbedderConfig
from clef_pipelines.embedding import make_embedder
from clef_pipelines.embedding.executor import (
    EMBED_ACTOR_PREFIX,
    EmbedExecutorError,
    RayEmbedPool,
    open_batch_runner,
)
from clef_pipelines.ingest.sync import embed_chunks
from clef_pipelines.stores.memory import MemoryStore
from tests.ingest.conftest import make_workspace

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_namespace() -> str:  # type: ignore[misc]
    if ray.is_initialized():
        pytest.skip("a Ray session is already open in this process")
    from clef_pipelines.clef.backends.ray_pool import local_ray_env

    namespace = f"clef-embed-test-{uuid.uuid4().hex[:8]}"
    local_ray_env()
    ray.init(num_cpus=2, namespace=namespace, include_dashboard=False, log_to_driver=False)
    try:
        yield namespace
    finally:
        if ray.is_initialized():
            ray.shutdown()  # the local Ray this module started; never `ray stop`


def _chunks(n: int) -> pl.DataFrame:
    words = ["token", "rotate", "policy", "cluster", "vector", "batch", "refresh", "source"]
    texts = [
        " ".join(words[(i + j) % len(words)] for j in range(5 + i % 7)) + f" n{i}" for i in range(n)
    ]
    return pl.DataFrame(
        {"id": [str(uuid.uuid4()) for _ in range(n)], "embed_text": texts, "tokens": [10] * n}
    )


def _ours(namespace: str) -> list[str]:
    return [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == namespace and a["name"].startswith(EMBED_ACTOR_PREFIX)
    ]


def test_ray_executor_same_vectors_and_cleans_up(ray_namespace: str) -> None:
    cfg = EmbedderConfig(
        kind="hash",
        dimension=64,
        batch_size=16,
        executor="ray",
        ray={"namespace": ray_namespace, "num_actors": 2},
    )
    local_cfg = cfg.model_copy(update={"executor": "local"})
    chunks = _chunks(150)
    emb = make_embedder(local_cfg)
    store = MemoryStore()
    want, _ = embed_chunks(chunks, emb, store, "c", batch_size=16)
    seen: list[int] = []
    got, stats = embed_chunks(
        chunks,
        emb,
        store,
        "c",
        batch_size=16,
        progress=lambda done, total: seen.append(done),
        open_runner=lambda: open_batch_runner(cfg, emb),
    )
    assert stats.embedded == 150 and stats.embedder_calls == 10 and seen[-1] == 150
    assert emb.calls == 10  # the ray pass ran on the actors, not on this process's embedder
    np.testing.assert_array_equal(
        np.array(got["vector"].to_list()), np.array(want["vector"].to_list())
    )
    assert got["id"].to_list() == want["id"].to_list()
    assert _wait_gone(ray_namespace)

    # Interrupted after the first batch (what a cancelled Dagster run does to its step): the
    # queued batches are cancelled and the actors killed; a bystander actor survives.
    @ray.remote(num_cpus=0)
    class Bystander:
        def ping(self) -> str:
            return "pong"

    by = Bystander.options(name="bystander", namespace=ray_namespace).remote()

    class Cancelled(BaseException):
        pass

    def cancel(done: int, total: int) -> None:
        assert _ours(ray_namespace), "actors should be alive mid-pass"
        raise Cancelled

    with pytest.raises(Cancelled):
        embed_chunks(
            _chunks(400),
            emb,
            store,
            "c",
            batch_size=8,
            progress=cancel,
            open_runner=lambda: open_batch_runner(cfg, emb),
        )
    assert _wait_gone(ray_namespace)
    assert ray.get(by.ping.remote()) == "pong"
    ray.kill(by)


def test_lost_actor_batches_sent_again(ray_namespace: str) -> None:
    """An actor killed mid-pass (a crashed process; its node lives on): its unfinished batches
    go to the other actor, a replacement starts, every batch is embedded once; with no retries
    allowed the pass fails naming the setting. (Losing a whole node: test_ray_cluster.py.)"""
    cfg = EmbedderConfig(
        kind="hash",
        dimension=32,
        batch_size=4,
        executor="ray",
        # 0: replace at once (the node is alive: no waiting for the cluster to call it dead).
        ray={"namespace": ray_namespace, "num_actors": 2, "node_loss_wait_s": 0},
    )
    texts = _chunks(160)["embed_text"].to_list()
    batches = [texts[i : i + 4] for i in range(0, len(texts), 4)]
    want = make_embedder(cfg.model_copy(update={"executor": "local"})).embed(texts)
    got: list[np.ndarray] = []
    with RayEmbedPool(cfg) as pool:
        assert len(pool.wait_placed(timeout=60)) == 2
        victim = pool.actors[0]
        for out in pool.map(batches):
            got.append(out)
            if len(got) == 1:
                ray.kill(victim, no_restart=True)  # the pool's own actor
        counters = pool.counters
    np.testing.assert_array_equal(np.concatenate(got), want)
    assert counters.actors_lost == 1 and counters.nodes_lost == 0
    assert counters.batches_retried >= 1 and counters.actors_replaced == 1
    assert _wait_gone(ray_namespace)

    strict = cfg.model_copy(update={"ray": cfg.ray.model_copy(update={"max_batch_retries": 0})})
    with RayEmbedPool(strict) as pool:
        pool.wait_placed(timeout=60)
        victim = pool.actors[0]
        with pytest.raises(EmbedExecutorError, match="max_batch_retries=0"):
            for i, _ in enumerate(pool.map(batches)):
                if i == 0:
                    ray.kill(victim, no_restart=True)
    assert _wait_gone(ray_namespace)


def test_embedder_that_cannot_load_in_its_actor_fails_the_pass(ray_namespace: str) -> None:
    """Not a lost actor to replace: the error says why the embedder did not load."""
    cfg = EmbedderConfig(kind="openai", executor="ray", ray={"namespace": ray_namespace})
    with RayEmbedPool(cfg) as pool, pytest.raises(EmbedExecutorError, match="base_url"):
        list(pool.map([["a text"]]))
    assert pool.counters.actors_replaced == 0
    assert _wait_gone(ray_namespace)


def _wait_gone(namespace: str, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _ours(namespace):
            return True
        time.sleep(0.2)
    return False


def test_ingestion_run_embeds_on_ray(
    ray_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        embedder={
            "kind": "hash",
            "dimension": 64,
            "executor": "ray",
            "ray": {"namespace": ray_namespace, "num_actors": 1},
        },
    )
    (report,) = ws.ingest()
    assert report.success, report.error
    assert report.assets["embeddings"]["embedded"] == report.assets["chunks"]["chunks"] > 0
    assert report.assets["store_sync"]["upserted"] == report.assets["chunks"]["chunks"]
    assert _wait_gone(ray_namespace)
    assert len(ws.records()) == report.assets["chunks"]["chunks"]
