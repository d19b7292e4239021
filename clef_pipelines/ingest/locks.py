"""One writer per collection: a lock file that two ingests into one collection share.

LanceDB refuses a second concurrent commit ("commit conflict") and a half-finished sync of one
run seen by another would mix their plans, so an ingest holds `<data_dir>/locks/<collection>
.lock` while it writes: the sync and its upkeep, the index step's build, the inventory's
finishing of upkeep a killed run left. (What still conflicts, a writer that does not take the
lock, is retried: `stores.retry`.) A second ingest says that it waits, waits up to `timeout_s`, and then
fails with one line, having written nothing. The lock is an OS file lock (flock): a killed
holder releases it at once. It serialises processes that share the data folder; stores on a
server that several machines write to need the server's own concurrency control.

The Dagster instance folder is made under a lock of its own, so two first runs in a fresh data
folder do not race to create the same sqlite tables.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from clef_pipelines.redact import redacting_logger

log = redacting_logger("clef_pipelines.ingest")


class CollectionBusy(RuntimeError):
    """Another ingest held the collection's lock for longer than the configured wait."""


def lock_path(data_dir: str | os.PathLike[str], name: str) -> Path:
    folder = Path(data_dir) / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.lock"


def _say(message: str) -> None:
    """A wait is never silent, whatever logging a host (Dagster, the CLI) has set up."""
    log.info("%s", message)
    print(f"waiting: {message}", file=sys.stderr, flush=True)


def _file_lock(path: Path) -> FileLock:
    # One instance per path in a process (is_singleton) and reentrant across threads, so the
    # run-level lock and the store_sync lock of the same in-process run nest instead of
    # deadlocking on the same file.
    return FileLock(str(path), is_singleton=True, thread_local=False)


@contextmanager
def held(
    path: Path,
    *,
    what: str,
    timeout_s: float,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the lock file `path`; say so once and wait up to `timeout_s` when it is taken."""
    lock = _file_lock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        message = (
            f"another ingest is writing to {what}; waiting up to {timeout_s:g} s for it "
            f"(lock {path})"
        )
        (on_wait or _say)(message)
        try:
            lock.acquire(timeout=timeout_s)
        except Timeout:
            raise CollectionBusy(
                f"{what} is busy: another ingest held {path} for over {timeout_s:g} s "
                "(ingest_lock_timeout_s); nothing was written, run again when it is done"
            ) from None
    try:
        yield
    finally:
        lock.release()


@contextmanager
def collection_lock(
    data_dir: str | os.PathLike[str],
    collection: str,
    *,
    timeout_s: float,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the collection's write lock (see the module docstring)."""
    with held(
        lock_path(data_dir, f"collection-{collection}"),
        what=f"collection {collection!r}",
        timeout_s=timeout_s,
        on_wait=on_wait,
    ):
        yield
