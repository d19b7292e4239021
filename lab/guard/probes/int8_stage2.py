"""Would int8 dynamic quantisation of the guard's MiniLM make stage 2 cheaper at the same
decisions? (2026-12-06, issue 55: no; lab/NOTEBOOK.md.)

    PYTHONPATH=$PWD .venv/bin/python -m lab.guard.probes.int8_stage2 [--files 60]

The windows stage 2 reads on --files documentation files (bench guard_cost's machine-docs
corpus), embedded by the shipped encoder and by a copy whose linear layers are int8
(``torch.ao.quantization.quantize_dynamic``): CPU seconds of each, the cosine between their
vectors, and how many stage-2 decisions at the shipped threshold flip.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.guard_cost import machine_docs, parsed_blocks
from clef_pipelines.guard.loading import load_guard


def stage2_windows(guard: Any, texts: list[str]) -> tuple[list[str], np.ndarray]:
    """The windows the guard sends to stage 2 for ``texts``, and which are main windows."""
    captured: list[tuple[list[str], np.ndarray]] = []
    vectors = guard.vectors

    def capture(windows: Any, prefix: Any) -> Any:
        captured.append((list(windows), np.asarray(prefix, dtype=bool)))
        return vectors(windows, prefix)

    guard.vectors = capture
    guard.score(texts)
    guard.vectors = vectors
    windows = [w for ws, _ in captured for w in ws]
    return windows, ~np.concatenate([p for _, p in captured])


def int8_copy(encoder: Any) -> Any:
    quantized = copy.copy(encoder)
    for name in ("_bottom", "_tuned_top", "_frozen_top"):
        layers = copy.deepcopy(getattr(encoder, name))
        setattr(
            quantized,
            name,
            torch.ao.quantization.quantize_dynamic(layers, {torch.nn.Linear}, dtype=torch.qint8),
        )
    quantized._lock = threading.Lock()
    return quantized


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=60)
    args = parser.parse_args()
    guard = load_guard()
    corpus, _ = machine_docs(Path(tempfile.mkdtemp()), args.files)
    blocks, _, _ = parsed_blocks(corpus)
    windows, tuned = stage2_windows(guard, [t for t in blocks["text"].to_list() if t])
    out = {}
    for label, encoder in (("fp32", guard.encoder()), ("int8", int8_copy(guard.encoder()))):
        encoder.vectors(windows[:64], tuned[:64])  # warm-up
        cpu = time.process_time()
        out[label] = encoder.vectors(windows, tuned)
        print(f"{label}: {len(windows)} windows, {time.process_time() - cpu:.1f} CPU s")
    cos = (out["fp32"] * out["int8"]).sum(1)
    print(f"cosine fp32 / int8: min {cos.min():.3f}, mean {cos.mean():.3f}")
    main_windows = [w for w, t in zip(windows, tuned, strict=True) if t]
    first = guard.stage1_logits(main_windows)
    p32 = guard.stage2_probabilities(out["fp32"][tuned], first)
    p8 = guard.stage2_probabilities(out["int8"][tuned], first)
    threshold = guard.threshold
    flips = int(((p32 >= threshold) != (p8 >= threshold)).sum())
    print(f"stage-2 decisions flipped at {threshold:.3f}: {flips} of {len(p32)}")


if __name__ == "__main__":
    main()
