"""A process started with SIGTERM ignored (a background job of a shell without job control:
CI runners, `nohup ... &`) gives its children a SIGTERM that works, as Dagster needs to stop
each step's log tails (`clef_pipelines/child_signals.py`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap


def _ignored_in_child(before_spawn: str) -> bool:
    """Whether a child of a process that started with SIGTERM and SIGINT ignored, and ran
    ``before_spawn``, has SIGTERM ignored (read from /proc/<pid>/status of a real child)."""
    code = textwrap.dedent(
        f"""
        import subprocess
        {before_spawn}
        out = subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True,
                             text=True, check=True).stdout
        print(int(out.split()[1], 16) >> 14 & 1)
        """
    )

    def ignore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=ignore, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "1"


def test_children_inherit_an_ignored_sigterm_unless_it_is_given_back() -> None:
    assert _ignored_in_child("pass")  # what Dagster's tails got before
    fixed = "from clef_pipelines.child_signals import let_children_be_terminated\n"
    assert not _ignored_in_child(fixed + "        let_children_be_terminated()")


def test_the_command_line_gives_sigterm_back_before_any_command() -> None:
    """The console script's entry (`cli.main.app`) resets it first thing; `--version`-like
    help output is enough to pass through it."""
    run_help = (
        "from clef_pipelines.cli.main import app\n"
        "        try:\n"
        "            app(['--help'])\n"
        "        except SystemExit:\n"
        "            pass"
    )
    assert not _ignored_in_child(run_help)
