"""`python -m bench list | run NAME [flags] | run --quick-all [NAME ...]`."""

from __future__ import annotations

import sys

from bench._common import BENCHMARKS, describe, module, run_benchmark, run_quick_all

USAGE = """usage: python -m bench list
       python -m bench run NAME [--quick] [--json [OUT]] [the benchmark's own flags]
       python -m bench run NAME -- [the benchmark's own flags]
       python -m bench run --quick-all [NAME ...]
       python -m bench run NAME --help"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "list":
        width = max(map(len, BENCHMARKS))
        for name in BENCHMARKS:
            print(f"{name:<{width}}  {describe(module(name))}")
        return 0
    if command == "run" and rest and rest[0] == "--quick-all":
        return run_quick_all(rest[1:] or None)
    if command == "run" and rest and not rest[0].startswith("-"):
        name, flags = rest[0], rest[1:]
        if flags[:1] == ["--"]:
            flags = flags[1:]
        return run_benchmark(name, flags)
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
