"""The running heading path that every parser keeps while it walks a document."""

from __future__ import annotations


class HeadingTrail:
    """Headings above the current position, as (level, text) pairs from the top."""

    __slots__ = ("_stack",)

    def __init__(self) -> None:
        self._stack: list[tuple[int, str]] = []

    def enter(self, level: int, text: str) -> list[str]:
        """A heading at `level` closes every open heading at the same or a deeper level."""
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        return self.path()

    def path(self) -> list[str]:
        return [t for _, t in self._stack]
