"""Collects blocks in order, filling in heading paths, order indexes and `verbatim`."""

from __future__ import annotations

from clef_pipelines.parsing.headings import HeadingTrail
from clef_pipelines.parsing.models import Block, BlockKind


class BlockBuilder:
    def __init__(self, original: str | None) -> None:
        self.original = original
        self.trail = HeadingTrail()
        self.blocks: list[Block] = []

    def heading(self, text: str, level: int, start: int, end: int) -> None:
        text = text.strip()
        if not text:
            return
        path = self.trail.enter(level, text)
        self._append("heading", text, path, level, start, end)

    def add(self, kind: BlockKind, text: str, start: int, end: int) -> None:
        # Code keeps its indentation; everything else loses surrounding blank space.
        text = text.strip("\n") if kind == "code" else text.strip()
        if not text.strip():
            return
        self._append(kind, text, self.trail.path(), 0, start, end)

    def _append(
        self, kind: BlockKind, text: str, path: list[str], level: int, start: int, end: int
    ) -> None:
        exact = self.original is not None and start >= 0 and self.original[start:end] == text
        self.blocks.append(
            Block(kind, text, path, level, start, end, order=len(self.blocks), verbatim=exact)
        )
