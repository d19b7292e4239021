"""Peak memory of building the embeddings step's `vector` column for N chunks: per-row Python
float lists (`before`, what the step did until issue 13) against one float32 matrix cast to a
list column (`after`, what it does now). Run each way in a fresh process:

    .venv/bin/python -m lab.bench.vector_column 276000 before
    .venv/bin/python -m lab.bench.vector_column 276000 after

(276,000 chunks is what 50,000 synthetic documents of bench/scale.py yield.)
"""

import resource
import sys

import numpy as np
import polars as pl

n, how = int(sys.argv[1]), sys.argv[2]
m = np.random.default_rng(0).standard_normal((n, 384)).astype(np.float32)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if how == "before":
    col = pl.Series("vector", m.tolist(), dtype=pl.List(pl.Float32))
else:
    col = pl.Series("vector", m).cast(pl.List(pl.Float32))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(
    f"{how}: {n:,} x 384 vectors ({m.nbytes / 2**30:.2f} GB as float32): column build added {(peak - base) / 2**20:.2f} GB to the peak"
)
