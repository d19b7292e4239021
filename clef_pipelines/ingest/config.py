"""Settings of how an ingest splits a source into batches (kept free of heavy imports: the
settings module imports it)."""

from __future__ import annotations

from pydantic import Field

from clef_pipelines._strict import StrictModel

#: At most this many batches: one source's batches stay a countable set of files.
MAX_BATCHES = 4096


class BatchingConfig(StrictModel):
    """How an ingest splits a source into batches (`batching:` in the config)."""

    batch_documents: int = Field(
        2000,
        ge=1,
        description=(
            "Target documents per batch. Each step holds one batch at a time, so this sets an "
            "ingest's peak memory; the batch count is the power of two that keeps batches at "
            "or under it (at most 4096 batches)."
        ),
    )
