"""The whole SciFact corpus (5,183 abstracts) parses and chunks within the token limits.

Timing lives in `python -m bench run ingest`, never in a test."""

from __future__ import annotations

import pytest

from clef_pipelines.chunking import chunk_blocks, get_token_counter
from clef_pipelines.config import ChunkingConfig, ParsingConfig, SourceConfig
from clef_pipelines.parsing import iter_source_entries, parse_document
from tests.shared_data import SHARED_DATA, need

SCIFACT = SHARED_DATA / "scifact" / "corpus.jsonl"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["structural", "fixed"])
def test_scifact_parses_and_chunks_within_limits(strategy: str) -> None:
    need(SCIFACT)
    get_token_counter()  # loading the tokenizer is not chunking
    source = SourceConfig(name="scifact", path=SCIFACT.name)
    cfg = ChunkingConfig(strategy=strategy)
    docs = chunks = 0
    for entry in iter_source_entries(source, SCIFACT.parent, ParsingConfig()):
        doc = entry.load()
        pieces = chunk_blocks(parse_document(doc), doc.title, doc.doc_id, cfg)
        assert pieces and all(c.tokens <= cfg.max_tokens for c in pieces)
        docs += 1
        chunks += len(pieces)
    assert docs == 5183
    assert chunks >= docs
