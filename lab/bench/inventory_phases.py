"""The inventory step of a rerun, phase by phase, on a kept run (issue 13: what still grows
with the source).

    .venv/bin/python -m lab.bench.inventory_phases --config /tmp/scale-keep/n500000/bench.yaml

Calls the `source_documents` step's own functions on a kept `bench/scale.py` run (its config,
corpus and store), one at a time: listing the source, reading the stored documents' facts,
planning the inventory, assigning batches, and the source's stored totals. Before each phase
the process's peak (`VmHWM`) is reset; each prints its peak and what it keeps over the resident
memory before it, its seconds, and the size of the frame it made. Run it with another commit's
code first on the import path (PYTHONPATH=<clone>) to compare.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

from clef_pipelines.config import load_settings  # noqa: E402
from clef_pipelines.embedding import make_embedder  # noqa: E402
from clef_pipelines.ingest import stages  # noqa: E402
from clef_pipelines.ingest.batches import batch_column, batch_count  # noqa: E402
from clef_pipelines.ingest.documents import (  # noqa: E402
    listing_frame,
    pipeline_fingerprint,
    plan_inventory_frame,
    stored_document_facts,
)
from clef_pipelines.ingest.process_memory import (  # noqa: E402
    fix_mmap_threshold,
    limit_malloc_arenas,
    rss_gb,
    trim_heap,
)
from clef_pipelines.ingest.totals import source_totals  # noqa: E402
from clef_pipelines.stores import open_store  # noqa: E402
from lab.bench._peak_memory import peak_mb, reset_peak  # noqa: E402


def phase(name: str, fn: Callable[[], Any]) -> Any:
    trim_heap()
    base = rss_gb() * 1024
    reset_peak()
    started = time.perf_counter()
    value = fn()
    size = getattr(value, "estimated_size", None)
    frame = f", frame {size() / 2**20:.0f} MB" if size else ""
    print(
        f"{name}: peak +{peak_mb() - base:.0f} MB, keeps +{rss_gb() * 1024 - base:.0f} MB over "
        f"{base:.0f} MB, {time.perf_counter() - started:.1f} s{frame}",
        flush=True,
    )
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", type=Path, required=True, help="A kept run's bench.yaml.")
    ap.add_argument("--source", default="scale")
    args = ap.parse_args()
    limit_malloc_arenas()  # as the ingest processes do
    fix_mmap_threshold()
    settings = load_settings(args.config)
    source = settings.source(args.source)
    collection = settings.collection_of(source)
    store = open_store(settings.store, settings.data_path, for_pipeline=True)
    fingerprint = pipeline_fingerprint(settings, make_embedder(settings.embedder).name)
    listing = phase(
        "listing", lambda: listing_frame(stages.iter_entries(settings, source, fingerprint))
    )
    facts = phase("stored facts", lambda: stored_document_facts(store, collection, source.name))
    inventory = phase("plan", lambda: plan_inventory_frame(source.name, listing, facts))
    listing = facts = None  # as the step, which keeps only the inventory
    count = batch_count(inventory.height, settings.batching.batch_documents)
    phase("batches", lambda: batch_column(inventory["doc_id"], count))
    phase("stored totals", lambda: source_totals(store, collection, source.name))


if __name__ == "__main__":
    main()
