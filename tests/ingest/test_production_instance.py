"""The production instance (`deploy.instance_config`: PostgreSQL storage, the queued run
coordinator with one run per source, the default run launcher) with the processes a deployment
runs, started with the image's own commands (`deploy.code_server_command`, `webserver_command`,
`daemon_command`): a code server, a webserver and a daemon on the tests' PostgreSQL. Through
GraphQL, a backfill of three sources runs beside the sensor's own runs of them, each run its
own process and each step its own (`executor: multiprocess`), and the daemon restarts on the
way. All succeed; the run storage shows at most one run per source at a time; the sensor's
cursor survives the restart."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dagster as dg
import httpx
import pytest
import yaml

from clef_pipelines.assets.ingestion import ingestion_assets
from clef_pipelines.config_deploy import DeploySettings
from clef_pipelines.deploy import (
    LOCATION_NAME,
    PARTITION_TAG,
    PG_ENV,
    code_server_command,
    daemon_command,
    instance_yaml,
    webserver_command,
    workspace_config,
)
from tests.ingest.conftest import REPO, SAMPLE_CORPUS
from tests.ingest.ui import REPOSITORY, gql
from tests.pg import free_port, running_postgres

# Many processes at once (three servers, six runs, a process per step): the stress lane.
pytestmark = [pytest.mark.stress, pytest.mark.postgres, pytest.mark.timeout(2400)]

SOURCES = ("alpha", "beta", "gamma")
SENSOR = "source_change_sensor"
BIN = Path(sys.executable).parent


@pytest.fixture
def storage(tmp_path: Path, s3: Any) -> dict[str, Any]:
    """Where the runs keep their intermediates and the store: a bucket on the tests' S3
    server (moto on loopback), as a deployment whose runs share no disk keeps them; the one
    place this test says where (a local `data_dir` runs the same test)."""
    return {
        "data_dir": f"s3://{s3.bucket_name}/state",
        "object_store": s3.settings(),
        "local_dir": str(tmp_path / "scratch"),
    }


@pytest.fixture
def instance_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A Dagster home holding the production dagster.yaml, and the environment that points
    it at the tests' PostgreSQL (the DAGSTER_PG_* variables it reads); set in this process
    too, so the test reads the same run storage."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_yaml(DeploySettings()), encoding="utf-8")
    with running_postgres() as dsn:
        url = urlparse(dsn)
        env = {
            PG_ENV["hostname"]: url.hostname or "127.0.0.1",
            PG_ENV["port"]: str(url.port),
            PG_ENV["username"]: url.username or "postgres",
            PG_ENV["password"]: url.password or "",
            PG_ENV["db_name"]: url.path.lstrip("/"),
            "DAGSTER_HOME": str(home),
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield env


def _config(root: Path, storage: dict[str, Any]) -> Path:
    sources = []
    for i, name in enumerate(SOURCES):
        folder = root / "corpus" / name
        folder.mkdir(parents=True)
        for doc in sorted(SAMPLE_CORPUS.iterdir())[i : i + 2]:
            shutil.copy(doc, folder / doc.name)
        # A collection each: the three sources' runs may run at once.
        sources.append({"name": name, "path": str(folder), "collection": name})
    cfg = root / "clef-pipelines.yaml"
    raw = {
        **storage,
        "sources": sources,
        "embedder": {"kind": "hash", "dimension": 64},
        "store": {"kind": "lancedb"},
        "steering": {"guard": {"mode": "off"}},
        "executor": "multiprocess",
    }
    cfg.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return cfg


def container_signals() -> None:
    """SIGINT and SIGTERM at their defaults, as a container's process has them (a runner in the
    background passes them on ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Processes:
    """The deployment's long-running processes, each in a process group of its own, its
    output in a file (a pipe nobody reads would block the runs that inherit it)."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root, self.env = root, env
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [str(BIN / argv[0]), *argv[1:]],  # the image's command, from this environment
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=container_signals,
        )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def alive(self, name: str) -> None:
        proc = self.procs[name]
        assert proc.poll() is None, (self.root / f"{name}.log").read_text()[-3000:]

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


def _wait(what: str, check: Any, timeout_s: float, procs: Processes) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        for name in procs.procs:
            procs.alive(name)
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(2)


def _sensor_state(port: int) -> dict[str, Any]:
    sensor = gql(
        port,
        """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
             __typename ... on PythonError { message }
             ... on Sensor { sensorState { status
               typeSpecificData { ... on SensorData { lastCursor } }
               ticks(limit: 20) { status timestamp cursor runIds } } } } }""",
        s={
            "repositoryLocationName": LOCATION_NAME,
            "repositoryName": REPOSITORY,
            "sensorName": SENSOR,
        },
    )["sensorOrError"]
    assert sensor["__typename"] == "Sensor", sensor
    return sensor["sensorState"]


def _cursor(port: int) -> dict[str, Any] | None:
    raw = _sensor_state(port)["typeSpecificData"]["lastCursor"]
    return json.loads(raw) if raw else None


def _backfill(port: int, backfill_id: str) -> dict[str, Any] | None:
    backfill = gql(
        port,
        """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
             ... on PartitionBackfill { status runs(limit: 10) { runId status } } } }""",
        id=backfill_id,
    )["partitionBackfillOrError"]
    return backfill if backfill["status"] not in {"REQUESTED"} else None


def _overlaps(records: list[dg.RunRecord]) -> list[tuple[str, str]]:
    """Pairs of runs of one source whose [start, end] intervals overlap."""
    spans = sorted((r.start_time or 0.0, r.end_time or 0.0, r.dagster_run.run_id) for r in records)
    return [(a[2], b[2]) for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1]]


def test_daemon_and_webserver_on_postgres_run_backfills_one_run_per_source(
    tmp_path: Path, storage: dict[str, Any], instance_env: dict[str, str]
) -> None:
    config = _config(tmp_path, storage)
    code_port, web_port = free_port(), free_port()
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(workspace_config(host="127.0.0.1", port=code_port)), encoding="utf-8"
    )
    env = dict(os.environ)
    env.update(instance_env)
    env.update(
        CLEF_PIPELINES_CONFIG=str(config),
        DAGSTER_DG_UPDATE_CHECK_ENABLED="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    procs = Processes(tmp_path, env)
    try:
        procs.start("code", code_server_command(host="127.0.0.1", port=code_port))
        procs.start("webserver", webserver_command(str(workspace), "127.0.0.1", web_port))
        procs.start("daemon", daemon_command(str(workspace)))
        _wait(
            "the webserver and the code location",
            lambda: gql(web_port, "{ assetNodes { id } }")["assetNodes"],
            240,
            procs,
        )
        # The sensor's first tick (the daemon runs it at once) adds the three partitions and
        # requests a run of each: nothing of them is ingested yet.
        first = _wait("the sensor's first runs", lambda: _cursor(web_port), 240, procs)
        assert first["#requested"] == len(SOURCES), first

        # A backfill of the same three sources, while the sensor's runs are queued or going.
        launched = gql(
            web_port,
            """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
                 __typename ... on LaunchBackfillSuccess { backfillId }
                 ... on PythonError { message } } }""",
            p={
                "assetSelection": [{"path": list(a.key.path)} for a in ingestion_assets],
                "partitionNames": list(SOURCES),
            },
        )["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        # The daemon restarts while those runs are queued or going. The sensor's next tick
        # reads its cursor from PostgreSQL: its count of requests goes on (a lost cursor would
        # start again at 0) and it requests nothing, since no file changed (a lost cursor
        # would request all three again, none of them being ingested yet).
        before = _cursor(web_port)
        assert before is not None and before["#requested"] == len(SOURCES)
        procs.stop("daemon")
        restarted = time.time()
        procs.start("daemon", daemon_command(str(workspace)))

        def tick_after_restart() -> dict[str, Any] | None:
            ticks = _sensor_state(web_port)["ticks"]
            done = [t for t in ticks if t["timestamp"] > restarted and t["status"] != "STARTED"]
            return done[0] if done else None

        tick = _wait("a sensor tick after the restart", tick_after_restart, 240, procs)
        assert tick["status"] == "SKIPPED" and not tick["runIds"], tick
        assert _cursor(web_port) == before

        backfill = _wait(
            "the backfill", lambda: _backfill(web_port, launched["backfillId"]), 1500, procs
        )

        with dg.DagsterInstance.get() as instance:

            def finished() -> list[dg.RunRecord] | None:
                records = instance.get_run_records()
                done = len(records) >= 2 * len(SOURCES)
                return records if done and all(r.dagster_run.is_finished for r in records) else None

            records = _wait("every run to finish", finished, 600, procs)
            assert backfill["status"] in {"COMPLETED", "COMPLETED_SUCCESS"}, backfill
            failed = [r.dagster_run.run_id for r in records if not r.dagster_run.is_success]
            assert not failed, failed
            by_source: dict[str, list[dg.RunRecord]] = {}
            for record in records:
                by_source.setdefault(record.dagster_run.tags[PARTITION_TAG], []).append(record)
            # The sensor's run and the backfill's run of each source, no more.
            assert {s: len(r) for s, r in by_source.items()} == dict.fromkeys(SOURCES, 2)
            # One at a time per source: the queue held the second run until the first ended
            # (the code's own wait, `jobs.source_runs`, would let both start).
            for source, runs in by_source.items():
                assert not _overlaps(runs), (source, _overlaps(runs))
            # Each step ran in a process of its own (the multiprocess executor).
            for record in records:
                starts = [
                    e
                    for e in instance.all_logs(record.dagster_run.run_id)
                    if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"
                ]
                steps = {e.step_key for e in starts}
                pids = {e.dagster_event.pid for e in starts if e.dagster_event}
                assert len(steps) >= len(ingestion_assets), steps
                assert len(pids) == len(steps), (record.dagster_run.run_id, pids)

    finally:
        procs.stop_all()
