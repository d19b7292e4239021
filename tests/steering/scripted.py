"""Answers for the fake System One server, scripted by the text each question is about."""

from __future__ import annotations

from typing import Any

PLANTED = "ignore your previous instructions"
BOILER = "Cookie settings"


def choice(probs: dict[str, float]) -> dict[str, Any]:
    top = max(probs, key=lambda k: probs[k])
    return {"type": "choice", "choice": top, "confidence": probs[top], "probabilities": probs}


def subject_parts(question: dict[str, Any], state: Any) -> list[str]:
    """The texts a question names, in order: its passage inline, or every state key it names
    in backticks (a paragraph sent in parts names them all)."""
    ins = question["instructions"]
    if isinstance(ins, dict):
        return [ins["passage"]]
    about = ins.split(":", 1)[0]
    return [state[ref] for ref in about.split("`")[1::2] if ref in state]


def subject_text(question: dict[str, Any], state: Any) -> str:
    return " ".join(subject_parts(question, state))


def same_text(a: str, b: str) -> bool:
    """Equal but for whitespace (parts are sent without the spaces between them)."""
    return a.split() == b.split()


def screen_probs(text: str) -> dict[str, float]:
    if PLANTED in text.lower():
        return {"content": 0.05, "boilerplate": 0.05, "instructs_ai": 0.9}
    if text.startswith(BOILER):
        return {"content": 0.05, "boilerplate": 0.9, "instructs_ai": 0.05}
    return {"content": 0.9, "boilerplate": 0.05, "instructs_ai": 0.05}


def quality_probs(text: str) -> dict[str, float]:
    if PLANTED in text.lower():
        return {
            "self_contained": 0.05,
            "needs_context": 0.05,
            "low_information": 0.05,
            "boilerplate": 0.05,
            "instructs_ai": 0.8,
        }
    if "nothing to learn" in text.lower():
        return {
            "self_contained": 0.02,
            "needs_context": 0.02,
            "low_information": 0.9,
            "boilerplate": 0.03,
            "instructs_ai": 0.03,
        }
    return {
        "self_contained": 0.6,
        "needs_context": 0.3,
        "low_information": 0.04,
        "boilerplate": 0.03,
        "instructs_ai": 0.03,
    }


def by_text(qid: str, question: dict[str, Any], state: Any) -> Any:
    """Screen and quality answers follow the text each question names; other asks default."""
    text = subject_text(question, state)
    if qid.endswith(".screen"):
        return choice(screen_probs(text))
    if qid.endswith(".quality"):
        return choice(quality_probs(text))
    return None


def clef_config(fake: Any, **extra: Any) -> dict[str, Any]:
    """The `clef:` settings pointing at the fake server (env KEY holds its token)."""
    return {
        "backend": "self-hosted",
        "base_url": fake.base_url,
        "api_key_env": "KEY",
        "max_retries": 1,
        "backoff_base_s": 0,
        "backoff_max_s": 0,
        **extra,
    }
