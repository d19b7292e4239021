"""Loading the guard a config names, once per process and weights file, and its threshold.

The model module is imported only when a guard is first needed: it brings numpy work and,
on first score, MiniLM. A build without it (``GUARD_MODULE`` missing) is reported by the
screen, never silent.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clef_pipelines.guard.config import GuardConfig
    from clef_pipelines.guard.model import InjectionGuard

#: The module whose absence means "a build without the guard" rather than a broken install.
GUARD_MODULE = "clef_pipelines.guard.model"


class GuardUnavailable(RuntimeError):
    """The guard is on but cannot load: with no other judge, nothing would be screened."""


def guard_threshold(cfg: GuardConfig, guard: InjectionGuard) -> float:
    """P(injection) that quarantines: `steering.guard.threshold`, else the weights' own."""
    return float(guard.threshold if cfg.threshold is None else cfg.threshold)


def configured_guard(cfg: GuardConfig, base_dir: str | Path = ".") -> tuple[InjectionGuard, float]:
    """The guard `steering.guard` names, and its threshold: what ingestion judges with."""
    guard = load_guard(cfg.resolved_weights(base_dir))
    return guard, guard_threshold(cfg, guard)


def guard_fingerprint(cfg: GuardConfig, base_dir: str | Path = ".") -> str | None:
    """What the guard's decisions hang on besides config: its weights and how it reads a text
    (``InjectionGuard.version``); None with the guard off. It is part of every document's hash,
    so a new guard (other weights, or an upgrade of the package's) re-screens each document on
    the next run: the guard scores it again, and chunks whose text is unchanged keep their
    vectors."""
    if cfg.mode == "off":
        return None
    try:
        return str(load_guard(cfg.resolved_weights(base_dir)).version)
    except ModuleNotFoundError as exc:
        if exc.name != GUARD_MODULE:
            raise
        # A build without the guard: the screen reports it; a later guard re-screens.
        return "unavailable"


_GUARD_LOCK = threading.Lock()
#: Guards loaded in this process, by weights file ("" for the package's own).
_GUARDS: dict[str, InjectionGuard] = {}


def load_guard(weights: Path | None = None) -> InjectionGuard:
    """A guard (MiniLM plus a small classifier), loaded once per process and weights file:
    ``weights`` (``steering.guard.weights``) or, by default, the package's own."""
    if weights is not None and not weights.is_file():
        raise GuardUnavailable(f"steering.guard.weights: no weights file at {weights}")
    key = str(weights or "")
    with _GUARD_LOCK:
        if key not in _GUARDS:
            from clef_pipelines.guard.model import InjectionGuard

            _GUARDS[key] = InjectionGuard.from_file(weights) if weights else InjectionGuard.load()
        return _GUARDS[key]
