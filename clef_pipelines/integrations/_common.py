"""What the framework adapters share: passages in, kept passages out, with their scores."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from clef_pipelines.steering.candidates import Candidate

T = TypeVar("T")

#: Metadata keys a framework document carries from a kept passage. `vector_score` is the
#: recall score's old name, kept for older callers (`recall_score_kind` says what it holds).
SCORE_KEYS = (
    "n",
    "id",
    "citation",
    "doc_id",
    "recall_score",
    "recall_score_kind",
    "vector_score",
    "scores",
    "conflict",
)


def passage_metadata(n: int, c: Candidate) -> dict[str, Any]:
    """A kept passage's number in the prompt, citation and every score, for the framework's
    document metadata (JSON-ready). `source` is where the text came from (its source URI,
    else its citation): the key LangChain's loaders and chains read."""
    d = c.as_dict()
    out = {k: d[k] for k in SCORE_KEYS if k in d and k != "n"}
    out["n"] = n
    out["conflict"] = bool(c.conflict)
    out["source"] = d.get("source_uri") or d.get("citation")
    out["source_uri"] = d.get("source_uri")
    out["section_path"] = d.get("section_path")
    return out


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, even when the caller's thread has a running loop
    (notebooks, async frameworks calling sync hooks): then it runs on a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
