"""The chunk type handed to embedding and storage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ChunkerName = Literal["structural", "fixed", "clef"]
SECTION_SEPARATOR = " > "


def section_path_of(heading_path: list[str] | tuple[str, ...]) -> str:
    return SECTION_SEPARATOR.join(h for h in heading_path if h)


def make_embed_text(title: str, section_path: str, text: str) -> str:
    """What gets embedded: the context a reader would see, then the chunk text.

    Format: f"{title}\\n{section_path}\\n\\n{text}", skipping an empty title or section
    path; the title is also skipped when the section path already starts with it (a
    Markdown guide whose H1 is its title). With neither, just the text.
    """
    title = title.strip()
    header: list[str] = []
    if title and not (section_path == title or section_path.startswith(title + SECTION_SEPARATOR)):
        header.append(title)
    if section_path:
        header.append(section_path)
    if not header:
        return text
    return "\n".join(header) + "\n\n" + text


@dataclass(slots=True)
class Chunk:
    """A piece of a document sized for embedding and retrieval.

    `text` is what an LLM reads; `embed_text` adds title and section path (see
    `make_embed_text`). `char_start`/`char_end` span the chunk's source in the original
    document text (-1 when the blocks' offsets are unknown). `tokens` counts `text` with the
    MiniLM WordPiece tokenizer (or the estimate, see `tokens.py`).
    """

    doc_id: str
    chunk_index: int
    text: str
    embed_text: str
    section_path: str
    char_start: int
    char_end: int
    tokens: int
    chunker: ChunkerName
