"""A check with nothing new to judge restates its last result for the source it judges.

A check over a step's change (the screen's rates, chunk sizes, enrichment drops, vectors, the
guard's coverage) sees an empty change when a run changed nothing. Passing it then would clear
a failure nobody fixed; leaving it out would show the check skipped. It restates instead: the
check's last result for the partition, with `standing: true` and the run that judged it.
"""

from typing import Any, Protocol

import dagster as dg
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus


class _Context(Protocol):
    @property
    def instance(self) -> dg.DagsterInstance: ...
    @property
    def partition_key(self) -> str: ...


def standing(context: _Context, key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    """The check's last result for this source, restated: the step's change is empty (an
    asset's own check, or a standalone one)."""
    history = context.instance.event_log_storage.get_asset_check_execution_history(
        key,
        limit=1,
        status={AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED},
        partition_filter=PartitionKeyFilter(key=context.partition_key),
    )
    last = history[0].evaluation if history else None
    if last is None:
        return dg.AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=True,
            metadata={"standing": True, "judged": "nothing yet: the source's change was empty"},
        )
    facts: dict[str, Any] = dict(last.metadata or {})
    facts.update(standing=True, judged_in_run=history[0].run_id)
    return dg.AssetCheckResult(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=last.passed,
        severity=last.severity,
        metadata=facts,
    )
