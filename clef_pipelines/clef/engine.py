"""The in-process engine: a release folder loaded through its own `joint_schema_model.py`,
answering several requests in one forward pass with the release's `collate_records`.

`load_release_model` in the release code builds an `AutoProcessor`, which for Qwen3.5 wants a
video processor and therefore torchvision (not importable beside CPU torch here). This loader
does what it does for the backbone and the head, but takes only the tokenizer; a full
processor is loaded on the first request that carries images.

torch and transformers are imported here only, inside functions: importing this module is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from clef_pipelines.clef.errors import (
    ClefError,
    ClefNotConfigured,
    ClefRequestTooLarge,
    ClefUnsupported,
    ClefValidationError,
)
from clef_pipelines.clef.wire import SystemOneRequest

# encode_record truncates the state to fit max_length; encoding with this instead keeps the
# whole state so that an oversize request can be refused rather than silently cut.
_NO_TRUNCATION = 1 << 40


def load_release_module(release_dir: Path) -> Any:
    """Import the folder's own `joint_schema_model.py` under a name unique to the folder."""
    code = release_dir / "joint_schema_model.py"
    if not code.is_file():
        raise ClefNotConfigured(f"{release_dir} is not a Clef release: no joint_schema_model.py")
    digest = hashlib.sha256(str(code.resolve()).encode()).hexdigest()[:12]
    name = f"_clef_release_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, code)
    if spec is None or spec.loader is None:
        raise ClefNotConfigured(f"cannot import {code}")
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up in sys.modules while the file runs.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(name, None)
        raise
    return module


def _pick_device(device: str | None) -> str:
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


class Engine:
    """A loaded release. `answer_batch` is synchronous and not re-entrant: call it from one
    thread at a time (the async `Batcher` below does)."""

    def __init__(
        self,
        release_dir: str | Path,
        *,
        device: str | None = None,
        max_length: int = 16_384,
    ) -> None:
        import torch
        from safetensors.torch import load_file
        from transformers import AutoTokenizer, Qwen3_5ForConditionalGeneration

        started = time.perf_counter()
        self.release_dir = Path(release_dir).resolve()
        if not self.release_dir.is_dir():
            raise ClefNotConfigured(f"release folder not found: {self.release_dir}")
        self.jsm = load_release_module(self.release_dir)
        self.device = _pick_device(device)
        # float32 on CPU (bf16 is slower there), bf16 on GPU.
        self.dtype = torch.float32 if self.device == "cpu" else torch.bfloat16
        self.max_length = max_length
        # No device_map: with transformers 5.24 it requires `accelerate`, which the release
        # code assumes but nothing here needs; load, then move.
        backbone = Qwen3_5ForConditionalGeneration.from_pretrained(
            self.release_dir, dtype=self.dtype
        ).to(self.device)
        backbone.config.use_cache = False
        head_config = json.loads((self.release_dir / "joint_head_config.json").read_text())
        head = self.jsm.JointSchemaHead(**head_config)
        head.load_state_dict(load_file(self.release_dir / "joint_head.safetensors"), strict=True)
        head = head.to(device=self.device, dtype=self.dtype)
        self.model = self.jsm.ClefModel(backbone, head).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(self.release_dir)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self._processor: Any = None
        self._torch = torch
        self.load_seconds = time.perf_counter() - started
        self.batches = 0
        self.requests = 0

    def _image_processor(self) -> Any:
        if self._processor is None:
            try:
                from transformers import AutoProcessor

                self._processor = AutoProcessor.from_pretrained(self.release_dir)
            except Exception as exc:
                raise ClefUnsupported(
                    "images need the release's processor, which could not be loaded here "
                    f"({type(exc).__name__}: {exc}); send text-only requests"
                ) from None
        return self._processor

    def encode(self, request: SystemOneRequest) -> Any:
        """Encode without truncation; refuse a request over `max_length`."""
        body = request.wire()
        processor = self._image_processor() if request.images else None
        record = self.jsm.encode_record(
            self.tokenizer, body, max_length=_NO_TRUNCATION, processor=processor
        )
        n = len(record.input_ids)
        if n > self.max_length:
            raise ClefRequestTooLarge(
                f"state: the request is {n} tokens, over this engine's budget of "
                f"{self.max_length}; shorten the state or split it (it is never truncated)",
                field="state",
            )
        return record

    def answer_batch(
        self, requests: Sequence[SystemOneRequest]
    ) -> list[dict[str, Any] | ClefError]:
        """Answer each request; one forward pass for all that encode. A request that fails to
        encode gets its error in its slot and does not fail the others."""
        torch = self._torch
        out: list[dict[str, Any] | ClefError] = [ClefError("not run")] * len(requests)
        records: list[Any] = []
        slots: list[int] = []
        for i, req in enumerate(requests):
            try:
                records.append(self.encode(req))
                slots.append(i)
            except ClefError as exc:
                out[i] = exc
            except ValueError as exc:  # the release code's own refusals
                out[i] = ClefValidationError(str(exc), field="(body)")
        if not records:
            return out
        with torch.inference_mode():
            batch = self.jsm.collate_records(records, self.pad_id, torch.device(self.device))
            logits = self.model(batch)
        self.batches += 1
        self.requests += len(records)
        for slot, record, rec_logits in zip(slots, records, logits, strict=True):
            req = requests[slot]
            wire_questions = req.wire()["questions"]
            answers = {}
            for q, q_logits in zip(record.questions, rec_logits, strict=True):
                probs = dict(zip(q.option_ids, q_logits.float().softmax(-1).tolist(), strict=True))
                answers[q.question_id] = self.jsm.systemone_answer(
                    wire_questions[q.question_id], probs
                )
            out[slot] = {
                "model": req.model,
                "answers": answers,
                "usage": {"input_tokens": len(record.input_ids), "output_tokens": 0},
            }
        return out

    def info(self) -> dict[str, Any]:
        return {
            "release_dir": str(self.release_dir),
            "device": self.device,
            "dtype": str(self.dtype).replace("torch.", ""),
            "max_length": self.max_length,
            "load_seconds": round(self.load_seconds, 3),
            "batches": self.batches,
            "requests": self.requests,
        }


Runner = Callable[[list[SystemOneRequest]], Awaitable[list[dict[str, Any] | ClefError]]]


class Batcher:
    """Collects concurrent requests and hands them to `runner` in batches of up to
    `max_batch`. While one batch runs, the next fills up: under load batches grow by
    themselves; alone, a request waits at most `wait_ms` for company."""

    def __init__(self, runner: Runner, *, max_batch: int, wait_ms: float) -> None:
        self._runner = runner
        self.max_batch = max_batch
        self.wait_s = wait_ms / 1000.0
        self._queue: asyncio.Queue[tuple[SystemOneRequest, asyncio.Future[Any]]] | None = None
        self._task: asyncio.Task[None] | None = None
        self.batch_sizes: list[int] = []

    def _ensure(self) -> asyncio.Queue[tuple[SystemOneRequest, asyncio.Future[Any]]]:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self._queue

    async def submit(self, request: SystemOneRequest) -> dict[str, Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._ensure().put((request, fut))
        result = await fut
        if isinstance(result, BaseException):
            raise result
        return result

    async def _loop(self) -> None:
        assert self._queue is not None
        q = self._queue
        while True:
            items = [await q.get()]
            deadline = time.monotonic() + self.wait_s
            while len(items) < self.max_batch:
                try:
                    items.append(q.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(q.get(), left))
                except TimeoutError:
                    break
            self.batch_sizes.append(len(items))
            try:
                results: list[Any] = await self._runner([r for r, _ in items])
            except Exception as exc:  # the whole batch failed: every caller sees why
                results = [exc] * len(items)
            for (_, fut), res in zip(items, results, strict=True):
                if not fut.done():
                    fut.set_result(res)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
            self._queue = None


class LocalRunner:
    """Runs an Engine's batches on one dedicated thread (torch releases the GIL)."""

    _load_lock = threading.Lock()

    def __init__(self, release_dir: str | Path, *, device: str | None, max_length: int) -> None:
        self.release_dir = Path(release_dir)
        self.device = device
        self.max_length = max_length
        self.engine: Engine | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clef-engine")

    def load(self) -> Engine:
        with self._load_lock:
            if self.engine is None:
                self.engine = Engine(
                    self.release_dir, device=self.device, max_length=self.max_length
                )
        return self.engine

    async def __call__(self, requests: list[SystemOneRequest]) -> list[dict[str, Any] | ClefError]:
        loop = asyncio.get_running_loop()
        engine = self.engine or await loop.run_in_executor(self._pool, self.load)
        return await loop.run_in_executor(self._pool, engine.answer_batch, requests)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
