"""Document text is private: what we write is readable by its owner alone unless configured.

Stores, Parquet intermediates, the Clef cache and the Dagster instance are written by several
libraries (LanceDB, polars, sqlite, Dagster), so the one place that reaches all of them is the
process umask. `private_files: false` leaves the umask as the user set it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clef_pipelines.config import Settings
    from clef_pipelines.config_compact import CompactSections
    from clef_pipelines.config_sections import CompactSettings

PRIVATE_UMASK = 0o077  # files 0600, folders 0700


def apply_file_privacy(settings: Settings | CompactSettings | CompactSections) -> None:
    """Set the umask (when `private_files`) and make the data folder owner-only."""
    if not settings.private_files:
        return
    os.umask(PRIVATE_UMASK)
    data = settings.data_path
    # A data folder made earlier (or by another tool) with 755 is closed too: with the folder
    # 0700, files inside it that predate this setting are out of other users' reach. A folder
    # that does not exist yet is made 0700 by the umask when something is written.
    if data.is_dir() and data.stat().st_mode & 0o077:
        os.chmod(data, 0o700)
