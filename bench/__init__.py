"""The maintained product benchmarks: one module each, one entry point.

    python -m bench list                   # every benchmark, one line each
    python -m bench run NAME [flags]       # one benchmark (its old script's flags, --quick, --json)
    python -m bench run --quick-all        # every benchmark with --quick (what `make bench` runs)

See bench/README.md. One-off investigations live in lab/bench/.
"""
