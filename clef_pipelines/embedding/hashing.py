"""A deterministic bag-of-words embedder: no model, no network; for tests and smoke runs.

Tokens (lower-cased words) and word bigrams are hashed into signed buckets, so texts that share
words land close together; it is not semantic, but it is stable across machines and runs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from clef_pipelines.embedding.base import Embedder

WORD_CACHE = 100_000
#: Longer words (hashes, encoded data) rarely recur and would make the cache hold their text.
WORD_CACHE_CHARS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder(Embedder):
    def __init__(self, dimension: int = 384) -> None:
        super().__init__()
        self.dimension = dimension
        self.name = f"hash:v1:{dimension}"
        # Words repeat across texts (bigrams far less): each word's bucket is kept, up to
        # WORD_CACHE words of at most WORD_CACHE_CHARS (a few tens of MB at most).
        self._words: dict[str, tuple[int, float]] = {}

    def _bucket(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dimension, 1.0 if (value >> 63) & 1 else -1.0

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        # Every gram's signed bucket gathered first, then summed per row by one bincount: the
        # sums are small integers, exact in float64 and float32 alike, so the vectors are
        # the same as adding one gram at a time (a numpy scalar update per gram cost more
        # than its hash).
        flat: list[int] = []
        signs: list[float] = []
        dim = self.dimension
        known = self._words
        bucket = self._bucket
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            base = row * dim
            for word in words:
                hit = known.get(word)
                if hit is None:
                    hit = bucket(word)
                    if len(known) < WORD_CACHE and len(word) <= WORD_CACHE_CHARS:
                        known[word] = hit
                flat.append(base + hit[0])
                signs.append(hit[1])
            for a, b in zip(words, words[1:], strict=False):
                col, sign = bucket(f"{a} {b}")
                flat.append(base + col)
                signs.append(sign)
        out = np.bincount(
            np.asarray(flat, dtype=np.int64),
            weights=np.asarray(signs, dtype=np.float64),
            minlength=len(texts) * dim,
        )
        out = out.astype(np.float32).reshape(len(texts), dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms
