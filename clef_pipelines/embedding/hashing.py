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

_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder(Embedder):
    def __init__(self, dimension: int = 384) -> None:
        super().__init__()
        self.dimension = dimension
        self.name = f"hash:v1:{dimension}"

    def _bucket(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dimension, 1.0 if (value >> 63) & 1 else -1.0

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            grams = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
            for gram in grams:
                col, sign = self._bucket(gram)
                out[row, col] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms
