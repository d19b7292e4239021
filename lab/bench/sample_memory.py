"""Sample a running process's resident memory, split into anonymous memory and mapped files.

    # beside a benchmark: the ingestion child of bench/scale.py, every 2 s
    .venv/bin/python -m lab.bench.sample_memory --match "bench/scale.py.*--child" --out /tmp/samples.log
    # afterwards: percentiles of a window (e.g. the store_sync step's minutes)
    .venv/bin/python -m lab.bench.sample_memory --summarise /tmp/samples.log --from 14:06:00 --to 14:16:25

Each line: time, pid, `VmRSS`, `VmHWM`, `RssAnon` (heap and anonymous maps) and `RssFile`
(mapped files: the libraries' code) in GB, from `/proc/<pid>/status`. It waits for a process
whose command line matches and follows the first one found; it runs until stopped.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
_LINE = re.compile(r"^(\S+) pid=\d+ rss=(\S+) hwm=\S+ anon=(\S+) file=\S+$")


def _pid(pattern: str) -> str | None:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return found[0] if found else None


def sample(pattern: str, out: Path, every_s: float) -> None:
    with out.open("a", encoding="utf-8", buffering=1) as f:
        while True:
            pid = _pid(pattern)
            try:
                status = Path(f"/proc/{pid}/status").read_text() if pid else ""
            except OSError:  # the process ended between pgrep and the read
                status = ""
            kb = dict(re.findall(r"^(\w+):\s+(\d+) kB", status, re.M))
            if all(k in kb for k in _FIELDS):
                gb = [int(kb[k]) / 2**20 for k in _FIELDS]
                f.write(
                    f"{time.strftime('%H:%M:%S')} pid={pid} rss={gb[0]:.3f} hwm={gb[1]:.3f} "
                    f"anon={gb[2]:.3f} file={gb[3]:.3f}\n"
                )
            time.sleep(every_s)


def summarise(log: Path, start: str, end: str) -> None:
    rss: list[float] = []
    anon: list[float] = []
    for line in log.read_text(encoding="utf-8").splitlines():
        m = _LINE.match(line)
        if m and start <= m.group(1) <= end:
            rss.append(float(m.group(2)))
            anon.append(float(m.group(3)))
    if not rss:
        raise SystemExit(f"{log}: no samples between {start} and {end}")

    def q(values: list[float], p: float) -> float:
        return sorted(values)[int(p * (len(values) - 1))]

    for name, values in (("rss", rss), ("anon", anon)):
        print(
            f"{name}: {len(values)} samples, p10 {q(values, 0.1):.3f} median {q(values, 0.5):.3f} "
            f"max {max(values):.3f} GB"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--match", help="pgrep -f pattern of the process to follow")
    ap.add_argument("--out", type=Path, help="log to append samples to")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    ap.add_argument("--summarise", type=Path, help="a log to summarise instead")
    ap.add_argument("--from", dest="start", default="00:00:00")
    ap.add_argument("--to", dest="end", default="23:59:59")
    args = ap.parse_args()
    if args.summarise:
        summarise(args.summarise, args.start, args.end)
    elif args.match and args.out:
        sample(args.match, args.out, args.every)
    else:
        ap.error("give --match and --out to sample, or --summarise LOG")


if __name__ == "__main__":
    main()
