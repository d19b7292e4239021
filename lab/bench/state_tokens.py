"""The CPU of estimating a Clef state's tokens: the whole rendering split against the state
object counted from its texts' cached splits and the seams (`clef.tokens.state_tokens`).

    .venv/bin/python -m lab.bench.state_tokens [--states 40] [--passages 15] [--reps 5]

Builds states shaped like a query's requests from SciFact abstracts (`../shared/data/scifact`):
a packed classify state (the claim and --passages abstracts under `s1`, `s2` ...) and the
gate's (the claim and a list of 8 abstracts), the abstracts overlapping from state to state as
recalled passages do. Prints the median CPU milliseconds a state (`time.process_time`, --reps
passes) of: the whole rendering split (what every new state cost before), the object count the
first time its texts are seen (their splits not cached), and once they were. Checks that every
count is the whole rendering's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "scifact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=40)
    parser.add_argument("--passages", type=int, default=15)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    from clef_pipelines.clef import tokens
    from clef_pipelines.clef.tokens import EstimateCounter, state_tokens
    from clef_pipelines.clef.wire import render_state

    with (DATA / "corpus.jsonl").open() as fh:
        docs = [json.loads(line)["text"] for _, line in zip(range(2000), fh, strict=False)]
    with (DATA / "queries.jsonl").open() as fh:
        claims = [json.loads(line)["text"] for _, line in zip(range(args.states), fh, strict=False)]
    states: list[dict[str, Any]] = []
    for i, claim in enumerate(claims):
        texts = [docs[(i * 5 + j) % len(docs)] for j in range(args.passages)]
        states.append({"query": claim, **{f"s{j + 1}": t for j, t in enumerate(texts)}})
        states.append({"query": claim, "passages": texts[:8]})
    est = EstimateCounter()

    def whole(state: dict[str, Any]) -> int:
        return tokens._estimate(render_state(state))  # the split, no whole-text cache

    def per_state(fn: Any) -> float:
        c = time.process_time()
        for s in states:
            fn(s)
        return (time.process_time() - c) / len(states) * 1e3

    assert all(state_tokens(est, s) == whole(s) for s in states)
    rows: dict[str, list[float]] = {
        "whole rendering split": [],
        "split cache emptied before the pass": [],
        "texts seen": [],
    }
    load = os.getloadavg()[0]
    for _ in range(args.reps):
        rows["whole rendering split"].append(per_state(whole))
        tokens._block.cache_clear()
        rows["split cache emptied before the pass"].append(
            per_state(lambda s: state_tokens(est, s))
        )
        rows["texts seen"].append(per_state(lambda s: state_tokens(est, s)))
    chars = statistics.mean(len(render_state(s)) for s in states)
    print(
        f"{len(states)} states (classify and gate, {chars:,.0f} characters on average), "
        f"{args.reps} passes, load average {load:.2f} before / {os.getloadavg()[0]:.2f} after; "
        "every count equals the whole rendering's\n"
    )
    print("| count | CPU ms a state, median (best) |")
    print("|---|---|")
    for name, v in rows.items():
        print(f"| {name} | {statistics.median(v):.2f} ({min(v):.2f}) |")


if __name__ == "__main__":
    main()
