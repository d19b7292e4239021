"""Through the UI's path (the webserver's GraphQL API, the daemon's run queue): two launches of
the same source at once run one after the other; the launchpad's config is typed; the code
location is `clef_pipelines` and the asset keys carry the `clef/` prefix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx

from clef_pipelines.jobs.launch import ensure_dagster_home
from tests.ingest.conftest import REPO, Workspace
from tests.pg import free_port

DONE = {"SUCCESS", "FAILURE", "CANCELED"}


def _gql(port: int, query: str, **variables: Any) -> dict[str, Any]:
    r = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query, "variables": variables},
        timeout=60,
    )
    assert r.status_code == 200, r.text[-2000:]
    body = r.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]


def test_two_launches_of_one_source_are_serialised_by_the_run_queue(
    workspace: Workspace,
) -> None:
    ensure_dagster_home(workspace.settings())  # the generated dagster.yaml with the limit
    ws_file = workspace.root / "workspace.yaml"
    ws_file.write_text(
        "load_from:\n  - python_module:\n      module_name: clef_pipelines.definitions\n"
        f"      location_name: clef_pipelines\n      working_directory: {REPO}\n"
    )
    port = free_port()
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(workspace.root / "dagster"),
        CLEF_PIPELINES_CONFIG=str(workspace.config_path),
        DAGSTER_DG_UPDATE_CHECK_ENABLED="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    # Its output goes to a file, not a pipe: the runs it starts inherit the stream, and a pipe
    # nobody reads while the test polls fills up and blocks a run's next log line for good.
    log = (workspace.root / "dagster-dev.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", str(ws_file), "-h", "127.0.0.1"]
        + ["-p", str(port)],
        env=env,
        cwd=str(workspace.root),
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (workspace.root / "dagster-dev.log").read_text()[-3000:]
            try:
                nodes = _gql(port, "{ assetNodes { assetKey { path } } }")["assetNodes"]
                if nodes:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "webserver did not answer"
            time.sleep(1)
        assert all(n["assetKey"]["path"][0] == "clef" for n in nodes)
        selector = {
            "repositoryLocationName": "clef_pipelines",
            "repositoryName": "__repository__",
            "jobName": "ingestion_job",
        }
        # The launchpad's config: typed fields, no JSON string.
        schema = _gql(
            port,
            """query($s: PipelineSelector!) { runConfigSchemaOrError(selector: $s) {
                 ... on RunConfigSchema { rootConfigType { key }
                   allConfigTypes { key ... on CompositeConfigType { fields { name } } } } } }""",
            s={
                "repositoryLocationName": "clef_pipelines",
                "repositoryName": "__repository__",
                "pipelineName": "ingestion_job",
            },
        )["runConfigSchemaOrError"]
        field_names = {f["name"] for t in schema["allConfigTypes"] for f in t.get("fields") or []}
        assert {"force", "force_documents", "clef__source_documents"} <= field_names

        run_ids = []
        for n in range(2):
            launched = _gql(
                port,
                """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
                     __typename ... on LaunchRunSuccess { run { runId } }
                     ... on PythonError { message } } }""",
                p={
                    "selector": selector,
                    "runConfigData": {
                        "ops": {"clef__source_documents": {"config": {"force": n == 0}}}
                    },
                    "executionMetadata": {
                        "tags": [{"key": "dagster/partition", "value": "sample"}]
                    },
                },
            )["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            run_ids.append(launched["run"]["runId"])

        runs: list[dict[str, Any]] = []
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            runs = [
                _gql(
                    port,
                    """query($id: ID!) { runOrError(runId: $id) {
                         ... on Run { runId status startTime endTime } } }""",
                    id=run_id,
                )["runOrError"]
                for run_id in run_ids
            ]
            assert sum(r["status"] == "STARTED" for r in runs) <= 1, runs
            if all(r["status"] in DONE for r in runs):
                break
            time.sleep(0.5)
        assert all(r["status"] == "SUCCESS" for r in runs), runs
        first, second = sorted(runs, key=lambda r: r["startTime"])
        assert first["endTime"] <= second["startTime"], runs  # one after the other
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
