"""One cold `clef-pipelines compact` on the Compact benchmark's input, counted or traced
(issue 56, item 4).

    python -m lab.bench.compact_cold [--no-config] [--importtime FILE] [--modules]

The input, the fake System One server (40 ms) and the environment are those of
`python -m bench run compact` (bench/compact.py): the first SciFact train claim with 10
abstracts, `--json --budget 4000`, bytecode cached by one untimed run. With the bench's JSON
config file (Clef's cache off), or with `--no-config`: no file, `CLEF_BASE_URL` for the server,
in an empty folder (Clef's answer cache on by default, so the counted run, after the untimed
one, sends nothing). Prints the instructions of the whole process (valgrind's callgrind);
`--importtime FILE` writes `python -X importtime`'s report instead; `--modules` lists the
heavy packages the run imported (pydantic, yaml, stores, embedders, Dagster).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.compact import cases, child_env
from bench.retrieval import Fake

HEAVY = ("pydantic", "yaml", "dagster", "lancedb", "torch", "typer", "clef_pipelines.stores")
WATCH = (
    "import atexit, sys\n"
    f"atexit.register(lambda: print('IMPORTED', *[m for m in {HEAVY!r} if m in sys.modules], "
    "file=sys.stderr))\n"
    "from clef_pipelines.cli.main import app\n"
    "app(sys.argv[1:])\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-config", action="store_true")
    parser.add_argument("--importtime", type=Path)
    parser.add_argument("--modules", action="store_true")
    args = parser.parse_args()

    (case,), corpus = cases(1, 10)
    fake = Fake(40)
    root = Path(tempfile.mkdtemp(prefix="compact-cold-"))
    inp = root / "passages.jsonl"
    inp.write_text("".join(json.dumps({"id": d, "text": corpus[d]}) + "\n" for d in case["docs"]))
    env = {k: v for k, v in child_env().items() if not k.startswith("CLOUDFLARE_")}
    env.pop("CLEF_BASE_URL", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    cwd = root / "run"
    cwd.mkdir()
    if args.no_config:
        env["CLEF_BASE_URL"] = fake.url
    else:
        cfg = root / "ours.yaml"
        clef = {"backend": "self-hosted", "base_url": fake.url, "cache": False}
        cfg.write_text(json.dumps({"data_dir": str(root / "state"), "clef": clef}))
        env["CLEF_PIPELINES_CONFIG"] = str(cfg)
    cli = str(Path(sys.executable).with_name("clef-pipelines"))
    command = ["compact", "-q", case["claim"], "-i", str(inp), "--json", "--budget", "4000"]
    try:
        subprocess.run(
            [sys.executable, cli, *command], env=env, cwd=cwd, check=True, capture_output=True
        )
        if args.modules:
            proc = subprocess.run(
                [sys.executable, "-c", WATCH, *command],
                env=env,
                cwd=cwd,
                capture_output=True,
                text=True,
            )
            print(proc.stderr.strip().splitlines()[-1])
        elif args.importtime:
            proc = subprocess.run(
                [sys.executable, "-X", "importtime", cli, *command],
                env=env,
                cwd=cwd,
                capture_output=True,
                text=True,
            )
            args.importtime.write_text(proc.stderr)
            print(f"{len(proc.stderr.splitlines())} lines in {args.importtime}")
        else:
            proc = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--callgrind-out-file=/dev/null",
                    sys.executable,
                    cli,
                ]
                + command,
                env=env,
                cwd=cwd,
                capture_output=True,
                text=True,
            )
            found = re.search(r"Collected : (\d+)", proc.stderr)
            if proc.returncode != 0 or not found:
                raise SystemExit(f"callgrind failed: {proc.stderr[-2000:]}")
            print(f"{int(found.group(1)) / 1e9:.3f} G instructions")
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
