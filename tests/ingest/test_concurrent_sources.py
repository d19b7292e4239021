"""Issue 57, must-hold 1: sources of one collection run at once, as a backfill or the daemon
launches them (runs of `ingestion_job` in processes of their own, with no CLI lock around the
run), and no run fails on a store conflict: the index step and the upkeep take the collection's
lock, the store's retryable conflicts are retried, and the store ends equal to the sources
ingested one after the other."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from clef_pipelines.config import Settings, load_settings

# Many processes at once: the stress lane (`make test-stress`), after the suite.
pytestmark = pytest.mark.stress

SOURCES = ("alpha", "beta", "gamma")
ROUNDS = int(os.environ.get("CLEF_TEST_CONCURRENT_ROUNDS", "20"))


def _write_sources(root: Path) -> list[dict[str, str]]:
    """Three small generated sources: a few Markdown files of a few paragraphs each."""
    out = []
    for n, name in enumerate(SOURCES):
        folder = root / name
        folder.mkdir(parents=True)
        for d in range(4):
            paragraphs = [
                f"Paragraph {p} of document {d} in source {name}: "
                + " ".join(f"word{(n * 31 + d * 7 + p * 3 + w) % 97}" for w in range(60))
                for p in range(5)
            ]
            text = f"# {name} document {d}\n\n" + "\n\n".join(paragraphs) + "\n"
            (folder / f"doc{d}.md").write_text(text)
        out.append({"name": name, "path": str(folder)})
    return out


def _config(root: Path, data: Path, sources: list[dict[str, str]]) -> Path:
    raw: dict[str, Any] = {
        "data_dir": str(data),
        "collection": "shared",
        "sources": sources,
        "embedder": {"kind": "hash", "dimension": 32},
        "store": {"kind": "lancedb"},
        "steering": {"guard": {"mode": "off"}},
    }
    path = root / f"{data.name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _into(settings: Settings, collection: str) -> Settings:
    """The settings with every source sent to `collection`."""
    sources = [s.model_copy(update={"collection": collection}) for s in settings.sources]
    return settings.model_copy(update={"sources": sources})


def _run_rounds(config: str, source: str, rounds: int, barrier: Any, failures: Any) -> None:
    """One process: `rounds` first runs of `source`, each into a fresh collection, every round
    started together with the other sources' processes (the run a daemon or a backfill
    launches: the job in process, in a Dagster instance of its own, no CLI lock)."""
    import dagster as dg

    from clef_pipelines.jobs.launch import run_config
    from clef_pipelines.jobs.location import build_definitions, build_resources
    from clef_pipelines.jobs.results import root_message

    settings = load_settings(config)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sources", [source])
    for r in range(rounds):
        here = _into(settings, f"round{r}")
        job = build_definitions(here).resolve_job_def("ingestion_job")
        resources = build_resources(here)
        barrier.wait(timeout=300)
        result = job.execute_in_process(
            partition_key=source,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            run_config=run_config(log_level="ERROR"),
        )
        if not result.success:
            errors = [
                f"{e.step_key}: {root_message(e.step_failure_data.error)[:300]}"  # type: ignore[union-attr]
                for e in result.all_events
                if e.is_step_failure
            ]
            failures.put(f"round {r}, source {source}: {errors}")


def _records(settings: Settings, collection: str) -> dict[str, tuple[str, tuple[float, ...]]]:
    from clef_pipelines.stores import open_store

    store = open_store(settings.store, settings.data_path)
    try:
        ids = store.list_ids(collection)
        return {
            r["id"]: (r["text"], tuple(round(float(x), 6) for x in r["vector"]))
            for r in store.get(collection, ids, with_vectors=True)
        }
    finally:
        store.close()


@pytest.mark.timeout(900)
def test_three_sources_of_one_collection_at_once_never_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clef_pipelines.jobs.launch import run_ingestion

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    sources = _write_sources(tmp_path / "sources")

    # The sequential build: the three sources one after the other.
    sequential = load_settings(_config(tmp_path, tmp_path / "sequential", sources))
    reports = run_ingestion(sequential, list(SOURCES))
    assert all(r.success for r in reports), [r.error for r in reports]
    expected = _records(sequential, "shared")
    assert len(expected) > 30

    config = str(_config(tmp_path, tmp_path / "concurrent", sources))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(SOURCES))
    failures = ctx.Queue()
    procs = [
        ctx.Process(target=_run_rounds, args=(config, s, ROUNDS, barrier, failures))
        for s in SOURCES
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=840)
    failed = []
    while not failures.empty():
        failed.append(failures.get())
    assert not failed, "\n".join(failed)
    assert [p.exitcode for p in procs] == [0] * len(SOURCES)

    concurrent = load_settings(config)
    for r in range(ROUNDS):
        assert _records(concurrent, f"round{r}") == expected, f"round {r}"
