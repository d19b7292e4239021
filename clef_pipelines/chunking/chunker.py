"""`chunk_blocks`: blocks of one document -> chunks, with the configured strategy."""

from __future__ import annotations

from collections.abc import Sequence

from clef_pipelines.chunking.fixed import fixed_drafts
from clef_pipelines.chunking.models import Chunk, make_embed_text, section_path_of
from clef_pipelines.chunking.structural import structural_drafts
from clef_pipelines.chunking.tokens import TokenCounter, get_token_counter
from clef_pipelines.chunking.units import chunk_span, join_units
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.models import Block


def chunk_blocks(
    blocks: Sequence[Block],
    title: str,
    doc_id: str,
    cfg: ChunkingConfig | None = None,
    counter: TokenCounter | None = None,
) -> list[Chunk]:
    """Chunk one document's ordered blocks (as parsed; a filtered subset is fine).

    Headings give sections and context but are not chunk text. Returns [] when no block
    holds text beyond headings.
    """
    cfg = cfg or ChunkingConfig()
    counter = counter or get_token_counter()
    blocks = list(blocks)
    if cfg.strategy == "fixed":
        drafts = fixed_drafts(blocks, cfg, counter)
    else:
        drafts = structural_drafts(blocks, cfg, counter)
    chunks: list[Chunk] = []
    for units, tokens in drafts:
        text = join_units(blocks, units)
        if not text.strip():
            continue
        section = section_path_of(blocks[units[0].block].heading_path)
        start, end = chunk_span(blocks, units)
        chunks.append(
            Chunk(
                doc_id=doc_id,
                chunk_index=len(chunks),
                text=text,
                embed_text=make_embed_text(title, section, text),
                section_path=section,
                char_start=start,
                char_end=end,
                tokens=tokens,
                chunker=cfg.strategy,
            )
        )
    return chunks
