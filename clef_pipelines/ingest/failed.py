"""Documents that failed after the inventory (in parsing or chunking), handed to the sync.

Why: the inventory calls a document `changed` from its raw bytes; if it then fails to parse or
chunk, it reaches the sync with no chunks, exactly like a document that now yields none. The
first must keep what the store holds for it (one broken document never loses its records),
the second must lose its stale records and be remembered as storing nothing (so the next run
sees it as unchanged). Each step writes its failures (even none) beside the run's staging
data; the sync reads them. When a step's file is missing (a step re-executed in another run,
say), the sync does not know, and leaves every document without chunks as it is.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

#: The steps whose failures the sync needs, in pipeline order.
FAILING_STEPS = ("parsed_blocks", "chunks")


def failed_path(staging: Path, step: str) -> Path:
    return staging / "failed" / f"{step}.parquet"


def write_failed(staging: Path, step: str, failures: pl.DataFrame) -> None:
    """Keep a step's failed document ids (a frame with `doc_id`) for the sync."""
    path = failed_path(staging, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = failures.select(pl.col("doc_id").cast(pl.Utf8)) if failures.height else None
    (ids if ids is not None else pl.DataFrame(schema={"doc_id": pl.Utf8})).write_parquet(path)


def read_failed(staging: Path) -> frozenset[str] | None:
    """The ids of documents that failed in any of `FAILING_STEPS`; None when a step's record
    is missing (not known)."""
    out: set[str] = set()
    for step in FAILING_STEPS:
        path = failed_path(staging, step)
        if not path.is_file():
            return None
        out.update(pl.read_parquet(path)["doc_id"].to_list())
    return frozenset(out)
