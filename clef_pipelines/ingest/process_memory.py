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
#: glibc's `mallopt` parameter number for the block size from which malloc maps memory of
#: its own for a block (and unmaps it when the block is freed).
_M_MMAP_THRESHOLD = -3
#: The threshold ingestion processes fix unless `MALLOC_MMAP_THRESHOLD_` is set.
INGEST_MMAP_THRESHOLD = 1 << 20


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
    Returns whether a limit was set here. Also fixes the mmap threshold (`fix_mmap_threshold`):
    the one call sets up an ingestion process's malloc, here and in the benchmarks.

    Why: glibc gives threads up to eight arenas a core, and each keeps the memory its
    threads freed. An ingest runs LanceDB's runtime and, in the store's upkeep, Lance's own,
    and what their arenas kept set the peak: 50,000 documents peaked at 1.62 GB without a
    limit and 1.33 GB with two arenas; 5,000 at 0.90 and 0.76 GB (docs/BENCHMARKS.md,
    "Two malloc arenas"). Set before the work starts: arenas already made are not given
    back. Elsewhere (musl, macOS) there is no such call and nothing is done."""
    fix_mmap_threshold()
    return _mallopt_unless_set("MALLOC_ARENA_MAX", _M_ARENA_MAX, arenas)


def fix_mmap_threshold(size: int = INGEST_MMAP_THRESHOLD) -> bool:
    """Blocks of `size` bytes or more get mappings of their own, handed back to the OS as
    soon as they are freed, unless the environment's `MALLOC_MMAP_THRESHOLD_` says otherwise.
    Returns whether the threshold was set here. `limit_malloc_arenas` calls it, so every
    process that limits its arenas for ingestion also fixes this.

    Why: glibc's threshold is dynamic. Each time a mapped block is freed it rises to that
    block's size (up to 32 MB), and from then on buffers of a few MB (Arrow batches, Lance's
    write and upkeep buffers) come from the heap, where freed memory stays resident until a
    trim, between the sync's upkeeps. A fixed 1 MB threshold (which also turns the dynamic
    rise off) halved the heap's free-but-kept memory in the sync of 758,048 rows (0.17 to 0.08
    GB) and lowered its peak from 0.83 to 0.77 GB, at the same speed (docs/BENCHMARKS.md,
    "A fixed mmap threshold")."""
    return _mallopt_unless_set("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, size)


def _mallopt_unless_set(env_var: str, param: int, value: int) -> bool:
    """glibc's `mallopt(param, value)`, unless the environment's `env_var` (the same setting,
    which glibc applied at start) says otherwise; whether it was set here. Not glibc: False."""
    if os.environ.get(env_var):
        return False
    try:
        return bool(_libc().mallopt(param, value))
    except (OSError, AttributeError, TypeError):
        return False
