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
import functools
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


class _Ids:
    __slots__ = ("input_ids",)

    def __init__(self, input_ids: list[int]) -> None:
        self.input_ids = input_ids


class MemoTokenizer:
    """The tokenizer as `encode_record` calls it (`tokenizer(text, add_special_tokens=False)
    .input_ids`), remembering the ids of short texts.

    A request is about 40 tokenizer calls, nearly all for the same prompt and schema pieces
    (field headers, option texts, the system prompt); remembering them takes encoding from
    about 2.6 ms to a fraction of that for the tiny release's benchmark request. The ids are
    the tokenizer's own, so answers are unchanged. Every call returns a fresh list because
    `encode_record` extends what it gets. Calls are serialised: a fast tokenizer is not safe
    to call from several threads at once. Other attributes pass through.
    """

    def __init__(
        self, tokenizer: Any, *, max_entries: int = 8192, max_text_chars: int = 512
    ) -> None:
        self._tokenizer = tokenizer
        self._memo: dict[tuple[str, bool], tuple[int, ...]] = {}
        self._max_entries = max_entries
        self._max_text_chars = max_text_chars
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __call__(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        if kwargs or not isinstance(text, str) or len(text) > self._max_text_chars:
            with self._lock:
                return self._tokenizer(text, add_special_tokens=add_special_tokens, **kwargs)
        key = (text, add_special_tokens)
        ids = self._memo.get(key)
        if ids is None:
            with self._lock:
                ids = tuple(self._tokenizer(text, add_special_tokens=add_special_tokens).input_ids)
            if len(self._memo) >= self._max_entries:
                self._memo.clear()  # unbounded variety of short texts: start over
            self._memo[key] = ids
            self.misses += 1
        else:
            self.hits += 1
        return _Ids(list(ids))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def _size_hint(request: SystemOneRequest) -> int:
    """Characters of state and instructions: orders requests by length without tokenizing."""
    state = request.state
    n = len(state) if isinstance(state, str) else len(json.dumps(state, ensure_ascii=False))
    return n + sum(len(str(q.instructions)) for q in request.questions.values())


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
        self._encoder = MemoTokenizer(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self._processor: Any = None
        self._torch = torch
        # Intra-op threads torch picked (the physical cores): a pass that runs alone uses them.
        self.cores = torch.get_num_threads()
        self.load_seconds = time.perf_counter() - started
        self.batches = 0
        self.requests = 0
        self._count_lock = threading.Lock()

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

    def encode(self, request: SystemOneRequest, body: dict[str, Any] | None = None) -> Any:
        """Encode without truncation; refuse a request over `max_length`."""
        if body is None:
            body = request.wire()
        processor = self._image_processor() if request.images else None
        record = self.jsm.encode_record(
            self._encoder, body, max_length=_NO_TRUNCATION, processor=processor
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
        self, requests: Sequence[SystemOneRequest], *, threads: int | None = None
    ) -> list[dict[str, Any] | ClefError]:
        """Answer each request; one forward pass for all that encode. A request that fails to
        encode gets its error in its slot and does not fail the others.

        `threads`: torch intra-op threads for this pass (process-wide in torch; the caller
        makes sure that passes running at the same time ask for the same number)."""
        torch = self._torch
        if threads is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        out: list[dict[str, Any] | ClefError] = [ClefError("not run")] * len(requests)
        records: list[Any] = []
        slots: list[int] = []
        bodies: list[dict[str, Any]] = []
        for i, req in enumerate(requests):
            try:
                body = req.wire()
                records.append(self.encode(req, body))
                slots.append(i)
                bodies.append(body)
            except ClefError as exc:
                out[i] = exc
            except ValueError as exc:  # the release code's own refusals
                out[i] = ClefValidationError(str(exc), field="(body)")
        if not records:
            return out
        with torch.inference_mode():
            batch = self.jsm.collate_records(records, self.pad_id, torch.device(self.device))
            logits = self.model(batch)
        with self._count_lock:
            self.batches += 1
            self.requests += len(records)
        for slot, body, record, rec_logits in zip(slots, bodies, records, logits, strict=True):
            req = requests[slot]
            wire_questions = body["questions"]
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
            "cores": self.cores,
            "batches": self.batches,
            "requests": self.requests,
        }


Runner = Callable[[list[SystemOneRequest]], Awaitable[list[dict[str, Any] | ClefError]]]


class _QueuedBatcher:
    """What both batchers share: a queue of (request, future) drained by one loop task that
    starts with the first request; `submit` waits for the request's answer (or error)."""

    def __init__(self, *, max_batch: int, wait_ms: float) -> None:
        self.max_batch = max_batch
        self.wait_s = wait_ms / 1000.0
        self._queue: asyncio.Queue[tuple[SystemOneRequest, asyncio.Future[Any]]] | None = None
        self._task: asyncio.Task[None] | None = None
        self.batch_sizes: list[int] = []

    def _on_start(self) -> None:
        """Create loop-bound state before the loop task starts (subclasses)."""

    async def _loop(self) -> None:
        raise NotImplementedError

    def _ensure(self) -> asyncio.Queue[tuple[SystemOneRequest, asyncio.Future[Any]]]:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._on_start()
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self._queue

    async def _fill(self, items: list[Any], cap: int) -> None:
        """Add queued requests to `items` until `cap`, waiting at most `wait_s` for company."""
        assert self._queue is not None
        q = self._queue
        deadline = time.monotonic() + self.wait_s
        while len(items) < cap:
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

    async def submit(self, request: SystemOneRequest) -> dict[str, Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._ensure().put((request, fut))
        result = await fut
        if isinstance(result, BaseException):
            raise result
        return result


class Batcher(_QueuedBatcher):
    """Collects concurrent requests and hands them to `runner` in batches of up to
    `max_batch`. While one batch runs, the next fills up: under load batches grow by
    themselves; alone, a request waits at most `wait_ms` for company."""

    def __init__(self, runner: Runner, *, max_batch: int, wait_ms: float) -> None:
        super().__init__(max_batch=max_batch, wait_ms=wait_ms)
        self._runner = runner

    async def _loop(self) -> None:
        assert self._queue is not None
        q = self._queue
        while True:
            items = [await q.get()]
            await self._fill(items, self.max_batch)
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
    """Runs an Engine's passes on a small pool of threads (torch releases the GIL in its ops).

    On CPU the forward pass is compute bound (profiled on the tiny release: per-request cost
    grows linearly with the batch, nothing per pass to amortise), so what concurrency buys is
    the use of every core: `workers` passes run side by side with `cores // workers` intra-op
    threads each, and a pass that runs alone gets all the cores. Default workers: 2 on a CPU
    with at least 2 cores, else 1 (and 1 on GPU, where one batched pass is the fast path).
    """

    _load_lock = threading.Lock()

    def __init__(
        self,
        release_dir: str | Path,
        *,
        device: str | None,
        max_length: int,
        workers: int | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError("workers must be at least 1")
        self.release_dir = Path(release_dir)
        self.device = device
        self.max_length = max_length
        self.engine: Engine | None = None
        self._workers = workers
        self.workers = 1
        self.solo_threads: int | None = None
        self.pass_threads: int | None = None
        # One single-thread executor per worker: a pass always runs on its worker's thread, and
        # passes that get all the cores always run on worker 0's, so only one thread ever owns
        # a team of OpenMP threads (two teams spinning on two cores slow each other badly).
        self._pools: list[ThreadPoolExecutor] = []

    def load(self) -> Engine:
        with self._load_lock:
            if self.engine is None:
                engine = Engine(self.release_dir, device=self.device, max_length=self.max_length)
                if engine.device == "cpu":
                    cores = max(1, engine.cores)
                    self.workers = self._workers or min(2, cores)
                    self.solo_threads = cores
                    self.pass_threads = max(1, cores // self.workers)
                else:
                    self.workers = self._workers or 1
                self._pools = [
                    ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"clef-engine-{i}")
                    for i in range(self.workers)
                ]
                self.engine = engine
        return self.engine

    def threads_for(self, *, alone: bool) -> int | None:
        """Intra-op threads for a pass: all cores when it runs alone."""
        return self.solo_threads if alone else self.pass_threads

    async def __call__(
        self, requests: list[SystemOneRequest], threads: int | None = None, worker: int = 0
    ) -> list[dict[str, Any] | ClefError]:
        loop = asyncio.get_running_loop()
        engine = self.engine or await loop.run_in_executor(None, self.load)
        return await loop.run_in_executor(
            self._pools[worker], functools.partial(engine.answer_batch, requests, threads=threads)
        )

    def close(self) -> None:
        for pool in self._pools:
            pool.shutdown(wait=False, cancel_futures=True)


class WorkerBatcher(_QueuedBatcher):
    """Collects concurrent requests into passes for a `LocalRunner` and keeps all of its
    workers busy: up to `max_batch` requests per pass, one pass per free worker, requests of
    similar length in the same pass (less padding). While passes run, the next requests wait
    in the queue; a free worker takes what is there. A request alone (nothing running,
    nothing queued) runs with every core; otherwise passes run side by side with their share
    of the cores, never both at once (torch's thread count is process-wide)."""

    def __init__(self, runner: LocalRunner, *, max_batch: int, wait_ms: float) -> None:
        super().__init__(max_batch=max_batch, wait_ms=wait_ms)
        self._runner = runner
        self._passes: set[asyncio.Task[None]] = set()
        self._free: list[int] = []  # idle workers
        self._slot_freed: asyncio.Event | None = None
        self.solo_passes = 0

    def _on_start(self) -> None:
        self._slot_freed = asyncio.Event()

    async def _loop(self) -> None:
        assert self._queue is not None and self._slot_freed is not None
        q = self._queue
        if self._runner.engine is None:
            await asyncio.get_running_loop().run_in_executor(None, self._runner.load)
        workers = self._runner.workers
        self._free = list(range(workers))
        while True:
            items = [await q.get()]
            while not self._free:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            await self._fill(items, self.max_batch * len(self._free))
            if len(self._free) == workers and len(items) == 1 and q.empty():
                # Alone: all the cores, on worker 0, and every worker held until it ends.
                self.solo_passes += 1
                held, self._free = sorted(self._free), []
                self._start(items, held, threads=self._runner.threads_for(alone=True))
                continue
            groups = _split(items, len(self._free), self.max_batch)
            while len(groups) > len(self._free):  # more groups than idle workers: merge
                groups[-2:] = [groups[-2] + groups[-1]]
            for group in groups:
                self._start(
                    group, [self._free.pop()], threads=self._runner.threads_for(alone=False)
                )

    def _start(
        self,
        items: list[tuple[SystemOneRequest, asyncio.Future[Any]]],
        held: list[int],
        *,
        threads: int | None,
    ) -> None:
        self.batch_sizes.append(len(items))
        task = asyncio.get_running_loop().create_task(self._run(items, held, threads))
        self._passes.add(task)
        task.add_done_callback(self._passes.discard)

    async def _run(
        self,
        items: list[tuple[SystemOneRequest, asyncio.Future[Any]]],
        held: list[int],
        threads: int | None,
    ) -> None:
        try:
            results: list[Any] = await self._runner([r for r, _ in items], threads, held[0])
        except Exception as exc:  # the whole pass failed: every caller sees why
            results = [exc] * len(items)
        except asyncio.CancelledError:  # closing: nobody waits for ever
            for _, fut in items:
                fut.cancel()
            raise
        finally:
            self._free.extend(held)
            assert self._slot_freed is not None
            self._slot_freed.set()
        for (_, fut), res in zip(items, results, strict=True):
            if not fut.done():
                fut.set_result(res)

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._passes) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._task = None
        self._queue = None
        self._passes.clear()


def _split(items: list[Any], groups: int, max_batch: int) -> list[list[Any]]:
    """Sort by length and cut into `groups` runs of similar total length, none over
    `max_batch` (more groups if need be): one pass per free worker, little padding in a pass."""
    items = sorted(items, key=lambda item: _size_hint(item[0]))
    n = len(items)
    groups = min(n, max(groups, -(-n // max_batch)))
    sizes = [_size_hint(r) + 1 for r, _ in items]
    out: list[list[Any]] = []
    start = 0
    for g in range(groups, 0, -1):  # g groups left to fill, this one included
        target = sum(sizes[start:]) / g
        end, acc = start, 0
        # One item at least, max_batch at most, one left for each later group, and no more
        # left over than the later groups can take.
        while end < n and end - start < max_batch and n - end > g - 1:
            if end > start and acc + sizes[end] / 2 > target and n - end <= (g - 1) * max_batch:
                break
            acc += sizes[end]
            end += 1
        out.append(items[start:end])
        start = end
    return out
