"""SIGTERM put back to its default, so that the children Dagster stops with it stop.

Dagster stops each step's log-mirroring children (`tail -F` on the step's stdout and stderr
files) with SIGTERM and waits up to 30 s for each. A child inherits an *ignored* signal across
exec, and Dagster, after a run on the main thread, sets SIGTERM to whatever SIGINT is: ignored
in a process a shell started in the background without job control (CI runners, `nohup ... &`,
cron). Every later step then waited 30 s for each of its two tails, and an `ingest` of 14
steps sat for minutes after its work was done (the suite's "hung" subprocess tests).
"""

from __future__ import annotations

import signal
import threading


def let_children_be_terminated() -> None:
    """Give SIGTERM its default action again where it is ignored (only the main thread can)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
