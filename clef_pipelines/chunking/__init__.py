"""Blocks to chunks: `chunk_blocks(blocks, title, doc_id, cfg)` (plain Python, no Dagster).

Names are imported on first use (PEP 562), so `clef_pipelines.chunking.tokens` alone (what a
query needs to count passage tokens) does not pull in the chunkers and the parsers behind them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clef_pipelines.chunking.chunker import chunk_blocks
    from clef_pipelines.chunking.models import Chunk, make_embed_text, section_path_of
    from clef_pipelines.chunking.sentences import sentence_spans, split_sentences
    from clef_pipelines.chunking.tokens import count_tokens, count_tokens_batch, get_token_counter

_HOMES = {
    "chunk_blocks": "chunker",
    "Chunk": "models",
    "make_embed_text": "models",
    "section_path_of": "models",
    "sentence_spans": "sentences",
    "split_sentences": "sentences",
    "count_tokens": "tokens",
    "count_tokens_batch": "tokens",
    "get_token_counter": "tokens",
}

__all__ = [
    "Chunk",
    "chunk_blocks",
    "count_tokens",
    "count_tokens_batch",
    "get_token_counter",
    "make_embed_text",
    "section_path_of",
    "sentence_spans",
    "split_sentences",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
