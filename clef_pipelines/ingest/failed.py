"""Documents that failed after the inventory (in parsing or chunking), handed to the sync.

Why: the inventory calls a document `changed` from its raw bytes; if it then fails to parse or
chunk, it reaches the sync with no chunks, exactly like a document that now yields none. The
first must keep what the store holds for it (one broken document never loses its records),
the second must lose its stale records and be remembered as storing nothing (so the next run
sees it as unchanged). Each step writes its failures (even none) beside the run's staging
data; the sync reads them. When a step's file is missing (a step re-executed in another run,
say), the sync does not know, and leaves every document without chunks as it is.

With the intermediates on an object store (`data_dir: s3://...`) the steps may run on
machines that share no disk, so these files live there too (`staging` is then a URL).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import polars as pl

from clef_pipelines.objectstore import ObjectStoreConfig, filesystem, is_cloud_url, strip_scheme

#: The steps whose failures the sync needs, in pipeline order.
FAILING_STEPS = ("parsed_blocks", "chunks")


def failed_path(staging: Path, step: str) -> Path:
    return staging / "failed" / f"{step}.parquet"


def write_failed(
    staging: Path | str,
    step: str,
    failures: pl.DataFrame,
    object_store: ObjectStoreConfig | None = None,
) -> None:
    """Keep a step's failed document ids (a frame with `doc_id`) for the sync."""
    ids = failures.select(pl.col("doc_id").cast(pl.Utf8)) if failures.height else None
    frame = ids if ids is not None else pl.DataFrame(schema={"doc_id": pl.Utf8})
    if isinstance(staging, str) and is_cloud_url(staging):
        fs = filesystem(staging, object_store)
        buffer = io.BytesIO()
        frame.write_parquet(buffer)
        fs.pipe_file(
            strip_scheme(f"{staging.rstrip('/')}/failed/{step}.parquet"), buffer.getvalue()
        )
        return
    path = failed_path(Path(staging), step)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)


def clear_failed(staging: Path | str, object_store: ObjectStoreConfig | None = None) -> None:
    """Forget the failed-document records an earlier run of the source left on an object
    store (a local staging folder is removed with the rest of the staging)."""
    if isinstance(staging, str) and is_cloud_url(staging):
        fs = filesystem(staging, object_store)
        for step in FAILING_STEPS:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(strip_scheme(f"{staging.rstrip('/')}/failed/{step}.parquet"))


def read_failed(
    staging: Path | str, object_store: ObjectStoreConfig | None = None
) -> frozenset[str] | None:
    """The ids of documents that failed in any of `FAILING_STEPS`; None when a step's record
    is missing (not known)."""
    out: set[str] = set()
    remote = isinstance(staging, str) and is_cloud_url(staging)
    fs = filesystem(str(staging), object_store) if remote else None
    for step in FAILING_STEPS:
        if fs is not None:
            try:
                data = fs.cat_file(
                    strip_scheme(f"{str(staging).rstrip('/')}/failed/{step}.parquet")
                )
            except FileNotFoundError:
                return None
            out.update(pl.read_parquet(io.BytesIO(data))["doc_id"].to_list())
            continue
        path = failed_path(Path(staging), step)
        if not path.is_file():
            return None
        out.update(pl.read_parquet(path)["doc_id"].to_list())
    return frozenset(out)
