"""A persistent answer cache in sqlite (WAL): safe for several processes and runs at once.

The key covers everything that decides the answer: backend, model, state, images and the
questions in order (question order is part of the prompt, so it is part of the key).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from clef_pipelines.clef.wire_common import canonical_json

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(backend: str, model: str, request_wire: dict[str, Any]) -> str:
    questions = [[qid, q] for qid, q in request_wire["questions"].items()]
    material = canonical_json(
        {
            "backend": backend,
            "model": model,
            "state": request_wire.get("state"),
            "images": request_wire.get("images") or [],
            "questions": questions,
        }
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


class AnswerCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # One connection used under a lock: sqlite calls here take microseconds, and a
        # thread-shared connection keeps the sync facade and the event loop on one handle.
        self._db = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.execute(_SCHEMA)
            self._db.commit()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM answers WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, backend: str, model: str, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO answers (key, backend, model, body, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, backend, model, data, time.time()),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def clear(self) -> None:
        with self._lock:
            self._db.execute("DELETE FROM answers")
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()
