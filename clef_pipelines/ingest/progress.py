"""In-process progress: every long stage reports (stage, done, total) here; listeners show it.

Stages: `list` (documents found), `parse` (documents), `screen` (blocks judged), `chunk`
(blocks chunked), `embed` (chunks), `sync` (batches written), `index` (the collection's rows,
when the index step builds or refreshes its indexes). `done` counts from the start of
the stage over every batch of the run, and each stage ends with a report of its totals. The
CLI draws a bar per stage (`cli.ingest_cmds`); `logged` writes the same figures to a log
(the Dagster run log) at least every `every_s` seconds and once with the totals, so a long
run launched from the UI says how far it is, too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str, int, int], None]
_listeners: list[Listener] = []
_lock = threading.Lock()

#: How often `logged` writes a line per running stage: the issue's bound is 30 s.
LOG_EVERY_S = 20.0


def add_listener(listener: Listener) -> None:
    with _lock:
        _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def report(stage: str, done: int, total: int) -> None:
    """`done` of `total` (0: not known yet) items of `stage` are through."""
    with _lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(stage, done, total)


def progress_line(stage: str, done: int, total: int, seconds: float) -> str:
    """`screen: 1,200/4,000 blocks (30/s, 1m33s left)`: what a log line says of a stage."""
    unit = {"list": "documents", "parse": "documents", "screen": "blocks", "chunk": "blocks"}
    unit |= {"embed": "chunks", "sync": "batches", "index": "rows"}
    rate = done / seconds if seconds > 0 else 0.0
    of = f"{done:,}/{total:,}" if total else f"{done:,}"
    parts = [f"{rate:,.0f}/s" if rate else ""]
    if total and rate and done < total:
        left = int((total - done) / rate)
        parts.append(f"{left // 60}m{left % 60:02d}s left")
    if total and done >= total:
        parts.append(f"done in {seconds:.0f}s")
    extra = ", ".join(p for p in parts if p)
    return f"{stage}: {of} {unit.get(stage, 'items')}" + (f" ({extra})" if extra else "")


class _Logged:
    """The latest figures of each stage, written by a heartbeat thread every `every_s`."""

    def __init__(self, log: Callable[[str], None], every_s: float) -> None:
        self.log = log
        self.every_s = every_s
        self.state: dict[str, tuple[int, int, float]] = {}  # stage -> done, total, started
        self.logged: dict[str, tuple[int, int]] = {}
        self.finished: set[str] = set()
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def listen(self, stage: str, done: int, total: int) -> None:
        with self.lock:
            started = self.state.get(stage, (0, 0, time.monotonic()))[2]
            self.state[stage] = (done, total, started)
            final = total > 0 and done >= total and stage not in self.finished
            if final:
                self.finished.add(stage)
        if final:  # the totals, at once
            self._write(stage)

    def _write(self, stage: str, *, again: bool = False) -> None:
        """Log the stage's figures, unless they were logged already (`again`: a stage still
        at work is logged on every beat, moved or not, so the log shows it is alive)."""
        with self.lock:
            done, total, started = self.state[stage]
            if self.logged.get(stage) == (done, total) and not again:
                return
            self.logged[stage] = (done, total)
        self.log(progress_line(stage, done, total, time.monotonic() - started))

    def beat(self) -> None:
        while not self.stop.wait(self.every_s):
            for stage in list(self.state):
                if stage not in self.finished:
                    self._write(stage, again=True)


@contextmanager
def logged(log: Callable[[str], None], every_s: float = LOG_EVERY_S) -> Iterator[None]:
    """Write each stage's progress with `log` while the block runs: every `every_s` seconds
    for a stage whose figures moved, at once when a stage reaches its total, and the last
    figures of every stage when the block ends."""
    sink = _Logged(log, every_s)
    add_listener(sink.listen)
    beat = threading.Thread(target=sink.beat, name="clef-progress-log", daemon=True)
    beat.start()
    try:
        yield
    finally:
        sink.stop.set()
        remove_listener(sink.listen)
        beat.join(timeout=5)
        for stage in list(sink.state):
            sink._write(stage)
