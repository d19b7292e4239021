"""One run per source at a time, kept by the code itself.

The generated instance config (`jobs.launch.ensure_dagster_home`) queues a second run of a
source in the run queue, but only where that dagster.yaml is used: `dg dev` or `dagster dev`
on another Dagster home start every launched run at once, and Dagster has no per-partition
run limit that a code location can declare (pools limit steps by a fixed name, not by
partition). So the first step of an ingestion run waits here, saying so in the run's log,
while an older run of the same source is in progress: whatever launched them, and whatever
instance config, two runs of a source never write at the same time.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import dagster as dg

PID_TAG = "clef/pid"
HOST_TAG = "clef/host"
#: When the process of ``PID_TAG`` started (``process_started``): a pid can be reused.
PID_STARTED_TAG = "clef/pid_started"
PARTITION_TAG = "dagster/partition"


class SourceBusy(Exception):
    """Another run of the same source is still in progress after the wait."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (Linux's /proc); None where
    that cannot be read. With the pid it names one process: pids are reused (32,768 of them
    on many Linux machines), and a run left behind by a killed process must not look alive
    because another process took its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()  # the 22nd field of the whole line: starttime
    except (OSError, IndexError):
        return None


def process_tags() -> dict[str, str]:
    """The tags that name the process running a run (for `wait_for_source` and Ctrl-C)."""
    tags = {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    started = process_started(os.getpid())
    if started is not None:
        tags[PID_STARTED_TAG] = started
    return tags


def _process_gone(tags: dict[str, str]) -> bool:
    """Whether the process a run's tags name, on this host, no longer exists."""
    pid, host = tags.get(PID_TAG), tags.get(HOST_TAG)
    if not pid or host != socket.gethostname():
        return False
    if not _pid_alive(int(pid)):
        return True
    started = tags.get(PID_STARTED_TAG)
    return started is not None and process_started(int(pid)) not in (None, started)


def wait_for_source(
    instance: dg.DagsterInstance,
    source: str,
    *,
    timeout_s: float = 600.0,
    on_wait: Callable[[str], None] | None = None,
    run_id: str | None = None,
) -> None:
    """Block while another run of `source` is in progress (the daemon's queue holds back its
    own runs for as long as this process's run is in progress). A run left behind by a CLI
    process that no longer exists is marked failed instead of waited for.

    `run_id`: the waiting run itself, from inside it: only runs created before it are waited
    for (two runs that started together never wait for each other)."""
    deadline = time.monotonic() + timeout_s
    said: set[str] = set()
    me = instance.get_run_record_by_id(run_id) if run_id else None
    while True:
        active = instance.get_run_records(
            dg.RunsFilter(
                statuses=[
                    dg.DagsterRunStatus.STARTING,
                    dg.DagsterRunStatus.STARTED,
                    dg.DagsterRunStatus.CANCELING,
                ],
                tags={PARTITION_TAG: source},
            )
        )
        blocking = []
        for record in active:
            run = record.dagster_run
            if me is not None and (
                run.run_id == me.dagster_run.run_id
                or record.create_timestamp >= me.create_timestamp
            ):
                continue
            if _process_gone(run.tags):
                instance.report_run_failed(run, "the process that ran it is gone (killed)")
                continue
            blocking.append(run.run_id)
        if not blocking:
            return
        if time.monotonic() > deadline:
            raise SourceBusy(
                f"run {blocking[0]} of source {source!r} is still in progress after "
                f"{timeout_s:.0f} s: wait for it, or terminate it in the UI"
            )
        message = (
            f"waiting for run {blocking[0]} of source {source!r} to finish "
            "(one run per source at a time)"
        )
        if on_wait is not None and message not in said:
            on_wait(message)
            said.add(message)
        time.sleep(1.0)
