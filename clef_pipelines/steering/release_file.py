"""Where a collection's releases are kept: a module without polars, read by the CLI's
no-change check (`ingest.clean_runs`) as well as by `steering.release`."""

from __future__ import annotations

import os
from pathlib import Path


def release_path(data_dir: str | os.PathLike[str], collection: str) -> Path:
    return Path(data_dir) / "releases" / f"{collection}.json"
