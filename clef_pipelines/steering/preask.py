"""The enrichment's questions asked with the paragraph screen, so no text is sent twice.

Why: the screen sends every paragraph's text once and the enrichment then sent the same text
again, cut into chunks (structural chunks hold no text beyond their paragraphs'), which made
it the larger part of the input tokens (issue 9's measure). Here the chunks are predicted
before the screen, by the configured chunker over the document's blocks as if nothing were
cut, and each paragraph is sent in parts cut where its chunks will be cut. The screen's
question names the paragraph's parts (``About `s3` `s4`: ...``); each predicted chunk's
enrichment questions name the parts it is made of, in the same request. The answers go to
the per-text answer cache under the chunk's text, where the enrichment finds them.

Nothing is decided here: the enrichment stage still asks about every chunk and decides from
the answers as before. A prediction that turns out wrong (the screen cut a paragraph, so the
chunks around it differ) only means those chunks' texts miss the cache and are asked then.
Pre-asking happens only where it can pay: Clef screen and enrichment both asking, the answer
cache kept (`data_dir`), the structural chunker (the `clef` chunker places cuts with Clef's
answers; `fixed` overlaps its windows), and the state-key layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from clef_pipelines.chunking.structural import structural_drafts
from clef_pipelines.chunking.tokens import TokenCounter, get_token_counter
from clef_pipelines.chunking.units import Unit, join_units
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.models import Block
from clef_pipelines.steering.packing import Subject


@dataclass
class PreaskPlan:
    """Parts per screened block (frame row), and the chunk subjects to ask with them."""

    parts: dict[int, tuple[str, ...]] = field(default_factory=dict)
    bundle: dict[int, str] = field(default_factory=dict)
    chunks: list[Subject] = field(default_factory=list)
    #: chunk subjects listed right after the blocks of their bundle (the screen's order)
    chunks_after: dict[int, list[Subject]] = field(default_factory=dict)


def _run_text(block: Block, units: Sequence[Unit]) -> str | None:
    """The text of a block's consecutive units in one chunk, when it is the block's own text
    (a slice of it, or all of it); None when the chunk's text differs (a bulleted list item,
    a table cut between rows that repeats its header)."""
    if units[0].whole:
        return block.text if len(units) == 1 and units[0].text == block.text else None
    for u in units:
        if u.whole or u.text != block.text[u.start : u.end]:
            return None
    return block.text[units[0].start : units[-1].end]


def plan_preask(
    blocks: pl.DataFrame,
    screenable: Sequence[int],
    cfg: ChunkingConfig,
    ask_names: tuple[str, ...],
    counter: TokenCounter | None = None,
) -> PreaskPlan:
    """Predict each document's chunks (nothing cut) and the parts its paragraphs are sent in.

    A paragraph is sent in parts only when the parts are slices of its text with nothing but
    whitespace between them; a chunk is asked with the screen only when every block it holds
    is such a paragraph (a chunk holding a heading-free code block, a list item or a table is
    left to the enrichment)."""
    plan = PreaskPlan()
    if cfg.strategy != "structural" or not screenable:
        return plan
    counter = counter or get_token_counter()
    wanted = set(screenable)
    rows_of: dict[str, list[int]] = {}
    doc_ids = blocks["doc_id"].to_list()
    for i, d in enumerate(doc_ids):
        rows_of.setdefault(d, []).append(i)
    cols = {
        c: blocks[c].to_list()
        for c in ("kind", "text", "heading_path", "level", "char_start", "char_end", "verbatim")
    }
    orders = blocks["block_index"].to_list()
    for doc_id, rows in rows_of.items():
        if not any(i in wanted for i in rows):
            continue
        doc_blocks = [
            Block(
                kind=cols["kind"][i],
                text=cols["text"][i],
                heading_path=list(cols["heading_path"][i] or []),
                level=cols["level"][i],
                char_start=cols["char_start"][i],
                char_end=cols["char_end"][i],
                order=orders[i],
                verbatim=cols["verbatim"][i],
            )
            for i in rows
        ]
        _plan_document(plan, doc_id, rows, doc_blocks, wanted, cfg, counter, ask_names)
    return plan


def _plan_document(
    plan: PreaskPlan,
    doc_id: str,
    rows: list[int],
    doc_blocks: list[Block],
    wanted: set[int],
    cfg: ChunkingConfig,
    counter: TokenCounter,
    ask_names: tuple[str, ...],
) -> None:
    drafts = [units for units, _ in structural_drafts(doc_blocks, cfg, counter)]
    runs, chunk_runs = _runs(drafts, doc_blocks)
    ok = _parted_blocks(runs, rows, doc_blocks, wanted)
    # Bundles: blocks joined by a chunk they share go in one request with their chunks.
    parent = {b: b for b in ok}

    def find(b: int) -> int:
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        return b

    asked: list[tuple[int, Subject]] = []
    for n, (units, mine) in enumerate(zip(drafts, chunk_runs, strict=True)):
        blocks_in = [b for b, _ in mine]
        if not all(b in ok for b in blocks_in):
            continue
        text = join_units(doc_blocks, units)
        if not text.strip():
            continue
        for b in blocks_in[1:]:
            parent[find(b)] = find(blocks_in[0])
        parts = tuple(t for _, t in mine if t is not None)
        asked.append((blocks_in[0], Subject(f"chunk:{doc_id}:{n}", text, ask_names, parts)))
    for b, parts in ok.items():
        plan.parts[rows[b]] = parts
        plan.bundle[rows[b]] = f"{doc_id}:{find(b)}"
    # A bundle's chunks follow its last block, so the screen's order keeps a bundle together.
    last: dict[int, int] = {}
    for b in ok:
        last[find(b)] = max(last.get(find(b), b), b)
    for b, subject in asked:
        root = find(b)
        tagged = Subject(subject.key, subject.text, subject.asks, subject.parts, f"{doc_id}:{root}")
        plan.chunks.append(tagged)
        plan.chunks_after.setdefault(rows[last[root]], []).append(tagged)


def _runs(
    drafts: list[list[Unit]], doc_blocks: list[Block]
) -> tuple[dict[int, list[str | None]], list[list[tuple[int, str | None]]]]:
    """Each block's runs: its consecutive units in one chunk, in order (structural chunks do
    not overlap, so the runs of a block cover its units once); and each chunk's runs, as
    (block, text)."""
    runs: dict[int, list[str | None]] = {}
    chunk_runs: list[list[tuple[int, str | None]]] = []
    for units in drafts:
        mine: list[tuple[int, str | None]] = []
        k = 0
        while k < len(units):
            b = units[k].block
            j = k
            while j < len(units) and units[j].block == b:
                j += 1
            text = _run_text(doc_blocks[b], units[k:j])
            runs.setdefault(b, []).append(text)
            mine.append((b, text))
            k = j
        chunk_runs.append(mine)
    return runs, chunk_runs


def _parted_blocks(
    runs: dict[int, list[str | None]],
    rows: list[int],
    doc_blocks: list[Block],
    wanted: set[int],
) -> dict[int, tuple[str, ...]]:
    """The wanted blocks whose runs are the block's text in order: block -> its parts."""
    ok: dict[int, tuple[str, ...]] = {}
    for b, texts in runs.items():
        if rows[b] not in wanted or any(t is None for t in texts):
            continue
        parts = tuple(t for t in texts if t is not None)
        if _covers(doc_blocks[b].text, parts):
            ok[b] = parts
    return ok


def _covers(text: str, parts: Sequence[str]) -> bool:
    """Whether the parts are the text in order, with only whitespace around and between."""
    at = 0
    for p in parts:
        k = text.find(p, at)
        if k < 0 or text[at:k].strip():
            return False
        at = k + len(p)
    return not text[at:].strip()
