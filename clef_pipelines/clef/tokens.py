"""Token counting for the state budget: the model's own tokenizer when there is one, else a
conservative estimate. A state over budget is refused, never truncated: the release code
truncates silently, and the hosted service once read only about the first 2,048 tokens."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from clef_pipelines.clef.wire import render_state

# Fixed prompt around the state and each field (system prompt, headers, option lines),
# measured on the release prompt layout with a byte-level tokenizer and rounded up.
PROMPT_OVERHEAD_TOKENS = 96
FIELD_OVERHEAD_TOKENS = 24
OPTION_OVERHEAD_TOKENS = 12


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


def question_tokens(counter: TokenCounter, qid: str, question: Any) -> int:
    """Tokens one question adds to the prompt (instructions, options and their headers)."""
    q = question.model_dump(mode="json") if hasattr(question, "model_dump") else question
    n = FIELD_OVERHEAD_TOKENS + counter.count(qid) + counter.count(_render(q["instructions"]))
    criteria = q.get("criteria")
    if q["type"] == "noul":
        options = [("true", None), ("false", None)]
        n += 40  # the built-in true/false descriptions
    elif isinstance(criteria, dict):
        options = list(criteria.items())
    else:
        options = [(str(i), d) for i, d in enumerate(criteria or [])]
    for oid, desc in options:
        sem = {"option_id": oid} if desc is None else {"option_id": oid, "description": desc}
        n += OPTION_OVERHEAD_TOKENS + counter.count(json.dumps(sem, ensure_ascii=False))
    return n


def state_tokens(counter: TokenCounter, state: Any) -> int:
    return counter.count(_render(state))
