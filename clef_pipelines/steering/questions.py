"""The questions steering asks Clef, in one place, worded small.

Why so few words: a stage sends each text once per request, and every question adds its
header, instructions and options to the prompt. The goal is input tokens at most 2.5x the
paragraphs' own tokens for the screen and the enrichment together, so each subject gets ONE
choice question per stage (a distribution over a few options answers several probabilities
at once), options carry short descriptions, and the subject itself sits in the state.

Answers are cached per (ask, text) with the ask's full wording in the key, so changing a
wording asks again and nothing else does.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from clef_pipelines.steering.config import CustomQuestion, EnrichConfig, Taxonomy
from clef_pipelines.steering.packing import Ask

#: The paragraph screen: one choice whose distribution gives P(boilerplate) and
#: P(instructs_ai) ("instructions addressed to an AI assistant rather than information for the
#: reader", the issue's definition, kept short).
SCREEN_ASK = Ask(
    "screen",
    "choice",
    "What is it?",
    # Option ids say what they mean; a description would cost its tokens once per paragraph.
    {"content": None, "boilerplate": None, "instructs_ai": None},
)
SCREEN_BOILERPLATE, SCREEN_INSTRUCTS_AI = "boilerplate", "instructs_ai"

#: Chunk quality: one choice; each option's probability is stored as `q_<option>`.
QUALITY_ASK = Ask(
    "quality",
    "choice",
    "What is it?",
    {
        "self_contained": None,
        "needs_context": None,
        "low_information": None,
        "boilerplate": None,
        "instructs_ai": None,
    },
)
#: The quality fields stored per chunk (`q_<name>`), as the issue names them.
QUALITY_FIELDS = ("low_information", "boilerplate", "instructs_ai", "self_contained")


def tag_ask(field_name: str, description: str, options: dict[str, str | None]) -> Ask:
    instructions = description.strip() or f"Which {field_name.replace('_', ' ')} fits it?"
    return Ask(f"tag_{field_name}", "choice", instructions, dict(options))


def custom_ask(q: CustomQuestion) -> Ask:
    return Ask(f"x_{q.name}", q.type, q.instructions, q.criteria)


def enrichment_asks(cfg: EnrichConfig, taxonomy: Taxonomy) -> list[Ask]:
    """Quality, one choice per taxonomy field, and the custom questions."""
    asks = [QUALITY_ASK]
    asks += [tag_ask(f.name, f.description, f.options) for f in taxonomy.fields]
    asks += [custom_ask(q) for q in cfg.questions]
    return asks


def ask_fingerprint(ask: Ask) -> str:
    """A short stable id of an ask's full wording (type, instructions, options)."""
    wire: dict[str, Any] = {
        "name": ask.name,
        "type": ask.type,
        "instructions": ask.instructions,
        "criteria": ask.criteria
        if ask.criteria is None or isinstance(ask.criteria, dict)
        else list(ask.criteria),
    }
    return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()[:16]


def enrich_version(cfg: EnrichConfig, taxonomy: Taxonomy) -> str:
    """What a record's enrichment was computed with: the asks and the tag threshold. A record
    whose `enrich_version` differs is what `reenrich` updates."""
    parts = sorted(ask_fingerprint(a) for a in enrichment_asks(cfg, taxonomy))
    material = json.dumps([parts, cfg.tag_min_confidence, cfg.drop_at, cfg.quarantine_at])
    return hashlib.sha256(material.encode()).hexdigest()[:12]
