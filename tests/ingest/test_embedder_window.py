"""Chunks must fit what the embedder reads: the defaults fit, and overflow is counted."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from clef_pipelines.config import ChunkingConfig
from clef_pipelines.embedding.base import Embedder
from clef_pipelines.embedding.minilm import MiniLMEmbedder
from clef_pipelines.ingest.sync import embed_chunks
from clef_pipelines.stores.memory import MemoryStore


def test_default_chunks_fit_the_default_embedder_with_room_for_the_header() -> None:
    assert ChunkingConfig().max_tokens + 30 <= (MiniLMEmbedder.max_input_tokens or 0)


class _SmallWindow(Embedder):
    name = "small-window"
    dimension = 4
    max_input_tokens = 70

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32) / 2


def test_texts_longer_than_the_window_are_counted() -> None:
    long_text = "tokens rotate every hour " * 30  # about 120 word pieces
    short_text = "tokens rotate"
    chunks = pl.DataFrame(
        {
            "id": ["a", "b"],
            "embed_text": [long_text, short_text],
            "tokens": [120, 2],
        }
    )
    out, stats = embed_chunks(chunks, _SmallWindow(), MemoryStore(), "none")
    assert stats.over_window == 1
    assert stats.embedded == 2 and out["vector"].to_list()[0] == [0.5] * 4
