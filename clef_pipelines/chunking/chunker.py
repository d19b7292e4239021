"""`chunk_blocks`: blocks of one document -> chunks, with the configured strategy."""

from __future__ import annotations

from collections.abc import Sequence

from clef_pipelines.chunking.fixed import fixed_drafts
from clef_pipelines.chunking.models import Chunk, make_embed_text, section_path_of
from clef_pipelines.chunking.structural import structural_drafts
from clef_pipelines.chunking.tokens import TokenCounter, get_token_counter
from clef_pipelines.chunking.units import Unit, chunk_span, join_units
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
        chunk = chunk_of_units(blocks, units, doc_id, title, len(chunks), tokens, cfg.strategy)
        if chunk is not None:
            chunks.append(chunk)
    return chunks


def chunk_of_units(
    blocks: Sequence[Block],
    units: Sequence[Unit],
    doc_id: str,
    title: str,
    index: int,
    tokens: int,
    chunker: str,
) -> Chunk | None:
    """The chunk a run of units makes (None when it holds no text): the one place every
    strategy turns its cuts into text, embed text, section path and offsets."""
    text = join_units(blocks, units)
    if not text.strip():
        return None
    section = section_path_of(blocks[units[0].block].heading_path)
    start, end = chunk_span(blocks, units)
    return Chunk(
        doc_id=doc_id,
        chunk_index=index,
        text=text,
        embed_text=make_embed_text(title, section, text),
        section_path=section,
        char_start=start,
        char_end=end,
        tokens=tokens,
        chunker=chunker,
    )
