"""This process's memory, as the ingest reports it: resident now, peak so far, and a trim.

The index step of an in-process store (LanceDB) can set an ingest's peak memory, so the
`vector_indexes` asset shows these figures around the build; `bench/` reads the same ones.
"""

from __future__ import annotations

import contextlib
import resource


def rss_gb() -> float:
    """Resident memory now in GiB (statm's second field); -1.0 without /proc (not Linux)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return -1.0
    return round(pages * resource.getpagesize() / 1024**3, 3)


def peak_rss_gb() -> float:
    """This process's peak resident memory so far in GiB (ru_maxrss is in KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3)


def trim_heap() -> None:
    """Hand the heap's freed memory back to the OS: glibc keeps it in its arenas until
    malloc_trim. Elsewhere (musl, macOS) there is nothing to call and nothing is done."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
