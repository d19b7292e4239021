"""`limit_malloc_arenas`: ingestion processes keep to two glibc malloc arenas, unless the
environment says otherwise. Checked in child processes (a limit cannot be undone), by counting
the heaps glibc reports once eight threads have each allocated at the same time."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import ctypes, ctypes.util, sys, tempfile, threading
from clef_pipelines.ingest.process_memory import limit_malloc_arenas

if sys.argv[1] == "definitions":
    import clef_pipelines.definitions  # the code location, as a run worker loads it
    limited = True
else:
    limited = limit_malloc_arenas() if sys.argv[1] == "limit" else False
keep, barrier = [], threading.Barrier(8)

def work():
    keep.append(bytearray(100_000))  # above pymalloc's sizes: glibc's malloc, this thread's arena
    barrier.wait()  # all alive at once, so no thread inherits an exited one's arena

threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fopen.restype = ctypes.c_void_p
path = tempfile.mktemp()
f = ctypes.c_void_p(libc.fopen(path.encode(), b"w"))
libc.malloc_info(0, f)
libc.fclose(f)
print(limited, open(path).read().count("<heap nr="))
"""


def _glibc() -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return hasattr(libc, "malloc_info") and hasattr(libc, "mallopt")
    except OSError:
        return False


def _probe(mode: str, arena_env: str | None) -> tuple[bool, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env["PYTHONPATH"] = str(REPO)
    if arena_env is not None:
        env["MALLOC_ARENA_MAX"] = arena_env
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt / malloc_info only")
def test_ingest_processes_keep_to_two_malloc_arenas() -> None:
    limited, heaps = _probe("limit", None)
    assert limited
    assert heaps <= 2
    # Without the limit the same threads get an arena each: the probe can tell the difference.
    _, unlimited_heaps = _probe("none", None)
    assert unlimited_heaps > 2


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt / malloc_info only")
def test_malloc_arena_max_in_the_environment_wins() -> None:
    limited, heaps = _probe("limit", "3")
    assert not limited
    assert heaps == 3


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt / malloc_info only")
def test_loading_the_definitions_limits_the_arenas() -> None:
    """The code location sets the limit as it loads, before any step opens a store."""
    _, heaps = _probe("definitions", None)
    assert heaps <= 2


MMAP_PROBE = """
import ctypes, ctypes.util, sys, tempfile
from clef_pipelines.ingest.process_memory import limit_malloc_arenas

if sys.argv[1] == "limit":
    limit_malloc_arenas()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fopen.restype = ctypes.c_void_p

def mapped():
    path = tempfile.mktemp()
    f = ctypes.c_void_p(libc.fopen(path.encode(), b"w"))
    libc.malloc_info(0, f)
    libc.fclose(f)
    return int(open(path).read().split('<total type="mmap" count="')[-1].split('"')[0])

big = bytearray(4_000_000)  # mapped (above the 128 KB default); freeing it raises glibc's
del big  # dynamic threshold to 4 MB unless the threshold is fixed
before = mapped()
kept = bytearray(2_000_000)
print(mapped() - before)
"""


def _mapped_blocks(mode: str, threshold_env: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(REPO)
    if threshold_env is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = threshold_env
    out = subprocess.run(
        [sys.executable, "-c", MMAP_PROBE, mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[-1])


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt / malloc_info only")
def test_ingest_processes_fix_the_mmap_threshold() -> None:
    """A 2 MB block after a 4 MB one was freed: mapped of its own (so handed back when freed)
    with the ingest's fixed 1 MB threshold, from the heap under glibc's dynamic one."""
    assert _mapped_blocks("limit", None) == 1
    assert _mapped_blocks("none", None) == 0
    # The environment's own threshold wins (here: 8 MB, so the 2 MB block is not mapped).
    assert _mapped_blocks("limit", str(8 << 20)) == 0
