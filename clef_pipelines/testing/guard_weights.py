"""Another guard to the pipeline, for tests and benchmarks of what a guard change does: the
package's weights with their meta changed (a new name, another threshold) and so a new
`InjectionGuard.version`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def weights_copy(path: Path, **meta_changes: Any) -> Path:
    """Write the package's guard weights to ``path`` with ``meta_changes`` in their meta."""
    from clef_pipelines.guard.model import WEIGHTS_PATH

    with np.load(WEIGHTS_PATH, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = {**json.loads(bytes(arrays["meta"]).decode()), **meta_changes}
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    return path
