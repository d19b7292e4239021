"""A fast rule-based sentence segmenter that returns character spans.

A boundary is sentence punctuation (. ! ? or an ellipsis), optional closing quotes or
brackets, then blank space, then something that can start a sentence (an upper-case letter,
a digit, an opening quote or bracket). Blank lines are always boundaries. Not boundaries:

* abbreviations (`Dr.`, `e.g.`, `i.e.`, `vs.`, `Fig.`, `et al.`...)
  and initialisms (`U.S.`, `J.R.R.`) followed by more text;
* decimals, versions, URLs and e-mail addresses: their dots are not followed by blank space;
* an ellipsis followed by a lower-case word ("wait... then").

pysbd handles more cases but is about 20x slower, which matters over thousands of abstracts.
"""

from __future__ import annotations

import re

_CANDIDATE = re.compile(
    r"""
    (?:\.{3}|…|[.!?])+          # terminal punctuation (ellipsis included)
    ["'”’)\]]*                  # closing quotes / brackets
    (?=\s+["'“‘(\[]?[A-Z0-9À-Ý]) # blank space, then a plausible sentence start
    """,
    re.X,
)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
# Compared lower-case, without the final dot. Words that also end sentences (sun, sat, etc)
# are left out on purpose.
_ABBREVIATIONS = frozenset(
    {
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "rev",
        "lt",
        "sgt",
        "capt",
        "gov",
        "vs",
        "al",
        "fig",
        "figs",
        "eq",
        "eqs",
        "no",
        "nos",
        "vol",
        "vols",
        "pp",
        "ch",
        "approx",
        "ca",
        "cf",
        "eds",
        "dept",
        "univ",
        "inc",
        "ltd",
        "corp",
        "jan",
        "feb",
        "apr",
        "aug",
        "sept",
        "oct",
        "nov",
        "dec",
        "ave",
        "blvd",
        "e.g",
        "i.e",
        "a.m",
        "p.m",
        "viz",
        "resp",
    }
)
# Single letters with dots: initialisms (U.S., e.g., J.R.R.) and middle initials (J.).
_INITIALISM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]?$")


def _is_abbreviation(text: str, end_of_punct: int) -> bool:
    """Is the '.'-terminated word ending at `end_of_punct` an abbreviation?"""
    start = end_of_punct - 1
    while start > 0 and not text[start - 1].isspace() and text[start - 1] not in "([\"'“":
        start -= 1
    word = text[start:end_of_punct]
    if not word.endswith(".") or word.endswith(".."):
        return False
    stem = word[:-1]
    if _INITIALISM.match(word) or _INITIALISM.match(stem):
        return True
    return stem.lower() in _ABBREVIATIONS


def _split_paragraph(text: str, start: int, end: int, out: list[tuple[int, int]]) -> None:
    pos = start
    while pos < end and text[pos].isspace():
        pos += 1
    for m in _CANDIDATE.finditer(text, pos, end):
        punct_end = m.end()
        # An ellipsis needs no check: the lookahead already wants an upper-case word next.
        # Find where the terminal punctuation itself ends (before closing quotes).
        core = m.group(0).rstrip("\"'”’)]")
        core_end = m.start() + len(core)
        if core.endswith(".") and not core.endswith("...") and _is_abbreviation(text, core_end):
            continue
        out.append((pos, punct_end))
        pos = punct_end
        while pos < end and text[pos].isspace():
            pos += 1
    # The remainder, trimmed.
    while pos < end and text[pos].isspace():
        pos += 1
    stop = end
    while stop > pos and text[stop - 1].isspace():
        stop -= 1
    if stop > pos:
        out.append((pos, stop))


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each sentence in `text`, blank space between them excluded."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for m in _PARAGRAPH_BREAK.finditer(text):
        _split_paragraph(text, pos, m.start(), spans)
        pos = m.end()
    _split_paragraph(text, pos, len(text), spans)
    return spans


def split_sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]
