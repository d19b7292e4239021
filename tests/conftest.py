"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.objectstore import S3Server


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    dsn = os.environ.get("CLEF_PG_DSN")
    if dsn:
        yield dsn
        return
    from tests.pg import running_postgres

    try:
        cm = running_postgres()
        dsn = cm.__enter__()
    except Exception as exc:  # noqa: BLE001 - reported below
        msg = f"cannot start PostgreSQL + pgvector for the store tests: {exc}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        yield dsn
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 on loopback behind a proxy that can fail chosen requests (tests/objectstore.py);
    one server for the session, a bucket per test (`s3`)."""
    from tests.objectstore import running_s3

    with running_s3() as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):  # noqa: ANN201
    """The session's S3 server with the keys in the environment, and a fresh bucket named
    after the test (`s3.bucket_name`); the proxy's failure rules are cleared afterwards."""
    import re

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    s3_server.bucket_name = s3_server.bucket(f"t-{name}-{os.getpid()}")  # type: ignore[attr-defined]
    s3_server.traffic.reset()
    yield s3_server
    s3_server.heal()


#: The files that take longest, longest first (seconds of test time in one fresh-clone suite run,
#: 6 December, `--junitxml`: 71, 60, 51, 50, 45, 44, 42, 41). `--dist loadfile` hands whole files
#: to the workers in collection order, so a long file collected late ran on one worker while the
#: others had finished; started first, it overlaps the many short files instead.
LONGEST_FILES = (
    "tests/evals/test_clef_systems.py",
    "tests/stores/test_adapters.py",
    "tests/steering/test_screen_pipeline.py",
    "tests/clef/test_ray.py",
    "tests/evals/test_eval_job.py",
    "tests/guard/test_guard_screen.py",
    "tests/ingest/test_object_store.py",
    "tests/stores/test_conformance.py",
)


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    """The longest files first (`LONGEST_FILES`), the rest in collection order (a stable sort:
    within a file, the tests keep their order)."""
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}

    def first(item) -> int:  # type: ignore[no-untyped-def]
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))

    items.sort(key=first)
