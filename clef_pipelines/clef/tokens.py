"""Token counting for the state budget: the model's own tokenizer when there is one, else a
conservative estimate. A state over budget is refused, never truncated: the release code
truncates silently, and the hosted service once read only about the first 2,048 tokens."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from clef_pipelines.clef.wire import render_state

# The fixed prompt around the state (system prompt, role markers, headers) is about 330
# bytes in the release layout; a byte-level BPE never spends more than one token a byte,
# so this bounds it for any tokenizer of that family.
PROMPT_OVERHEAD_TOKENS = 330
# Stand-ins of the same shape and length as the release's per-field and per-option text,
# counted with the counter in use so a byte-level tokenizer and a BPE one both come out right.
_FIELD_TEXT = "\nFIELD {n}\nID: {qid}\nTYPE: {type}\nINSTRUCTION: \nALLOWED OPTIONS:\nEND FIELD\n"
_OPTION_TEXT = "OPTION {k}: \n"
_DEFAULT_NOUL_DESCRIPTION = "The statement holds, or the answer is yes indeed."


class TokenCounter(Protocol):
    exact: bool
    name: str

    def count(self, text: str) -> int: ...


class EstimateCounter:
    """Over-estimates rather than under-estimates: digits often tokenize one per token (Qwen
    splits numbers into single digits), and any other byte is counted as half a token, which
    is above the rate of byte-level BPE on prose, code and CJK text alike."""

    exact = False
    name = "estimate"

    def count(self, text: str) -> int:
        digits = sum(ch.isdigit() for ch in text)
        other = len(text.encode("utf-8")) - digits
        return digits + math.ceil(other / 2)


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
def counter_for(release_dir: str | None) -> TokenCounter:
    """The exact counter when a release folder with a tokenizer.json is at hand."""
    if release_dir:
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
    n = counter.count(_FIELD_TEXT.format(n=index, qid=qid, type=q["type"]))
    n += counter.count(_render(q["instructions"]))
    criteria = q.get("criteria")
    if q["type"] == "noul":
        given = criteria or {}
        options = [(k, given.get(k, _DEFAULT_NOUL_DESCRIPTION)) for k in ("true", "false")]
    elif isinstance(criteria, dict):
        options = list(criteria.items())
    else:
        options = [(str(i), d) for i, d in enumerate(criteria or [])]
    for k, (oid, desc) in enumerate(options, start=1):
        sem = {"option_id": oid} if desc is None else {"option_id": oid, "description": desc}
        n += counter.count(_OPTION_TEXT.format(k=k)) + counter.count(_render(sem))
    return n


def state_tokens(counter: TokenCounter, state: Any) -> int:
    return counter.count(_render(state))
