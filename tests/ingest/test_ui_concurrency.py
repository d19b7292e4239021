"""Through the UI's path (the webserver's GraphQL API, the daemon's run queue): two launches of
the same source at once run one after the other; the launchpad's config is typed; the code
location is `clef_pipelines` and the asset keys carry the `clef/` prefix."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.ingest.conftest import Workspace
from tests.ingest.ui import dagster_dev, gql

# A real `dagster dev` (webserver, daemon, code server) and the two runs' processes at once:
# the stress lane, like the UI's other tests (test_ui_backfill, test_ui_stop).
pytestmark = pytest.mark.stress

DONE = {"SUCCESS", "FAILURE", "CANCELED"}


def test_two_launches_of_one_source_are_serialised_by_the_run_queue(
    workspace: Workspace,
) -> None:
    # The generated dagster.yaml (with the run queue's limit) is written first.
    with dagster_dev(workspace) as port:
        nodes = gql(port, "{ assetNodes { assetKey { path } } }")["assetNodes"]
        assert nodes and all(n["assetKey"]["path"][0] == "clef" for n in nodes)
        selector = {
            "repositoryLocationName": "clef_pipelines",
            "repositoryName": "__repository__",
            "jobName": "ingestion_job",
        }
        # The launchpad's config: typed fields, no JSON string.
        schema = gql(
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
            launched = gql(
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
                gql(
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
