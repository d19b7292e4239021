"""Documents to blocks: loaders for folders and JSONL files, one parser per format.

Plain Python (no Dagster): the assets call `iter_source_entries` to list a source with raw
hashes, `SourceEntry.load()` for the documents that changed, then `parse_document`. Names are
imported on first use (PEP 562), so `clef_pipelines.parsing.models` alone does not import the
loaders (and polars behind them) on the query path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clef_pipelines.parsing.loaders import (
        iter_source_entries,
        load_documents,
        load_file,
        resolve_source_path,
    )
    from clef_pipelines.parsing.models import Block, Document, ParseError, SourceEntry
    from clef_pipelines.parsing.parse import parse_blocks, parse_document

_HOMES = {
    "SourceEntry": "models",
    "iter_source_entries": "loaders",
    "load_documents": "loaders",
    "load_file": "loaders",
    "resolve_source_path": "loaders",
    "Block": "models",
    "Document": "models",
    "ParseError": "models",
    "parse_blocks": "parse",
    "parse_document": "parse",
}

__all__ = [
    "Block",
    "Document",
    "ParseError",
    "SourceEntry",
    "iter_source_entries",
    "load_documents",
    "load_file",
    "parse_blocks",
    "parse_document",
    "resolve_source_path",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
