"""The wire's limits and JSON helpers, shared by the models (`wire`) and the plain path
(`wire_light`)."""

from __future__ import annotations

import json
from typing import Any

MAX_QUESTIONS = 64
MIN_CHOICE_OPTIONS, MAX_CHOICE_OPTIONS = 2, 255
MIN_SCORE_LEVELS, MAX_SCORE_LEVELS = 2, 10
MAX_IMAGES = 4
MAX_QUESTION_ID = 256
PROBABILITY_TOLERANCE = 0.02
# Answers are rounded to 4 decimals; allow that much slack on single values.
EPS = 1e-3


def canonical_json(value: Any) -> str:
    """Stable JSON (sorted keys, no spaces): the cache key and the token estimate use it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def render_state(state: Any) -> str:
    """The state as the release code renders it into the prompt."""
    return state if isinstance(state, str) else canonical_json(state)
