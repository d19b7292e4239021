"""Wall seconds of an embedding pass through `embedder.executor: ray` on a local Ray, for
comparing the executor of two commits (the driver's loop, not the model: hash embedder).

    PYTHONPATH=$PWD .venv/bin/python -m lab.bench.ray_executor --compare main,.,main,. \\
        [--texts 32000] [--batch-size 16] [--actors 2] [--repeats 3]

Each revision runs in its own process (`--code DIR`, see `_code_at`), which starts a local Ray
with 2 CPUs, opens the runner (actors up, one warm-up pass), then times `--repeats` passes over
the same texts; prints the best and median wall, batches per second and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.bench._code_at import code_at, code_env, module_cmd, reexec_with_code


def _texts(n: int) -> list[str]:
    words = ["token", "rotate", "policy", "cluster", "vector", "batch", "refresh", "source"]
    return [" ".join(words[(i + j) % 8] for j in range(20 + i % 30)) + f" n{i}" for i in range(n)]


def measure(args: argparse.Namespace) -> dict[str, float]:
    import ray

    from clef_pipelines.clef.backends.ray_pool import local_ray_env
    from clef_pipelines.config import EmbedderConfig
    from clef_pipelines.embedding import make_embedder
    from clef_pipelines.embedding.executor import open_batch_runner

    local_ray_env()
    ray.init(num_cpus=2, namespace="lab-ray-executor", include_dashboard=False, log_to_driver=False)
    cfg = EmbedderConfig(
        kind="hash",
        dimension=384,
        batch_size=args.batch_size,
        executor="ray",
        ray={"namespace": "lab-ray-executor", "num_actors": args.actors},
    )
    texts = _texts(args.texts)
    batches = [texts[i : i + args.batch_size] for i in range(0, len(texts), args.batch_size)]
    walls = []
    try:
        with open_batch_runner(cfg, make_embedder(cfg)) as run:
            rows = sum(len(out) for out in run(batches[: 4 * args.actors]))  # actors up
            for _ in range(args.repeats):
                started = time.perf_counter()
                rows = sum(len(out) for out in run(batches))
                walls.append(time.perf_counter() - started)
                assert rows == len(texts)
    finally:
        ray.shutdown()
    return {
        "batches": len(batches),
        "best_s": min(walls),
        "median_s": statistics.median(walls),
        "batches_per_s": len(batches) / min(walls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", default=".", help="Revisions, comma-separated (. = tree).")
    parser.add_argument("--texts", type=int, default=32000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.code is not None:  # a child: one revision
        print(json.dumps(measure(args)))
        return
    flags = ["--texts", str(args.texts), "--batch-size", str(args.batch_size)]
    flags += ["--actors", str(args.actors), "--repeats", str(args.repeats)]
    with tempfile.TemporaryDirectory() as tmp:
        codes: dict[str, Path] = {}  # a revision named twice (main,.,main,.) alternates
        for rev in args.compare.split(","):
            code = codes.get(rev) or codes.setdefault(rev, code_at(rev, Path(tmp)))
            done = subprocess.run(
                module_cmd("lab.bench.ray_executor", *flags, "--code", str(code)),
                env=code_env(code),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                sys.exit(f"{rev}: {done.stderr[-2000:]}")
            got = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{rev}: {got['batches']} batches of {args.batch_size}, {args.actors} actors: "
                f"best {got['best_s']:.2f} s, median {got['median_s']:.2f} s, "
                f"{got['batches_per_s']:.0f} batches/s (load {os.getloadavg()[0]:.1f})"
            )


if __name__ == "__main__":
    reexec_with_code("lab.bench.ray_executor")
    main()
