"""Ray beyond one node: a two-node cluster on loopback (Ray's own `cluster_utils.Cluster`),
embedding actors and Clef engine actors spread over both nodes, and a node removed in the
middle of an embedding pass: the pass finishes on the node left, every batch is embedded once
(the same vectors as in-process), and the pass says what it lost and sent again. Then a whole
ingestion run into LanceDB that loses a node mid-embedding.

The cluster is the test's own (`Cluster.shutdown` stops the processes it started); nothing here
calls `ray stop`. The nodes' health checks are made fast so that the cluster declares a removed
node dead within seconds (a real cluster takes its default ~30 s: `node_loss_wait_s`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clef_pipelines.config import EmbedderConfig
from clef_pipelines.embedding import make_embedder
from clef_pipelines.embedding.executor import EMBED_ACTOR_PREFIX, RayEmbedPool
from clef_pipelines.ingest import progress
from tests.clef.conftest import tiny_release  # noqa: F401 (the fixture, for the Clef actors)
from tests.ingest.conftest import make_workspace

pytestmark = [pytest.mark.ray, pytest.mark.stress]
ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
ray_constants = pytest.importorskip("ray._private.ray_constants")

MB = 1024 * 1024
#: Two shared cores here: each node claims 2 logical CPUs, each actor half of one.
NODE = {"num_cpus": 2, "object_store_memory": 100 * MB}
FAST_HEALTH_CHECK = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 300,
    "health_check_failure_threshold": 3,
}


class TwoNodes:
    def __init__(self) -> None:
        from clef_pipelines.clef.backends.ray_pool import local_ray_env

        local_ray_env()
        self.namespace = f"clef-cluster-test-{uuid.uuid4().hex[:8]}"
        self.cluster = cluster_utils.Cluster(
            initialize_head=True,
            head_node_args={
                **NODE,
                "include_dashboard": False,
                "_system_config": FAST_HEALTH_CHECK,
            },
        )
        self.worker: Any = None
        ray.init(
            address=self.cluster.address,
            namespace=self.namespace,
            log_to_driver=False,
            include_dashboard=False,
        )
        self.head_id = ray.get_runtime_context().get_node_id()

    def ensure_worker(self) -> str:
        """A second node (a fresh one after a test removed the last); returns its node id."""
        if self.worker is None:
            self.worker = self.cluster.add_node(**NODE)
            self.cluster.wait_for_nodes()
        return self.worker.node_id

    def remove_worker(self) -> None:
        """The worker node lost as a machine is: its processes killed at once, the actors'
        worker processes with the raylet (left alone, they would answer for a moment more)."""
        raylet = self.worker.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process
        for pid in _descendants(raylet.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.cluster.remove_node(self.worker, allow_graceful=False)
        self.worker = None

    def alive(self) -> set[str]:
        return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    if ray.is_initialized():
        pytest.skip("a Ray session is already open in this process")
    nodes = TwoNodes()
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.cluster.shutdown()  # the processes this test started; never `ray stop`


def _descendants(pid: int) -> list[int]:
    """The processes under `pid` (from /proc: Ray's cluster tests run on Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _embed_actors(nodes: TwoNodes) -> list[Any]:
    return [
        ray.get_actor(a["name"], namespace=nodes.namespace)
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == nodes.namespace and a["name"].startswith(EMBED_ACTOR_PREFIX)
    ]


def _texts(n: int) -> list[str]:
    words = ["token", "rotate", "policy", "cluster", "vector", "batch", "refresh", "source"]
    return [
        " ".join(words[(i + j) % len(words)] for j in range(3 + i % 5)) + f" n{i}" for i in range(n)
    ]


def _embed_cfg(namespace: str, **ray_cfg: Any) -> EmbedderConfig:
    return EmbedderConfig(
        kind="hash",
        dimension=32,
        batch_size=4,
        executor="ray",
        ray={"namespace": namespace, "num_actors": 2, "num_cpus_per_actor": 0.5, **ray_cfg},
    )


def test_pass_survives_losing_a_node(
    two_nodes: TwoNodes,
    tiny_release: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    from clef_pipelines.clef.backends.ray_pool import RayBackend, shutdown_pool
    from clef_pipelines.clef.client import SyncClefClient
    from clef_pipelines.clef.config import ClefConfig
    from tests.clef.test_wire import body as make_body

    worker_id = two_nodes.ensure_worker()
    nodes = {two_nodes.head_id, worker_id}
    cfg = _embed_cfg(two_nodes.namespace)
    texts = _texts(240)
    batches = [texts[i : i + 4] for i in range(0, len(texts), 4)]
    want = make_embedder(cfg.model_copy(update={"executor": "local"})).embed(texts)

    clef_cfg = ClefConfig(
        backend="ray",
        release_dir=str(tiny_release),
        ray_namespace=two_nodes.namespace,
        ray_num_actors=2,
        ray_num_cpus_per_actor=0.5,
        max_length=4096,
        max_batch=4,
        batch_wait_ms=5,
        cache=False,
    )
    questions = make_body()["questions"]
    with SyncClefClient(clef_cfg, data_dir=tmp_path) as clef:
        clef.ask({"ticket": "before"}, questions)
        backend = clef.backend
        assert isinstance(backend, RayBackend)
        before = ray.get([a.info.remote() for a in backend.actors])
        # Spread: one engine actor on each node.
        assert {i["node_id"] for i in before} == nodes

        got: list[np.ndarray] = []
        with RayEmbedPool(cfg) as pool:
            placement = pool.wait_placed(timeout=120)
            assert set(placement.values()) == nodes  # one embedding actor on each node
            on_worker = [name for name, node in placement.items() if node == worker_id]
            for out in pool.map(batches):
                got.append(out)
                if len(got) == 1:  # mid-pass: the first batch is back, most are still to go
                    two_nodes.remove_worker()
            counters = pool.counters
            # The replacement takes batches once up; the pass may end before it is.
            after_placement = pool.wait_placed(timeout=120)

        # The pass finished on the node left, every batch once, in order, as in-process.
        assert len(got) == len(batches)
        np.testing.assert_array_equal(np.concatenate(got), want)
        assert worker_id not in two_nodes.alive()
        assert counters.nodes_lost == 1
        assert counters.actors_lost == len(on_worker) == 1
        assert counters.batches_retried >= 1  # the lost actor's batches, sent again
        # Its replacement came up on the node left (the cluster had room for it).
        assert counters.actors_replaced == 1
        replacement = set(after_placement) - set(placement)
        assert [after_placement[r] for r in replacement] == [two_nodes.head_id]

        # The Clef engine actor of the lost node was restarted by Ray on the node left, and
        # the pool answers as before.
        answer = clef.ask({"ticket": "after the node loss"}, questions)
        assert set(answer.answers) == set(questions)
        after = ray.get([a.info.remote() for a in backend.actors])
        assert {i["node_id"] for i in after} == {two_nodes.head_id}
        assert sorted(i["restarted"] for i in after) == [False, True]
    assert sorted(shutdown_pool(two_nodes.namespace, disconnect=False)) == [
        "clef-engine-0",
        "clef-engine-1",
    ]


def test_ingestion_run_loses_a_node_mid_embedding(
    two_nodes: TwoNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_id = two_nodes.ensure_worker()
    embedder = {
        "kind": "hash",
        "dimension": 32,
        "batch_size": 2,
        "executor": "ray",
        "ray": {"namespace": two_nodes.namespace, "num_actors": 2, "num_cpus_per_actor": 0.5},
    }
    ws = make_workspace(tmp_path, monkeypatch, embedder=embedder)
    removed: list[int] = []
    placed: list[str] = []

    def lose_the_worker_mid_pass(stage: str, done: int, total: int) -> None:
        # Called in the embedding step as batches come back (this process runs the step).
        if stage == "embed" and 0 < done < total and not removed:
            # Both actors up first, so that the one lost is on the node lost.
            placed.extend(ray.get([a.node_id.remote() for a in _embed_actors(two_nodes)]))
            removed.append(done)
            two_nodes.remove_worker()

    progress.add_listener(lose_the_worker_mid_pass)
    try:
        (report,) = ws.ingest()
    finally:
        progress.remove_listener(lose_the_worker_mid_pass)
    assert report.success, report.error
    assert removed, "the node was never removed: the pass had a single batch"
    assert sorted(placed) == sorted({two_nodes.head_id, worker_id})  # spread over both
    assert worker_id not in two_nodes.alive()
    meta = report.assets["embeddings"]
    assert meta["nodes_lost"] == 1 and meta["actors_lost"] >= 1
    assert meta["batches_retried"] >= 1
    summary = report.summary  # what `clef-pipelines ingest` prints
    assert (summary.nodes_lost, summary.batches_retried) == (1, meta["batches_retried"])
    chunks = report.assets["chunks"]["chunks"]
    assert meta["embedded"] == chunks > 0

    # In the store: every chunk once, with the vector the in-process embedder gives its text.
    records = ws.records()
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == chunks
    store = ws.store()
    try:
        stored = store.get("docs", ids, with_vectors=True)
    finally:
        store.close()
    local = make_embedder(EmbedderConfig(kind="hash", dimension=32))
    for rec in stored:
        np.testing.assert_allclose(
            np.asarray(rec["vector"], dtype=np.float32),
            local.embed([rec["embed_text"]])[0],
            rtol=0,
            atol=1e-6,
        )


JOIN_BY_ADDRESS = """
import json, sys
from clef_pipelines.config import EmbedderConfig
from clef_pipelines.embedding.executor import RayEmbedPool

address, namespace = sys.argv[1], sys.argv[2]
cfg = EmbedderConfig(kind="hash", dimension=32, batch_size=4, executor="ray",
                     ray={"address": address, "namespace": namespace, "num_cpus_per_actor": 0.5})
texts = [f"text number {i}" for i in range(40)]
with RayEmbedPool(cfg) as pool:
    rows = sum(len(out) for out in pool.map([texts[i:i + 4] for i in range(0, 40, 4)]))
    placed = sorted(set(pool.wait_placed(timeout=120).values()))
print(json.dumps({"rows": rows, "nodes": placed}))
"""


def test_joining_by_address_leaves_the_cluster_as_it_was(two_nodes: TwoNodes) -> None:
    """Another driver joins the running cluster by address (the documented path for a real
    cluster), embeds, and leaves: the cluster, its nodes and an actor it did not create are
    all still there, and none of its own actors are."""
    worker_id = two_nodes.ensure_worker()

    @ray.remote(num_cpus=0)
    class Bystander:
        def ping(self) -> str:
            return "pong"

    by = Bystander.options(
        name="not-ours", namespace=two_nodes.namespace, lifetime="detached"
    ).remote()
    assert ray.get(by.ping.remote()) == "pong"
    done = subprocess.run(
        [sys.executable, "-c", JOIN_BY_ADDRESS, two_nodes.cluster.address, two_nodes.namespace],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"rows": 40, "nodes": sorted({two_nodes.head_id, worker_id})}
    assert {two_nodes.head_id, worker_id} <= two_nodes.alive()
    assert ray.get(by.ping.remote()) == "pong"
    deadline = time.monotonic() + 30  # its actors die as it closes; the names go soon after
    while _embed_actors(two_nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _embed_actors(two_nodes)
    ray.kill(by)
