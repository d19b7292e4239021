"""Line-number <-> character-offset arithmetic shared by the line-based parsers."""

from __future__ import annotations

import re

# markdown-it and our own parsers count \r\n, \r and \n each as one line break.
_NEWLINE = re.compile(r"\r\n?|\n")


class LineIndex:
    """Offsets of line starts in a text, so a line range maps to an exact character span."""

    __slots__ = ("text", "starts", "lines")

    def __init__(self, text: str) -> None:
        self.text = text
        starts = [0]
        lines: list[str] = []
        pos = 0
        for m in _NEWLINE.finditer(text):
            lines.append(text[pos : m.start()])
            pos = m.end()
            starts.append(pos)
        lines.append(text[pos:])
        self.starts = starts
        #: The lines without their line breaks.
        self.lines = lines

    def __len__(self) -> int:
        return len(self.lines)

    def span(self, first: int, stop: int) -> tuple[int, int]:
        """Span of lines [first, stop), trimmed of surrounding whitespace."""
        stop = max(stop, first + 1)
        start = self.starts[first]
        end = self.starts[stop] if stop < len(self.starts) else len(self.text)
        text = self.text
        while end > start and text[end - 1].isspace():
            end -= 1
        while start < end and text[start].isspace():
            start += 1
        return start, end


def verbatim(original: str, text: str, start: int, end: int) -> bool:
    return start >= 0 and original[start:end] == text
