"""The `ray` backend on a local Ray with 2 CPUs: named detached actors in our namespace,
batched per actor, persisting across clients, shut down explicitly (only ours)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from clef_pipelines.clef.backends.ray_pool import ACTOR_PREFIX, local_ray_env, shutdown_pool
from clef_pipelines.clef.client import SyncClefClient
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.engine import Engine
from clef_pipelines.clef.errors import ClefRequestTooLarge
from clef_pipelines.clef.wire import parse_request
from tests.clef.test_wire import body as make_body

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def namespace() -> str:
    return f"clef-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def ray_session(namespace: str):  # type: ignore[no-untyped-def]
    if ray.is_initialized():
        pytest.skip("a Ray session is already open in this process")
    local_ray_env()
    ray.init(num_cpus=2, namespace=namespace, include_dashboard=False, log_to_driver=False)
    try:
        yield namespace
    finally:
        # Kill only what this test started, then disconnect (which stops the local Ray
        # that ray.init started for this process); never `ray stop`.
        if ray.is_initialized():
            shutdown_pool(namespace, disconnect=False)
            ray.shutdown()


def test_ray_pool_end_to_end(ray_session: str, tiny_release: Path, tmp_path: Path) -> None:
    namespace = ray_session
    cfg = ClefConfig(
        backend="ray",
        release_dir=str(tiny_release),
        ray_namespace=namespace,
        ray_num_actors=2,
        ray_num_cpus_per_actor=1,
        ray_local_num_cpus=2,
        max_length=4096,
        max_batch=8,
        batch_wait_ms=20,
        cache=False,
    )
    questions = make_body()["questions"]
    states = [{"ticket": f"ticket {i}"} for i in range(6)]
    with SyncClefClient(cfg, data_dir=tmp_path) as c:
        out = c.ask_many([(s, questions) for s in states])
        assert all(not isinstance(r, Exception) for r in out), out
        assert c.usage.snapshot()["cost_usd"] == 0.0
        with pytest.raises(ClefRequestTooLarge):  # refused before leaving the driver
            c.ask("x" * 10_000, questions)
        pids = ray.get([a.info.remote() for a in c.backend.actors])
        sizes = [b.batch_sizes for b in c.backend._batchers]
    assert len({p["pid"] for p in pids}) == 2  # two actors, two processes
    assert sum(map(sum, sizes)) == 6
    assert all(p["device"] == "cpu" and p["dtype"] == "float32" for p in pids)

    # Same answers as the in-process engine on the same release.
    engine = Engine(tiny_release, device="cpu", max_length=4096)
    for s, got in zip(states, out, strict=True):
        want = engine.answer_batch([parse_request(make_body(state=s))])[0]
        for qid, a in want["answers"].items():
            for opt, p in a.get("probabilities", {}).items():
                assert got.answers[qid].probabilities[opt] == pytest.approx(p, abs=2e-3)

    # A later run (a new client) finds the same detached actors instead of starting new ones.
    with SyncClefClient(cfg, data_dir=tmp_path) as c:
        c.ask({"ticket": "again"}, questions)
        again = ray.get([a.info.remote() for a in c.backend.actors])
    # The same two processes, in whatever order the new client lists them (it was sorted by the
    # text of each actor's info, which holds more than its pid, and failed once in CI).
    assert sorted(p["pid"] for p in again) == sorted(p["pid"] for p in pids)

    # `serve --ray`: the HTTP server answers through the same pool.
    import httpx

    from clef_pipelines.clef.backends.ray_pool import RayBackend
    from clef_pipelines.clef.serve import build_app
    from tests.clef.conftest import ServedApp

    backend = RayBackend(
        "clef",
        release_dir=str(tiny_release),
        address=None,
        namespace=namespace,
        num_actors=2,
        num_gpus_per_actor=None,
        num_cpus_per_actor=1,
        device=None,
        max_length=4096,
        max_batch=8,
        batch_wait_ms=5,
    )
    with ServedApp(build_app(backend, api_key="k")) as server:
        r = httpx.post(
            server.base_url + "/v1/systemone",
            json=make_body(),
            headers={"authorization": "Bearer k"},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert set(r.json()["answers"]) == set(questions)
        r = httpx.post(
            server.base_url + "/v1/systemone",
            json=make_body(state="s" * 5000),
            headers={"authorization": "Bearer k"},
            timeout=120,
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "state"

    # Shutdown kills our actors only: an actor of someone else's (other name, or the same
    # name in another namespace) survives.
    @ray.remote(num_cpus=0)
    class Bystander:
        def ping(self) -> str:
            return "pong"

    other_ns = f"{namespace}-other"
    by1 = Bystander.options(name="not-clef", namespace=namespace, lifetime="detached").remote()
    by2 = Bystander.options(
        name=f"{ACTOR_PREFIX}0", namespace=other_ns, lifetime="detached"
    ).remote()
    assert ray.get([by1.ping.remote(), by2.ping.remote()]) == ["pong", "pong"]

    killed = shutdown_pool(namespace, disconnect=False)
    assert sorted(killed) == [f"{ACTOR_PREFIX}0", f"{ACTOR_PREFIX}1"]
    names = {(a["namespace"], a["name"]) for a in ray.util.list_named_actors(all_namespaces=True)}
    assert (namespace, "not-clef") in names and (other_ns, f"{ACTOR_PREFIX}0") in names
    assert not any(ns == namespace and n.startswith(ACTOR_PREFIX) for ns, n in names)
    assert ray.get(by1.ping.remote()) == "pong"
    ray.kill(by1)
    ray.kill(by2)
