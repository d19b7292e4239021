"""This process's peak resident memory over one phase of a benchmark (lab/bench/inventory_phases.py,
lab/bench/upkeep_phases.py). `VmHWM` rather than `process_memory.peak_rss_gb` (`ru_maxrss`):
writing 5 to `/proc/self/clear_refs` resets `VmHWM`, so each phase gets a peak of its own."""

from __future__ import annotations


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


def peak_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(f.read().split("VmHWM:")[1].split()[0]) / 1024
