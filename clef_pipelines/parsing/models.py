"""Plain types at the parsing edge: documents in, blocks out, a listed entry, the one error type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from clef_pipelines.config import ParsingConfig

DocFormat = Literal["md", "txt", "rst", "html", "pdf", "docx"]
BlockKind = Literal["heading", "paragraph", "list_item", "table", "code", "quote"]
ErrorReason = Literal[
    "unreadable",
    "binary",
    "empty",
    "encoding",
    "oversize",
    "malformed",
    "unsupported",
    "outside_source",
    "metadata",
    "invalid_text",
    "too_large",
    # A remote source's listing failed: its stored documents are kept (`parsing.remote`).
    "unlisted",
]
MetaValue = str | int | float | bool

#: Formats whose content is text (decoded with ParsingConfig.encodings); the others are bytes.
TEXT_FORMATS: frozenset[str] = frozenset({"md", "txt", "rst", "html"})


class ParseError(ValueError):
    """One document could not be read or parsed.

    `reason` is a short machine code (see `ErrorReason`); the message names the file (and the
    line, for a JSONL source) so a person can find and fix it.
    """

    def __init__(self, reason: ErrorReason, message: str) -> None:
        super().__init__(message)
        self.reason: ErrorReason = reason
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        # Keep `reason` across pickling (Dagster and multiprocessing pickle exceptions).
        return (ParseError, (self.reason, self.message))


@dataclass(slots=True)
class Document:
    """One source document.

    `content` is the decoded text for md/txt/rst/html and the raw bytes for pdf/docx. Block
    offsets refer to `content` for text formats (a UTF-8 BOM is dropped when decoding, so
    offset 0 is the first character after it) and to the extracted text for pdf/docx.
    """

    doc_id: str
    source_uri: str
    title: str
    content: str | bytes
    format: DocFormat
    metadata: dict[str, MetaValue] = field(default_factory=dict)
    #: sha256 of the raw bytes (for JSONL: of the record's canonical JSON).
    raw_hash: str = ""
    # Blocks parsed while loading (to find the title), reused by `parse_document`.
    _blocks: list[Block] | None = field(default=None, repr=False, compare=False)
    #: (parsing.max_unpacked_bytes, parsing.max_archive_entries) for an archive (docx); None:
    #: the defaults.
    archive_limits: tuple[int, int] | None = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        if isinstance(self.content, bytes):
            raise TypeError(f"{self.doc_id}: a {self.format} document has bytes, not text")
        return self.content


@dataclass(slots=True)
class Block:
    """A structural piece of a document.

    `heading_path` lists the headings above the block (for a heading: its parents plus
    itself). `char_start`/`char_end` delimit the block's source span in the original text
    (-1/-1 when unknown, e.g. HTML text that could not be found verbatim). `verbatim` is true
    when `text == original[char_start:char_end]`, which lets chunkers compute exact offsets
    of sentences inside the block.
    """

    kind: BlockKind
    text: str
    heading_path: list[str]
    level: int
    char_start: int
    char_end: int
    order: int = 0
    verbatim: bool = False


@dataclass(frozen=True)
class SourceEntry:
    """One document of a source, listed but not yet decoded or parsed."""

    source: str
    doc_id: str
    source_uri: str
    format: DocFormat | None
    #: sha256 hex of the raw bytes (JSONL: of the record's canonical JSON); None on error.
    raw_hash: str | None
    #: Why the document cannot be ingested, found while listing (None when it looks fine).
    error: ParseError | None = None
    _load: Callable[[ParsingConfig | None], Document] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def ok(self) -> bool:
        return self.error is None

    def load(self, parsing_cfg: ParsingConfig | None = None) -> Document:
        """Decode into a Document; raises ParseError (the listing error, or a new one).

        Without `parsing_cfg`, the settings the source was listed with apply.
        """
        if self.error is not None:
            raise self.error
        assert self._load is not None
        return self._load(parsing_cfg)


def is_screenable(kind: str, text: str | None, kinds: Sequence[str]) -> bool:
    """Whether the paragraph screen judges a block: one of ``kinds`` (``steering.screen.kinds``),
    holding text. Here, beside the block kinds, because both the screen and the guard's check
    (``clef-pipelines guard FILE``) pick blocks by it."""
    return kind in kinds and bool((text or "").strip())
