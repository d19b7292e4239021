"""Blocks to chunks: `chunk_blocks(blocks, title, doc_id, cfg)` (plain Python, no Dagster)."""

from clef_pipelines.chunking.chunker import chunk_blocks
from clef_pipelines.chunking.models import Chunk, make_embed_text, section_path_of
from clef_pipelines.chunking.sentences import sentence_spans, split_sentences
from clef_pipelines.chunking.tokens import count_tokens, count_tokens_batch, get_token_counter

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
