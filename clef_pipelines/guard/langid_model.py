"""py3langid's model, decompressed once per machine and memory-mapped after that.

Why: py3langid ships its model LZMA-compressed (4.6 MB, 68 MB unpacked) and unpacks it in
every process that names a language: the screen of every ingest run, however few documents
changed: 0.4 s and 75 MB resident to load it and rank 200 abstracts, against 0.01 s and 46 MB
mapped (`python -m lab.bench.langid_load`, issue 56). Unpacked once into the user's
cache folder as plain `.npy` arrays, it is memory-mapped instead: a process reads only the
pages its texts touch (the state machine's visited states, the visited features' rows).

The arrays are py3langid's own (its loader unpacks them the first time), so the identifier
ranks exactly as py3langid's loader would (`tests/guard/test_language.py` checks it). The
cache is keyed by py3langid's version and its model file's size and modification time, written
to a temporary folder and renamed into place (two processes may race; one wins, both use it),
and never required: without a writable cache folder the model is unpacked in memory, as before.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: The arrays of a cached model, by py3langid's names (`modelio.load_model`'s order).
_ARRAYS = ("ptc", "pc", "nextmove", "nextmove_row", "out_feat")


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/clef-pipelines`, or `~/.cache/clef-pipelines`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clef-pipelines"


def _model_file() -> Path:
    from py3langid.langid import MODEL_DIR, MODEL_FILE

    return Path(MODEL_DIR) / MODEL_FILE


def cache_folder(model_file: Path | None = None) -> Path:
    """Where the unpacked model of this py3langid lives."""
    import py3langid

    model_file = model_file or _model_file()
    st = model_file.stat()
    # The package's own attribute: `importlib.metadata` would scan every installed distribution.
    version = py3langid.__version__
    return cache_root() / f"py3langid-{version}-{st.st_size}-{st.st_mtime_ns}"


def _unpack(model_file: Path, folder: Path) -> None:
    """py3langid's arrays, unpacked by its own loader, saved as `.npy` files in `folder`
    (written beside it and renamed in)."""
    from py3langid.modelio import load_model

    ptc, pc, classes, nextmove, row, out = load_model(model_file)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        arrays = {
            "ptc": np.asarray(ptc),
            "pc": np.asarray(pc),
            "nextmove": np.frombuffer(nextmove, dtype=f"u{nextmove.itemsize}"),
            "nextmove_row": np.frombuffer(row, dtype=f"u{row.itemsize}"),
            "out_feat": np.asarray(out, dtype=np.int32),
        }
        for name, value in arrays.items():
            np.save(staging / f"{name}.npy", value)
        (staging / "classes.json").write_text(json.dumps(list(classes)), encoding="utf-8")
        try:
            staging.rename(folder)
        except OSError:  # another process renamed its copy in first: use that one
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _mapped(folder: Path) -> tuple[Any, ...]:
    """The cached arrays as py3langid's identifier takes them: the class and feature tables
    as read-only memory maps, the state machine as memoryviews of maps (indexing gives plain
    ints, as py3langid's own `array` does)."""
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
    classes = json.loads((folder / "classes.json").read_text(encoding="utf-8"))
    return (
        arrays["ptc"],
        np.asarray(arrays["pc"]),
        classes,
        memoryview(arrays["nextmove"]),
        memoryview(arrays["nextmove_row"]),
        memoryview(arrays["out_feat"]),
    )


def load_identifier(norm_probs: bool = True) -> Any:
    """py3langid's `LanguageIdentifier` over the cached model (unpacked there first if need
    be), or over the model unpacked in memory when the cache cannot be used."""
    from py3langid.langid import LanguageIdentifier

    model_file = _model_file()
    try:
        folder = cache_folder(model_file)
        if not folder.is_dir():  # renamed in whole, so a folder present is complete
            _unpack(model_file, folder)
        try:
            ptc, pc, classes, nextmove, row, out = _mapped(folder)
        except (OSError, ValueError, KeyError):  # damaged since (a file cut short, removed)
            shutil.rmtree(folder, ignore_errors=True)
            _unpack(model_file, folder)
            ptc, pc, classes, nextmove, row, out = _mapped(folder)
    except (OSError, ValueError, KeyError):
        # A read-only home, a full disk: the in-memory load, as py3langid's own.
        return LanguageIdentifier.from_model_file(model_file, norm_probs=norm_probs)
    return LanguageIdentifier(ptc, pc, classes, nextmove, out, norm_probs=norm_probs, tk_row=row)


__all__ = ["cache_folder", "cache_root", "load_identifier"]
