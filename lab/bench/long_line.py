"""Peak memory of `inspect` and `ingest` on one long line of Markdown (issue 7, item 9).

    python -m lab.bench.long_line --mb 5

Writes a file of one line (words, no sentence ends: the worst case for the chunker, which then
cuts between words) and a tiny file, and runs the real CLI on each in a child process (hash
embedder, LanceDB), reporting each child's peak resident memory and wall time. The difference
between the two is what the long line costs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORDS = ["alpha", "beta", "gamma", "delta", "token", "sync", "folder", "client", "server"]

CHILD = """
import resource, sys
from clef_pipelines.cli.main import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    print("PEAK_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def run(args: list[str], cwd: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    env["DAGSTER_HOME"] = str(cwd / "dagster")
    started = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", CHILD, *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if res.returncode != 0:
        raise SystemExit(f"{args}: exit {res.returncode}\n{res.stderr[-3000:]}")
    peak_kib = int(res.stderr.rsplit("PEAK_KIB", 1)[1].split()[0])
    return {"peak_mib": round(peak_kib / 1024, 1), "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=5.0, help="Size of the one-line file.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-long-line-") as tmp:
        root = Path(tmp)
        target = int(args.mb * 1_000_000)
        parts, size, i = [], 0, 0
        while size < target:
            word = WORDS[(i * 7) % len(WORDS)] + str(i % 101)
            parts.append(word)
            size += len(word) + 1
            i += 1
        (root / "long").mkdir()
        (root / "long" / "long.md").write_text(" ".join(parts))
        (root / "small").mkdir()
        (root / "small" / "small.md").write_text("# Small\n\nOne short paragraph.\n")
        cfg = root / "c.yaml"
        cfg.write_text(
            f"data_dir: {root / 'state'}\nembedder: {{kind: hash, dimension: 64}}\n"
            "store: {kind: lancedb}\n"
        )
        out: dict[str, object] = {
            "file_mb": round((root / "long" / "long.md").stat().st_size / 1e6, 2)
        }
        for name in ("small", "long"):
            path = root / name / f"{name}.md"
            out[f"inspect_{name}"] = run(["inspect", str(path), "--json", "-c", str(cfg)], root)
            out[f"ingest_{name}"] = run(
                ["ingest", str(root / name), "--json", "--collection", name, "-c", str(cfg)], root
            )
        out["loadavg_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
