"""What a collection's manifest says about steering, and the question other stages ask of it:
was this collection screened at ingest?"""

from __future__ import annotations

from typing import Any

from clef_pipelines.clef.client import resolve_backend
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.steering.config import SteeringConfig


def clef_enabled(settings: Any) -> bool:
    """Whether the configured Clef backend answers (anything but `off`, after `auto`)."""
    clef: ClefConfig = settings.clef
    return resolve_backend(clef)[0] != "off"


def steering_manifest(cfg: SteeringConfig, *, clef_enabled: bool) -> dict[str, Any]:
    """The steering a source was ingested with (written by `store_sync` per source)."""
    clef_screen = cfg.screen.mode if clef_enabled else "unavailable"
    return {
        # Screened: at least one judge acted on the paragraphs (shadow judges only record).
        "screened": cfg.guard.mode == "on" or clef_screen == "on",
        "screen": clef_screen,
        "guard": cfg.guard.mode,
        "judges": cfg.screen.judges,
        "enrich": cfg.enrich.mode if clef_enabled else "unavailable",
    }


def screened_at_ingest(manifest: dict[str, Any] | None, source: str | None = None) -> bool:
    """True when every source of the collection (or `source`) was screened at ingest, so its
    stored text already went through the paragraph screen; False for a missing manifest, a
    source ingested before the screen existed, or one ingested with every judge off."""
    sources = (manifest or {}).get("sources") or {}
    if source is None and not sources:
        # A manifest written by hand or by another tool may only say it at the top level.
        return bool(((manifest or {}).get("steering") or {}).get("screened"))
    picked = [sources.get(source)] if source is not None else list(sources.values())
    if not picked:
        return False
    return all(bool(((s or {}).get("steering") or {}).get("screened")) for s in picked)
