"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


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
