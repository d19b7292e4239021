"""The local engine's pass scheduling: memoised tokenization, length-sorted splits, passes side
by side on the workers, a lone request on all cores. No timings are asserted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from clef_pipelines.clef.backends.local import LocalBackend
from clef_pipelines.clef.engine import LocalRunner, MemoTokenizer, WorkerBatcher, _split
from clef_pipelines.clef.wire import SystemOneRequest, parse_request
from tests.clef.test_wire import body as make_body

# ---- memoised tokenizer ------------------------------------------------------------------


class _CountingTokenizer:
    def __init__(self) -> None:
        self.calls = 0
        self.pad_token_id = 7

    def __call__(self, text: str, add_special_tokens: bool = True) -> Any:
        self.calls += 1
        ids = [ord(c) for c in text] + ([1] if add_special_tokens else [])
        return type("Enc", (), {"input_ids": ids})()


def test_memo_tokenizer_gives_the_same_fresh_ids() -> None:
    inner = _CountingTokenizer()
    memo = MemoTokenizer(inner, max_text_chars=8)
    first = memo("abc", add_special_tokens=False).input_ids
    first.extend([99, 99])  # encode_record extends what it gets: the memo must not see it
    again = memo("abc", add_special_tokens=False).input_ids
    assert again == [97, 98, 99] and inner.calls == 1 and memo.hits == 1
    assert memo("abc").input_ids == [97, 98, 99, 1]  # add_special_tokens is part of the key
    long = "x" * 9  # over max_text_chars: tokenized every time, never stored
    assert memo(long, add_special_tokens=False).input_ids == [120] * 9
    memo(long, add_special_tokens=False)
    assert inner.calls == 4
    assert memo.pad_token_id == 7  # other attributes pass through


def test_memo_tokenizer_matches_the_real_one(tiny_release: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_release)
    memo = MemoTokenizer(tok)
    for text in ("\nFIELD 1\nID: urgent\n", "<|im_start|>system\nhi<|im_end|>", "é ok", ""):
        for _ in range(2):
            got = memo(text, add_special_tokens=False).input_ids
            assert got == tok(text, add_special_tokens=False).input_ids


# ---- splitting a batch over the workers -------------------------------------------------


def _req(n: int) -> SystemOneRequest:
    return parse_request(make_body(state="x" * n))


def test_split_sorts_by_length_and_respects_the_limits() -> None:
    items = [(_req(n), i) for i, n in enumerate([500, 3, 40, 3000, 7, 60, 2, 900])]
    groups = _split(items, 2, 8)
    assert len(groups) == 2
    flat = [tag for g in groups for _, tag in g]
    assert sorted(flat) == list(range(8))
    lengths = [len(r.state) for g in groups for r, _ in g]  # type: ignore[arg-type]
    assert lengths == sorted(lengths)
    # more groups than asked when max_batch demands it, never an empty one
    groups = _split(items, 1, 3)
    assert [len(g) for g in groups] and all(1 <= len(g) <= 3 for g in groups)
    assert sum(len(g) for g in groups) == 8
    assert _split(items[:1], 2, 8) == [items[:1]]


# ---- WorkerBatcher with a fake runner ----------------------------------------------------


class _FakeRunner:
    """Records every pass: its size, threads, worker, and what else ran at the same time."""

    def __init__(self, workers: int = 2, fail_on: str | None = None) -> None:
        self.engine = object()
        self.workers = workers
        self.passes: list[dict[str, Any]] = []
        self.running: list[dict[str, Any]] = []
        self.fail_on = fail_on
        self.release = asyncio.Event()
        self.release.set()

    def threads_for(self, *, alone: bool) -> int:
        return 2 if alone else 1

    def load(self) -> Any:
        return self.engine

    async def __call__(
        self, requests: list[SystemOneRequest], threads: int | None, worker: int
    ) -> list[Any]:
        me = {"n": len(requests), "threads": threads, "worker": worker, "overlap": []}
        for other in self.running:
            other["overlap"].append(me)
            me["overlap"].append(other)
        self.passes.append(me)
        self.running.append(me)
        try:
            await asyncio.sleep(0.01)
            await self.release.wait()
            if self.fail_on and any(r.state == self.fail_on for r in requests):
                raise RuntimeError("engine blew up")
            return [{"state": r.state, "worker": worker} for r in requests]
        finally:
            self.running.remove(me)


def test_a_lone_request_gets_every_core_and_runs_alone() -> None:
    runner = _FakeRunner()
    batcher = WorkerBatcher(runner, max_batch=8, wait_ms=1)  # type: ignore[arg-type]

    async def run() -> None:
        for i in range(3):
            got = await batcher.submit(_req(i + 1))
            assert got["state"] == "x" * (i + 1)
        await batcher.aclose()

    asyncio.run(run())
    assert [p["threads"] for p in runner.passes] == [2, 2, 2]
    assert all(p["worker"] == 0 and not p["overlap"] for p in runner.passes)
    assert batcher.solo_passes == 3


def test_concurrent_requests_run_side_by_side_with_their_share_of_threads() -> None:
    runner = _FakeRunner(workers=2)
    batcher = WorkerBatcher(runner, max_batch=8, wait_ms=5)  # type: ignore[arg-type]

    async def run() -> list[Any]:
        out = await asyncio.gather(*(batcher.submit(_req(i + 1)) for i in range(16)))
        await batcher.aclose()
        return out

    out = asyncio.run(run())
    assert [o["state"] for o in out] == ["x" * (i + 1) for i in range(16)]  # each its own
    assert sum(p["n"] for p in runner.passes) == 16
    assert all(p["n"] <= 8 for p in runner.passes)
    for p in runner.passes:
        if p["threads"] == 2:  # a pass on every core never shares the machine
            assert not p["overlap"]
        # two passes never run on the same worker at once
        assert all(o["worker"] != p["worker"] for o in p["overlap"])
    assert any(p["overlap"] for p in runner.passes)  # both workers were used at once
    assert batcher.batch_sizes and sum(batcher.batch_sizes) == 16


def test_a_failing_pass_fails_only_its_own_requests() -> None:
    runner = _FakeRunner(workers=2, fail_on="boom")
    batcher = WorkerBatcher(runner, max_batch=1, wait_ms=5)  # type: ignore[arg-type]

    async def run() -> list[Any]:
        reqs = [_req(3), parse_request(make_body(state="boom")), _req(5)]
        out = await asyncio.gather(*(batcher.submit(r) for r in reqs), return_exceptions=True)
        await batcher.aclose()
        return out

    ok1, bad, ok2 = asyncio.run(run())
    assert isinstance(bad, RuntimeError)
    assert ok1["state"] == "xxx" and ok2["state"] == "xxxxx"


def test_runner_refuses_zero_workers(tiny_release: Path) -> None:
    with pytest.raises(ValueError):
        LocalRunner(tiny_release, device="cpu", max_length=4096, workers=0)


# ---- the real engine on two workers -------------------------------------------------------


def test_two_workers_answer_like_one_pass_at_a_time(tiny_release: Path) -> None:
    backend = LocalBackend(
        "clef", release_dir=str(tiny_release), device="cpu", max_length=4096, workers=2
    )
    reqs = [parse_request(make_body(state={"passage": "y" * n})) for n in (3, 90, 250, 17, 41, 8)]

    async def run() -> tuple[list[Any], list[Any]]:
        await backend.start()
        together = await asyncio.gather(*(backend.send(r) for r in reqs))
        alone = [await backend.send(r) for r in reqs]
        await backend.aclose()
        return together, alone

    together, alone = asyncio.run(run())
    assert backend.runner.workers == 2
    assert backend.batcher.solo_passes >= len(reqs)  # the sequential ones ran alone
    for got, want in zip(together, alone, strict=True):
        assert got["usage"] == want["usage"]
        for qid, a in want["answers"].items():
            for opt, p in a.get("probabilities", {}).items():
                assert got["answers"][qid]["probabilities"][opt] == pytest.approx(p, abs=2e-3)


def test_engine_workers_setting_reaches_the_local_engine(tiny_release: Path) -> None:
    from clef_pipelines.clef.client import make_backend
    from clef_pipelines.clef.config import ClefConfig

    one = make_backend(ClefConfig(backend="local", release_dir=str(tiny_release), engine_workers=1))
    default = make_backend(ClefConfig(backend="local", release_dir=str(tiny_release)))
    assert isinstance(one, LocalBackend) and isinstance(default, LocalBackend)
    assert one.runner._workers == 1
    assert default.runner._workers is None  # decided from the device when the engine loads
