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
    # Room for a title and section path of 54 word pieces (SciFact's titles reach 50).
    assert ChunkingConfig().max_tokens + 54 <= (MiniLMEmbedder.max_input_tokens or 0)


def test_no_scifact_chunk_overflows_the_default_embedder_with_the_default_chunking() -> None:
    """Issue 57, must-hold 6: the default chunking of SciFact's 5,183 abstracts (title and
    text, as the eval ingests them) gives no embedded text longer than MiniLM reads, so a
    SciFact run no longer warns."""
    import json

    from clef_pipelines.chunking import chunk_blocks, count_tokens_batch
    from clef_pipelines.config import ParsingConfig
    from clef_pipelines.parsing import parse_document
    from clef_pipelines.parsing.models import Document
    from tests.shared_data import SCIFACT, need

    corpus = need(SCIFACT / "corpus.jsonl")
    parsing, chunking = ParsingConfig(), ChunkingConfig()
    texts: list[str] = []
    for line in corpus.read_text().splitlines():
        row = json.loads(line)
        doc = Document(
            doc_id=str(row["_id"]),
            source_uri="",
            title=row["title"],
            content=row["text"],
            format="txt",
        )
        blocks = parse_document(doc, parsing)
        texts += [c.embed_text for c in chunk_blocks(blocks, doc.title, doc.doc_id, chunking)]
    assert len(texts) > 5183
    window = MiniLMEmbedder.max_input_tokens or 0
    over = [n for n in count_tokens_batch(texts) if n > window]
    assert over == [], f"{len(over)} of {len(texts)} chunks longer than {window} word pieces"


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
