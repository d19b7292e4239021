"""Train MiniLM's top layers together with the guard's main stage 2 (weights v6 on).

Every change to the MLP on MiniLM's frozen pooled vector, its inputs or its training windows
landed within the spread of retrains; training the top transformer layers with it was the
first change clear of that spread, also on unseen attacks (``lab/guard/bench_finetune.py``,
``GUARD_WEIGHTS.md``). This module is the trainer's step for it (``guard_train --tune-layers
K``): the same windows, inputs and sample weights as the main stage 2 of ``train_cascade``
(the pooled unit vector plus the window's out-of-fold stage-1 logit / 8, 385 -> 64 -> 1),
with the top ``K`` layers of all-MiniLM-L6-v2 trained as well. The head it learns is stored
as the main stage 2's MLP; the layers as their difference from MiniLM's (``guard_encoder``).

The hidden states below the trained layers never change, so they are computed once per text
and kept in ``work`` (float16, about 1 GB for the training windows); each epoch then runs only
the trained layers: on 2 CPU cores about 6 minutes per epoch for the top 3 layers.
"""

from __future__ import annotations

import copy
import functools
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clef_pipelines.guard.encoder import MINILM_LAYERS, additive_mask, run_layers


@dataclass(frozen=True)
class TuneSettings:
    """How the top layers are trained (``guard_train``'s ``--tune-*`` options)."""

    layers: int = 3
    epochs: int = 2
    #: The trained layers' peak rate (one-cycle schedule); the head's is 1e-3.
    lr: float = 5e-5
    batch: int = 32
    hidden: int = 64
    seed: int = 0
    #: > 0: a low-rank adapter of this rank on the layers' linear maps is trained instead of
    #: the layers (``add_lora``); measured and not kept (``GUARD_WEIGHTS.md``).
    lora: int = 0
    lora_lr: float = 5e-4
    #: Weight of the injection datasets' benign prompts (``--prompt-negative-weight``).
    prompt_negative_weight: float = 0.3
    #: ``--source-temperature`` (``guard_train.source_tempered``).
    source_temperature: float = 1.0
    #: Weight of technical and help docs' windows (``--doc-weight``).
    doc_weight: float = 1.0


@functools.cache
def minilm_model() -> Any:
    """all-MiniLM-L6-v2's transformer as sentence-transformers loads it (transformers'
    BertModel and tokenizer), for training: the package runs MiniLM on plain torch
    (``embedding.minilm_torch``, the same parameter names), so the lab loads its own."""
    from sentence_transformers import SentenceTransformer

    from clef_pipelines.embedding.minilm_torch import model_dir

    return SentenceTransformer(str(model_dir()), device="cpu")[0]


# -- training data --------------------------------------------------------------------------


def stage2_training_set(model: Any, examples: Sequence[Any], args: Any) -> dict[str, Any]:
    """The main stage 2's training windows as ``guard_train.train_cascade`` picks them (with
    ``model``'s gate), their labels, sources, sample weights and out-of-fold stage-1 logits."""
    from lab.guard import train as gt

    windows, labels, weights, groups, sources, prefix = gt.training_windows(
        examples, args.stage1_c, args.plant_share
    )
    source_of = np.array(sources)
    stage2_only, for_stage1 = gt.stage_masks(source_of, prefix)
    logits = gt.stage1_matrix(windows) @ model.w1 + model.b1
    seen = gt.stage2_candidates(
        windows,
        logits,
        model.gate_logit,
        stage2_only,
        args.stage2_margin,
        args.stage2_only_windows,
    )
    order = seen[gt._hash_order([windows[i] for i in seen])][: args.stage2_windows]
    oof = gt.out_of_fold_logits(
        windows, labels, weights, groups, args.stage1_c, args.folds, for_stage1
    )
    return {
        "texts": [windows[i] for i in order],
        "labels": labels[order],
        "weights": weights[order],
        "sources": source_of[order],
        "oof": oof[order],
    }


def sample_weights(
    train: dict[str, Any],
    prompt_negative_weight: float = 0.3,
    source_temperature: float = 1.0,
    doc_weight: float = 1.0,
) -> np.ndarray:
    """The recipe's stage-2 sample weights: benign prompts of the injection datasets at
    ``prompt_negative_weight``, docs at ``doc_weight``, injection datasets tempered
    (``source_tempered``), both classes balanced."""
    from lab.guard import train as gt

    weights = gt.recipe_weights(
        train["labels"],
        train["sources"],
        train["weights"],
        prompt_negative_weight,
        source_temperature,
        doc_weight,
    )
    return gt._balanced(train["labels"], weights)


class HiddenCache:
    """Each text's hidden states after MiniLM layer ``below`` (float16, ragged), computed
    once and kept in ``work/hidden_after_<below>.pkl``."""

    def __init__(self, work: Path, texts: Sequence[str], below: int) -> None:
        self.path = work / f"hidden_after_{below}.pkl"
        self.states: dict[str, np.ndarray] = {}
        if self.path.exists():
            self.states = pickle.loads(self.path.read_bytes())
        missing = sorted({t for t in texts if t not in self.states}, key=len)
        if missing:
            self._embed(missing, below)
            work.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(pickle.dumps(self.states, protocol=5))

    def _embed(self, texts: list[str], below: int) -> None:
        import torch

        transformer = minilm_model()
        bert, tokenizer = transformer.auto_model, transformer.tokenizer
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(texts), 64):
                batch = texts[start : start + 64]
                enc = tokenizer(
                    batch, padding=True, truncation=True, max_length=256, return_tensors="pt"
                )
                mask = enc["attention_mask"]
                x = bert.embeddings(
                    input_ids=enc["input_ids"], token_type_ids=enc.get("token_type_ids")
                )
                x = run_layers(bert.encoder.layer[:below], x, additive_mask(mask))
                for i, text in enumerate(batch):
                    n = int(mask[i].sum())
                    self.states[text] = x[i, :n].cpu().numpy().astype(np.float16)
                if start % 6400 == 0:
                    rate = (start + len(batch)) / (time.perf_counter() - started)
                    print(
                        f"  hidden states {start + len(batch)}/{len(texts)} ({rate:.0f}/s)",
                        file=sys.stderr,
                    )

    def padded(self, texts: Sequence[str]) -> tuple[Any, Any]:
        import torch

        arrays = [self.states[t] for t in texts]
        x = np.zeros((len(arrays), max(len(a) for a in arrays), 384), dtype=np.float32)
        mask = np.zeros(x.shape[:2], dtype=np.float32)
        for i, a in enumerate(arrays):
            x[i, : len(a)], mask[i, : len(a)] = a, 1.0
        return torch.tensor(x), torch.tensor(mask)

    def batches(self, texts: Sequence[str], size: int) -> list[np.ndarray]:
        """Row indices in batches of similar length (little padding)."""
        order = np.argsort([len(self.states[t]) for t in texts], kind="stable")
        return [order[i : i + size] for i in range(0, len(order), size)]


# -- the model ------------------------------------------------------------------------------


def add_lora(layers: Any, rank: int) -> list[Any]:
    """Freeze ``layers`` and give each of their linear maps a trainable low-rank update
    ``W x + B A x * 2 / rank`` (LoRA; ``B`` starts at zero, so training starts from MiniLM).
    Returns the adapters' parameters."""
    import torch

    class LoRALinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.a = torch.nn.Parameter(torch.randn(rank, base.in_features) / base.in_features**0.5)
            self.b = torch.nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x: Any) -> Any:
            return self.base(x) + (x @ self.a.T @ self.b.T) * (2.0 / rank)

    for parameter in layers.parameters():
        parameter.requires_grad_(False)
    adapters = []
    for module in list(layers.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                wrapped = LoRALinear(child)
                setattr(module, name, wrapped)
                adapters += [wrapped.a, wrapped.b]
    return adapters


def make_model(settings: TuneSettings) -> Any:
    """MiniLM's top ``settings.layers`` layers (copies) and stage 2's head on their pooled
    unit vector plus the stage-1 logit / 8."""
    import torch

    from clef_pipelines.guard.encoder import mean_pooled

    bert = minilm_model().auto_model
    first = MINILM_LAYERS - settings.layers

    class TunedStage2(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(
                copy.deepcopy(bert.encoder.layer[i]) for i in range(first, MINILM_LAYERS)
            )
            self.head = torch.nn.Sequential(
                torch.nn.Linear(385, settings.hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(settings.hidden, 1),
            )
            self.adapters = add_lora(self.layers, settings.lora) if settings.lora else None

        def forward(self, x: Any, mask: Any, stage1: Any) -> Any:
            x = run_layers(self.layers, x, additive_mask(mask))
            pooled = mean_pooled(x, mask)
            return self.head(torch.cat([pooled, stage1[:, None]], 1)).squeeze(1)

    return TunedStage2()


def fit(
    train: dict[str, Any], cache: HiddenCache, settings: TuneSettings, seed: int | None = None
) -> Any:
    """The top layers and head trained on ``train`` (``stage2_training_set``): weighted
    cross-entropy, AdamW with a one-cycle schedule, ``settings.epochs`` epochs."""
    import torch

    seed = settings.seed if seed is None else seed
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = make_model(settings)
    groups = [{"params": model.head.parameters(), "lr": 1e-3}]
    if settings.layers and settings.lora:
        groups.append({"params": model.adapters, "lr": settings.lora_lr})
    elif settings.layers:
        groups.append({"params": model.layers.parameters(), "lr": settings.lr})
    optimiser = torch.optim.AdamW(groups, weight_decay=1e-4)
    texts = train["texts"]
    labels = torch.tensor(train["labels"], dtype=torch.float32)
    sample = torch.tensor(
        sample_weights(
            train,
            settings.prompt_negative_weight,
            settings.source_temperature,
            settings.doc_weight,
        ),
        dtype=torch.float32,
    )
    stage1 = torch.tensor(train["oof"] / 8.0, dtype=torch.float32)
    batches = cache.batches(texts, settings.batch)
    steps = settings.epochs * len(batches)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser,
        max_lr=[g["lr"] for g in groups],
        total_steps=steps,
        # At least two warm-up steps: OneCycleLR divides by zero with fewer (a tiny run).
        pct_start=max(0.1, 2.5 / steps),
    )
    model.train()
    started = time.perf_counter()
    for epoch in range(settings.epochs):
        total = 0.0
        for b in rng.permutation(len(batches)):
            rows = batches[b]
            x, mask = cache.padded([texts[i] for i in rows])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(x, mask, stage1[rows]), labels[rows], reduction="none"
            )
            loss = (loss * sample[rows]).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(rows)
        print(
            f"  top {settings.layers} layers, seed {seed}, epoch {epoch + 1}: loss "
            f"{total / len(texts):.4f} ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
        )
    return model.eval()


def logits_of(
    models: Sequence[Any], texts: Sequence[str], stage1: np.ndarray, cache: HiddenCache
) -> np.ndarray:
    """The mean stage-2 logit of ``models`` per text (hidden states from ``cache``)."""
    import torch

    out = np.zeros(len(texts))
    with torch.inference_mode():
        for rows in cache.batches(texts, 256):
            x, mask = cache.padded([texts[i] for i in rows])
            s1 = torch.tensor(stage1[rows] / 8.0, dtype=torch.float32)
            out[rows] = np.mean([m(x, mask, s1).numpy() for m in models], axis=0)
    return out


def layer_state(model: Any) -> dict[str, np.ndarray]:
    """The trained layers as a state dict keyed ``<i>.<parameter>`` (``guard_encoder``'s
    keys); LoRA adapters folded into the weights they adapt."""
    import torch

    layers = copy.deepcopy(model.layers)
    if model.adapters is not None:
        for module in list(layers.modules()):
            for name, child in list(module.named_children()):
                if hasattr(child, "base") and hasattr(child, "a"):
                    with torch.no_grad():
                        scale = 2.0 / child.a.shape[0]
                        child.base.weight += (child.b @ child.a) * scale
                    setattr(module, name, child.base)
    return {k: v.detach().cpu().numpy() for k, v in layers.state_dict().items()}


def head_layers(model: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The head as ``guard_train.mlp_logits`` layers (weights as inputs x outputs)."""
    first, second = model.head[0], model.head[2]
    return [
        (first.weight.detach().numpy().T.copy(), first.bias.detach().numpy().copy()),
        (second.weight.detach().numpy().T.copy(), second.bias.detach().numpy().copy()),
    ]


def fit_tuned_stage(model: Any, examples: Sequence[Any], cache: Any, args: Any) -> None:
    """Replace ``model``'s main stage 2 by MiniLM's top ``--tune-layers`` layers and a head
    trained with them; stage 1, the gates and the prefix stage stay as they are. The layers
    are stored as ``pack_tuned`` stores them (``--tune-rank``), and the threshold is chosen
    on validation by the trainer's rule through the guard's own encoder on those stored
    weights (``choose_mix_and_threshold``), so it is what the guard will compute."""
    from clef_pipelines.guard.encoder import base_state, pack_tuned
    from lab.guard import train as gt

    settings = TuneSettings(
        layers=args.tune_layers,
        epochs=args.tune_epochs,
        lr=args.tune_lr,
        seed=args.tune_seed,
        hidden=args.hidden,
        lora=args.tune_lora,
        prompt_negative_weight=args.prompt_negative_weight,
        source_temperature=args.source_temperature,
        doc_weight=args.doc_weight,
    )
    if model.knn_k:
        # From --base weights that carry a nearest-prototype margin on the main stage 2.
        raise ValueError("--tune-layers replaces the main stage 2: its --base has a knn margin")
    train = stage2_training_set(model, examples, args)
    below = MINILM_LAYERS - settings.layers
    hidden = HiddenCache(args.tune_work, train["texts"], below)
    print(
        f"tuning the top {settings.layers} MiniLM layers on {len(train['texts'])} windows",
        file=sys.stderr,
    )
    net = fit(train, hidden, settings)
    base = base_state(minilm_model().auto_model, settings.layers)
    model.set_tuned(pack_tuned(layer_state(net), base, args.tune_rank), settings.layers)
    model.layers = head_layers(net)
    model.kind = "mlp"
    val_rows = gt.evaluation_rows(examples, "val", args.plant_share)
    recall = gt.choose_mix_and_threshold(model, val_rows, cache, args)
    print(
        f"tuned top {settings.layers} layers: threshold {model.threshold:.3f}, "
        f"val recall {recall:.4f}",
        file=sys.stderr,
    )


def aligned_head(
    reference: Sequence[tuple[np.ndarray, np.ndarray]],
    head: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[list[tuple[np.ndarray, np.ndarray]], float]:
    """``head`` (a one-hidden-layer MLP as ``head_layers`` gives it) with its hidden units
    reordered to best match ``reference``'s (the assignment that maximises the summed cosine
    of each unit's incoming weights and bias): the same function, in an order in which the
    two can be averaged. Also returns the matched units' mean cosine."""
    from scipy.optimize import linear_sum_assignment

    if len(reference) != 2 or len(head) != 2 or reference[0][0].shape != head[0][0].shape:
        raise ValueError("--soup: the heads must be MLPs of one hidden layer of one size")

    def units(layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        rows = np.vstack([layers[0][0], layers[0][1][None, :]]).T
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

    cosine = units(reference) @ units(head).T
    _, order = linear_sum_assignment(-cosine)
    (w0, b0), (w1, b1) = head
    aligned = [(w0[:, order], b0[order]), (w1[order, :], b1)]
    return aligned, float(cosine[np.arange(len(order)), order].mean())


def repack_tuned_stage(
    model: Any, examples: Sequence[Any], cache: Any, args: Any, soup: Sequence[Any] = ()
) -> None:
    """Store ``model``'s tuned layers (from ``--base``) again at ``--tune-rank`` (the best
    low-rank product of each matrix's difference from MiniLM) and choose the threshold
    again on validation: a smaller weights file, if validation recall survives it.

    With ``soup`` (``--soup``: more weights trained on the same base), first replace the
    tuned layers and the main stage-2 head by their average over ``model`` and ``soup``,
    parameter by parameter: a "model soup" (Wortsman et al., 2022), which can keep much of an
    ensemble's gain at one model's cost. It only makes sense for models fine-tuned from one
    start: the layers all start at MiniLM's, and the head's start is set by ``--tune-seed``.
    A head from another seed has its hidden units in another order, so each member's are
    first put in the order that best matches ``model``'s (``aligned_head``)."""
    from clef_pipelines.guard.encoder import base_state, pack_tuned, unpack_tuned
    from lab.guard import train as gt

    base = base_state(minilm_model().auto_model, model.tuned_layers)
    state = souped(model, soup, base) if soup else unpack_tuned(model.tuned_arrays, base)
    model.set_tuned(pack_tuned(state, base, args.tune_rank), model.tuned_layers)
    val_rows = gt.evaluation_rows(examples, "val", args.plant_share)
    recall = gt.choose_mix_and_threshold(model, val_rows, cache, args)
    size = sum(a.nbytes for a in model.tuned_arrays.values())
    averaged = f", averaged over {1 + len(soup)} weights" if soup else ""
    print(
        f"tuned layers at rank {args.tune_rank} ({size / 1e6:.1f} MB){averaged}: threshold "
        f"{model.threshold:.3f}, val recall {recall:.4f}",
        file=sys.stderr,
    )


def souped(model: Any, soup: Sequence[Any], base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The tuned layers' state dict averaged over ``model`` and ``soup`` (``base``: MiniLM's
    own layers); ``model``'s main stage-2 head becomes the average of the heads, each put in
    ``model``'s order of hidden units first (``aligned_head``)."""
    from clef_pipelines.guard.encoder import unpack_tuned

    for other in soup:
        if not model.soups_with(other):
            raise ValueError(
                "--soup: every file must be trained on --base's base with as many tuned "
                f"layers ({model.tuned_layers})"
            )
    states = [unpack_tuned(m.tuned_arrays, base) for m in (model, *soup)]
    heads = [model.layers]
    for other in soup:
        head, match = aligned_head(model.layers, other.layers)
        heads.append(head)
        print(f"  soup: head units matched at mean cosine {match:.3f}", file=sys.stderr)
    model.layers = [
        (np.mean([h[i][0] for h in heads], axis=0), np.mean([h[i][1] for h in heads], axis=0))
        for i in range(len(model.layers))
    ]
    return {name: np.mean([s[name] for s in states], axis=0) for name in states[0]}
