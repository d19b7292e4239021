"""Documents to blocks: loaders for folders and JSONL files, one parser per format.

Plain Python (no Dagster): the assets call `iter_source_entries` to list a source with raw
hashes, `SourceEntry.load()` for the documents that changed, then `parse_document`.
"""

from clef_pipelines.parsing.loaders import (
    SourceEntry,
    iter_source_entries,
    load_documents,
    load_file,
    resolve_source_path,
)
from clef_pipelines.parsing.models import Block, Document, ParseError
from clef_pipelines.parsing.parse import parse_blocks, parse_document

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
