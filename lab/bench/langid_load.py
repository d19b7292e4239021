"""Probe: py3langid's model loaded as py3langid loads it, against the memory-mapped cache.

    .venv/bin/python -m lab.bench.langid_load

Each way in a fresh process: the seconds to load, and the resident memory added by the load
and by ranking 200 SciFact abstracts (`/proc/self/statm`; a mapped page counts once read). The cache is made first (`guard.langid_model`), so the mapped load is
what every screening process after the first one pays.
"""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
import json, sys, time
TEXTS = [json.loads(line)['text'] for line, _ in zip(open(sys.argv[2]), range(200))]
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
import numpy, py3langid.langid
before, started = rss(), time.perf_counter()
if sys.argv[1] == 'py3langid':
    from py3langid.langid import MODEL_FILE, LanguageIdentifier
    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
else:
    from clef_pipelines.guard.langid_model import load_identifier
    identifier = load_identifier()
loaded = time.perf_counter() - started
# What a screen touches: a few documents' ranks (mapped pages count once read).
for text in TEXTS:
    identifier.rank(text)
print(f'{sys.argv[1]}: loaded in {loaded:.2f} s; +{rss() - before:.0f} MB resident after '
      f'loading and ranking {len(TEXTS)} texts')
"""


def main() -> None:
    from bench._common import SCIFACT
    from clef_pipelines.guard.langid_model import load_identifier

    load_identifier()  # the cache exists from here on
    corpus = str(SCIFACT / "corpus.jsonl")  # 200 SciFact abstracts to rank
    for way in ("py3langid", "mapped"):
        subprocess.run([sys.executable, "-c", _CHILD, way, corpus], check=True)


if __name__ == "__main__":
    main()
