"""Through the UI's path (the webserver's GraphQL API, the daemon's backfill and run queue): an
asset backfill of a source where nothing changed ends green, and the catalog shows the
partition materialised in every asset, none failed."""

from __future__ import annotations

import time
from typing import Any

import pytest

from clef_pipelines.assets.ingestion import ingestion_assets
from tests.ingest.conftest import Workspace
from tests.ingest.ui import dagster_dev, gql

# Many processes at once: the stress lane (`make test-stress`), after the suite.
pytestmark = pytest.mark.stress

TERMINAL = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}


def _asset_keys() -> list[dict[str, Any]]:
    return [{"path": list(a.key.path)} for a in ingestion_assets]


def _wait_for_backfill(port: int, backfill_id: str, timeout_s: float = 400) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        backfill = gql(
            port,
            """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
                 __typename ... on PartitionBackfill { id status
                   runs(limit: 10) { runId status } } } }""",
            id=backfill_id,
        )["partitionBackfillOrError"]
        assert backfill["__typename"] == "PartitionBackfill", backfill
        if backfill["status"] in TERMINAL:
            return backfill
        assert time.monotonic() < deadline, backfill
        time.sleep(1)


def _wait_for_run(port: int, run_id: str, timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = gql(
            port,
            """query($id: ID!) { runOrError(runId: $id) { ... on Run { runId status
                 assetMaterializations { assetKey { path } } } } }""",
            id=run_id,
        )["runOrError"]
        if run["status"] in {"SUCCESS", "FAILURE", "CANCELED"}:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(1)


def test_no_change_asset_backfill_from_the_ui_ends_green(workspace: Workspace) -> None:
    (first,) = workspace.ingest()  # the CLI's run: the source is in the store, nothing to do
    assert first.success, first.error
    with dagster_dev(workspace) as port:
        launched = gql(
            port,
            """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
                 __typename ... on LaunchBackfillSuccess { backfillId }
                 ... on PythonError { message } } }""",
            # What the asset graph's "Materialize all" over one partition sends.
            p={"assetSelection": _asset_keys(), "partitionNames": ["sample"]},
        )["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        backfill = _wait_for_backfill(port, launched["backfillId"])
        assert backfill["status"] in {"COMPLETED_SUCCESS", "COMPLETED"}, backfill
        assert backfill["runs"] and all(r["status"] == "SUCCESS" for r in backfill["runs"])

        # The catalog: the partition is materialised in every asset, failed in none.
        nodes = gql(
            port,
            """{ assetNodes(group: {groupName: "ingestion", repositoryName: "__repository__",
                   repositoryLocationName: "clef_pipelines"}) {
                 assetKey { path }
                 partitionStats { numMaterialized numFailed numMaterializing numPartitions } } }""",
        )["assetNodes"]
        stats = {"/".join(n["assetKey"]["path"]): n["partitionStats"] for n in nodes}
        assert set(stats) == {a.key.to_user_string() for a in ingestion_assets}
        for key, s in stats.items():
            assert s == {
                "numMaterialized": 1,
                "numFailed": 0,
                "numMaterializing": 0,
                "numPartitions": 1,
            }, key
        # The backfill's run says nothing changed.
        (run,) = backfill["runs"]
        events = gql(
            port,
            """query($id: ID!) { runOrError(runId: $id) { ... on Run {
                 assetMaterializations { assetKey { path }
                   metadataEntries { label ... on BoolMetadataEntry { boolValue } } } } } }""",
            id=run["runId"],
        )["runOrError"]["assetMaterializations"]
        changed = {
            "/".join(m["assetKey"]["path"]): e["boolValue"]
            for m in events
            for e in m["metadataEntries"]
            if e["label"] == "changed"
        }
        assert changed and not any(changed.values()), changed

        # A check runs alone for one partition, as the UI's "Execute" on a check launches it.
        check = {"assetKey": {"path": ["clef", "embeddings"]}, "name": "every_chunk_embedded"}
        launched = gql(
            port,
            """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
                 __typename ... on LaunchRunSuccess { run { runId } }
                 ... on PythonError { message } } }""",
            p={
                "selector": {
                    "repositoryLocationName": "clef_pipelines",
                    "repositoryName": "__repository__",
                    "pipelineName": "__ASSET_JOB",
                    "assetSelection": [],
                    "assetCheckSelection": [check],
                },
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "sample"}]},
            },
        )["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        alone = _wait_for_run(port, launched["run"]["runId"])
        assert alone["status"] == "SUCCESS", alone
        assert alone["assetMaterializations"] == []  # the check alone: no asset ran

        # The resources show the settings they use as typed fields (no JSON string).
        resources = gql(
            port,
            """query($r: RepositorySelector!) { allTopLevelResourceDetailsOrError(
                 repositorySelector: $r) { ... on ResourceDetailsList { results {
                   name configuredValues { key value type } } } } }""",
            r={"repositoryLocationName": "clef_pipelines", "repositoryName": "__repository__"},
        )["allTopLevelResourceDetailsOrError"]["results"]
        shown = {
            r["name"]: {v["key"]: v["value"] for v in r["configuredValues"]} for r in resources
        }
        settings = workspace.settings()
        assert shown["vector_store"]["kind"] == '"lancedb"'
        assert str(settings.data_path / "lancedb") in shown["vector_store"]["location"]
        assert shown["embedder"]["kind"] == '"hash"' and shown["embedder"]["dimension"] == "64"
        assert "backend" in shown["clef"]
