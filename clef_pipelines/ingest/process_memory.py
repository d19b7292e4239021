"""This process's memory, as the ingest reports it: resident now, peak so far, and a trim.

The index step of an in-process store (LanceDB) can set an ingest's peak memory, so the
`vector_indexes` asset shows these figures around the build; `bench/` reads the same ones.
"""

from __future__ import annotations

import contextlib
import os
import resource
from typing import Any

#: glibc's `mallopt` parameter number for the most malloc arenas a process may create.
_M_ARENA_MAX = -8
#: What ingestion processes use unless `MALLOC_ARENA_MAX` is set in the environment.
INGEST_MALLOC_ARENAS = 2


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


def _libc() -> Any:
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c"))


def trim_heap() -> None:
    """Hand the heap's freed memory back to the OS: glibc keeps it in its arenas until
    malloc_trim. Elsewhere (musl, macOS) there is nothing to call and nothing is done."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        _libc().malloc_trim(0)


def limit_malloc_arenas(arenas: int = INGEST_MALLOC_ARENAS) -> bool:
    """Let glibc create at most `arenas` malloc arenas in this process from now on, unless
    the environment's `MALLOC_ARENA_MAX` already says how many (glibc applied it at start).
    Returns whether a limit was set here.

    Why: glibc gives threads up to eight arenas a core, and each keeps the memory its
    threads freed. An ingest runs LanceDB's runtime and, in the store's upkeep, Lance's own,
    and what their arenas kept set the peak: 50,000 documents peaked at 1.62 GB without a
    limit and 1.33 GB with two arenas; 5,000 at 0.90 and 0.76 GB (docs/BENCHMARKS.md,
    "Two malloc arenas"). Set before the work starts: arenas already made are not given
    back. Elsewhere (musl, macOS) there is no such call and nothing is done."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        return bool(_libc().mallopt(_M_ARENA_MAX, arenas))
    except (OSError, AttributeError, TypeError):
        return False
