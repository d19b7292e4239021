"""The shared client against the fake server: envelope, errors, retries, pacing, cache, usage."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import socket
import sqlite3
from pathlib import Path

import pytest

from clef_pipelines.clef import client as client_mod
from clef_pipelines.clef.backends.http import parse_retry_after
from clef_pipelines.clef.cache import AnswerCache, cache_key
from clef_pipelines.clef.client import ClefClient, SyncClefClient, resolve_backend
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.errors import (
    ClefAuthError,
    ClefBadAnswer,
    ClefBadRequest,
    ClefNotConfigured,
    ClefQuotaExhausted,
    ClefRateLimited,
    ClefRequestTooLarge,
    ClefRetriesExhausted,
    ClefServerError,
    ClefTimeout,
    ClefTransportError,
    ClefValidationError,
)
from clef_pipelines.clef.limiter import Pacer
from clef_pipelines.clef.usage import Usage, percentile
from clef_pipelines.clef.wire import parse_request
from tests.clef.fake_server import FakeServer, Reply, answer_for

Q = {
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"tech": None, "billing": "Payments"},
    },
    "severity": {
        "type": "score",
        "instructions": "How severe?",
        "criteria": ["low", "mid", "high"],
    },
}
FAST = {"requests_per_second": 1000.0, "backoff_base_s": 0.001, "backoff_max_s": 0.01}


class Sleeps(list):
    """Records the waits the retry policy chose, without waiting."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def workers_ai(fake: FakeServer, tmp_path: Path, *, model: str = "clef", sleeps=None, **cfg):  # type: ignore[no-untyped-def]
    env = {
        "CLOUDFLARE_ACCOUNT_ID": "acct",
        "CLOUDFLARE_API_TOKEN": "test-key",
        "CLEF_WORKERS_AI_BASE_URL": fake.workers_ai_base,
    }
    config = ClefConfig(model=model, **(FAST | cfg))
    return SyncClefClient(
        config, env=env, data_dir=tmp_path, sleep=sleeps if sleeps is not None else Sleeps()
    )


def self_hosted(
    fake: FakeServer,
    tmp_path: Path,
    *,
    sleeps=None,
    key: str = "test-key",
    http_in_threads: bool = False,
    **cfg,
):  # type: ignore[no-untyped-def]
    config = ClefConfig(
        backend="self-hosted", base_url=fake.base_url, api_key_env="KEY", **(FAST | cfg)
    )
    return SyncClefClient(
        config,
        env={"KEY": key},
        data_dir=tmp_path,
        sleep=sleeps if sleeps is not None else Sleeps(),
        http_in_threads=http_in_threads,
    )


def test_workers_ai_envelope_path_headers_and_cost(fake: FakeServer, tmp_path: Path) -> None:
    with workers_ai(fake, tmp_path, model="clef") as c:
        resp = c.ask({"ticket": "API down"}, Q)
        assert resp.model == "clef"  # unwrapped from the envelope's result
        assert list(resp.answers) == list(Q)
        assert resp.answers["team"].choice == "tech"
        assert fake.headers[-1]["authorization"] == "Bearer test-key"
        snap = c.usage.snapshot()
    assert snap["backend"] == "workers-ai" and snap["sent"] == 1
    assert snap["cost_usd"] == pytest.approx(snap["input_tokens"] * 0.24 / 1e6)
    assert snap["input_tokens"] > 0


def test_clef_flash_price(fake: FakeServer, tmp_path: Path) -> None:
    with workers_ai(fake, tmp_path, model="clef-flash") as c:
        c.ask("state", Q)
        snap = c.usage.snapshot()
    assert snap["cost_usd"] == pytest.approx(snap["input_tokens"] * 0.09 / 1e6)
    assert snap["cost_usd"] > 0


def test_self_hosted_is_free_and_plain(fake: FakeServer, tmp_path: Path) -> None:
    with self_hosted(fake, tmp_path) as c:
        resp = c.ask("state", Q)
        assert resp.answers["urgent"].noul == 0.7
        assert c.usage.snapshot()["cost_usd"] == 0.0
        assert c.usage.snapshot()["input_tokens"] > 0


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 529])
def test_retryable_statuses_honour_retry_after_zero(
    fake: FakeServer, tmp_path: Path, status: int
) -> None:
    sleeps = Sleeps()
    fake.script(
        Reply(status=status, headers={"retry-after": "0"}),
        Reply(status=status, headers={"retry-after": "0"}),
    )
    with workers_ai(fake, tmp_path, sleeps=sleeps) as c:
        c.ask("s", Q)
        assert c.usage.retries == 2
    assert sleeps == [0.0, 0.0]  # retry-after: 0 means now, not "the default backoff"
    assert fake.calls == 3


def test_retry_after_seconds_and_jittered_backoff(fake: FakeServer, tmp_path: Path) -> None:
    sleeps = Sleeps()
    fake.script(
        Reply(status=503), Reply(status=429, headers={"retry-after": "7"}), Reply(status=503)
    )
    with self_hosted(fake, tmp_path, sleeps=sleeps, backoff_base_s=2.0, backoff_max_s=3.0) as c:
        c.ask("s", Q)
    assert 1.0 <= sleeps[0] <= 2.0  # after attempt 1: between half the base and the base
    assert sleeps[1] == 7.0  # the server's retry-after wins over the backoff
    assert 1.5 <= sleeps[2] <= 3.0  # after attempt 3: 8 s capped at backoff_max_s
    assert len(set(sleeps)) == 3


def test_retries_exhausted_keeps_the_last_error(fake: FakeServer, tmp_path: Path) -> None:
    fake.script(*[Reply(status=503)] * 3)
    with (
        self_hosted(fake, tmp_path, max_retries=2) as c,
        pytest.raises(ClefRetriesExhausted) as err,
    ):
        c.ask("s", Q)
    assert isinstance(err.value.last, ClefServerError)
    assert err.value.attempts == 3 and fake.calls == 3
    assert c.usage.errors == 1 and c.usage.retries == 2


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            Reply(cf_code=3036, status=429, cf_message="daily allocation exhausted"),
            ClefQuotaExhausted,
        ),
        (Reply(cf_code=5006, status=400, cf_message="bad input"), ClefBadRequest),
        (Reply(cf_code=10000, status=403, cf_message="Authentication error"), ClefAuthError),
        (Reply(raw=b"<html>oops</html>"), ClefBadAnswer),
        (Reply(partial=True), ClefBadAnswer),
        (Reply(bad_sum=True), ClefBadAnswer),
        (Reply(body={"model": "clef", "answers": {}}), ClefBadAnswer),
    ],
)
def test_errors_that_are_not_retried(
    fake: FakeServer, tmp_path: Path, reply: Reply, error: type
) -> None:
    fake.script(reply)
    with workers_ai(fake, tmp_path) as c, pytest.raises(error) as err:
        c.ask("s", Q)
    assert fake.calls == 1
    assert c.usage.retries == 0 and c.usage.errors == 1
    if reply.cf_code:
        assert err.value.code == reply.cf_code
        assert err.value.request_id == "fake-1"  # the cf-ray header


def test_out_of_capacity_3040_is_retried(fake: FakeServer, tmp_path: Path) -> None:
    fake.script(Reply(cf_code=3040, status=429, headers={"retry-after": "0"}))
    with workers_ai(fake, tmp_path) as c:
        c.ask("s", Q)
        assert c.usage.retries == 1


def test_bad_key_is_an_auth_error_and_not_retried(fake: FakeServer, tmp_path: Path) -> None:
    with self_hosted(fake, tmp_path, key="wrong") as c, pytest.raises(ClefAuthError):
        c.ask("s", Q)
    assert fake.calls == 1
    env = {
        "CLOUDFLARE_ACCOUNT_ID": "acct",
        "CLOUDFLARE_API_TOKEN": "wrong",
        "CLEF_WORKERS_AI_BASE_URL": fake.workers_ai_base,
    }
    with SyncClefClient(ClefConfig(**FAST), env=env) as c, pytest.raises(ClefAuthError) as err:
        c.ask("s", Q)
    assert err.value.code == 10000


def test_timeouts_are_retried_then_typed(fake: FakeServer, tmp_path: Path) -> None:
    fake.script(Reply(delay_s=2.0), Reply(delay_s=2.0))
    with (
        self_hosted(fake, tmp_path, timeout_s=0.5, max_retries=1) as c,
        pytest.raises(ClefRetriesExhausted) as err,
    ):
        c.ask("s", Q)
    assert isinstance(err.value.last, ClefTimeout)
    fake.script(Reply(delay_s=2.0))
    with self_hosted(fake, tmp_path, timeout_s=0.5, max_retries=1) as c:
        c.ask("s2", Q)  # one timeout, then an answer
        assert c.usage.retries == 1


def test_transport_errors_are_retried(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ClefConfig(
        backend="self-hosted", base_url=f"http://127.0.0.1:{port}", max_retries=2, **FAST
    )
    sleeps = Sleeps()
    with SyncClefClient(config, sleep=sleeps) as c, pytest.raises(ClefRetriesExhausted) as err:
        c.ask("s", Q)
    assert isinstance(err.value.last, ClefTransportError)
    assert len(sleeps) == 2


def test_cache_hits_skip_the_backend_and_key_covers_order(fake: FakeServer, tmp_path: Path) -> None:
    with self_hosted(fake, tmp_path) as c:
        a = c.ask({"x": 1}, Q)
        b = c.ask({"x": 1}, Q)
        assert fake.calls == 1 and a == b
        c.ask({"x": 1}, dict(reversed(list(Q.items()))))  # another order is another prompt
        assert fake.calls == 2
        c.ask({"x": 1}, Q, model="clef")  # another model
        assert fake.calls == 3
        c.ask({"x": 1}, Q, use_cache=False)
        assert fake.calls == 4
        snap = c.usage.snapshot()
    assert snap["cached"] == 1 and snap["sent"] == 4
    # A new client (a later run) reads the same file.
    with self_hosted(fake, tmp_path) as c:
        c.ask({"x": 1}, Q)
        assert c.usage.cached == 1 and fake.calls == 4
    # Another backend does not share answers.
    with workers_ai(fake, tmp_path, model="clef-flash") as c:
        c.ask({"x": 1}, Q)
        assert c.usage.cached == 0


def test_cache_key_parts() -> None:
    req = {"state": {"a": 1, "b": 2}, "questions": {"q": {"type": "noul", "instructions": "x"}}}
    same = {"state": {"b": 2, "a": 1}, "questions": {"q": {"instructions": "x", "type": "noul"}}}
    assert cache_key("b", "m", req) == cache_key("b", "m", same)
    assert cache_key("b", "m", req) != cache_key("b", "m2", req)
    assert cache_key("b", "m", req) != cache_key("b2", "m", req)
    assert cache_key("b", "m", req) != cache_key("b", "m", req | {"images": ["aGk="]})


def _writer(path: str, start: int) -> None:
    cache = AnswerCache(path)
    for i in range(start, start + 150):
        cache.put(f"k{i}", "b", "m", {"i": i})
        assert cache.get(f"k{i - 1 if i > start else i}") is not None
    cache.close()


def test_cache_is_wal_and_safe_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.sqlite3")
    AnswerCache(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, n * 1000)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    cache = AnswerCache(path)
    assert len(cache) == 450
    assert cache.get("k2149") == {"i": 2149}
    cache.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_concurrency_is_bounded(fake: FakeServer, tmp_path: Path) -> None:
    fake.script(*[Reply(delay_s=0.3)] * 6)
    with self_hosted(fake, tmp_path, max_concurrency=2, cache=False) as c:
        out = c.ask_many([({"i": i}, Q) for i in range(6)])
    assert all(not isinstance(r, Exception) for r in out)
    assert fake.max_inflight == 2


def test_requests_from_threads_answer_overlap_and_fail_as_from_the_loop(
    fake: FakeServer, tmp_path: Path
) -> None:
    """`http_in_threads` (the CLI's one-shot `compact`): the same answers, requests still in
    flight together up to max_concurrency, and the same typed errors, with no event-loop
    HTTP client made."""
    with self_hosted(fake, tmp_path, cache=False) as c:
        expected = c.ask("s", Q).answers
    with self_hosted(fake, tmp_path, cache=False, http_in_threads=True) as c:
        assert c.ask("s", Q).answers == expected
        assert c.backend._http is None and c.backend._sync_http is not None  # type: ignore[attr-defined]
    fake.script(*[Reply(delay_s=0.3)] * 6)
    with self_hosted(fake, tmp_path, max_concurrency=2, cache=False, http_in_threads=True) as c:
        out = c.ask_many([({"i": i}, Q) for i in range(6)])
    assert all(not isinstance(r, Exception) for r in out)
    assert fake.max_inflight == 2
    fake.script(Reply(delay_s=2.0), Reply(delay_s=2.0))
    with (
        self_hosted(fake, tmp_path, timeout_s=0.5, max_retries=1, http_in_threads=True) as c,
        pytest.raises(ClefRetriesExhausted) as err,
    ):
        c.ask("s2", Q)
    assert isinstance(err.value.last, ClefTimeout)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ClefConfig(backend="self-hosted", base_url=f"http://127.0.0.1:{port}", **FAST)
    with (
        SyncClefClient(config, sleep=Sleeps(), http_in_threads=True) as c,
        pytest.raises(ClefRetriesExhausted) as err,
    ):
        c.ask("s", Q)
    assert isinstance(err.value.last, ClefTransportError)


def test_limiter_charges_requests_and_tokens() -> None:
    async def run() -> tuple[bool, bool, bool]:
        pacer = Pacer(requests_per_s=3, tokens_per_s=100, max_concurrency=4)
        for _ in range(3):
            await pacer.admit(10)
        requests_left = pacer.requests.has_capacity()
        tokens_left = pacer.tokens.has_capacity(100)
        pacer2 = Pacer(requests_per_s=100, tokens_per_s=50, max_concurrency=1)
        await pacer2.admit(10_000)  # larger than the bucket: charged a full bucket, no error
        return requests_left, tokens_left, pacer2.tokens.has_capacity(25)

    requests_left, tokens_left, any_token_left = asyncio.run(run())
    assert requests_left is False  # 3 requests used the 3/s bucket
    assert tokens_left is False  # 30 of 100 tokens used: a full bucket more does not fit
    assert any_token_left is False  # the big request took the whole bucket


def test_more_than_64_questions_are_split_and_merged(fake: FakeServer, tmp_path: Path) -> None:
    many = {f"q{i}": {"type": "noul", "instructions": f"question {i}"} for i in range(70)}
    with self_hosted(fake, tmp_path) as c:
        resp = c.ask("s", many)
    assert list(resp.answers) == list(many)
    # The two parts are sent concurrently: they may reach the server in either order.
    assert sorted(len(r["questions"]) for r in fake.requests) == [6, 64]
    assert resp.usage.input_tokens == sum(100 + len('"s"') for _ in range(2))


def test_questions_split_by_token_budget(fake: FakeServer, tmp_path: Path) -> None:
    long = {f"q{i}": {"type": "noul", "instructions": "word " * 120} for i in range(6)}
    with self_hosted(fake, tmp_path, context_tokens=1000) as c:
        resp = c.ask("short state", long)
    assert len(resp.answers) == 6
    assert len(fake.requests) > 1
    assert sum(len(r["questions"]) for r in fake.requests) == 6


def test_oversize_state_is_refused_before_sending(fake: FakeServer, tmp_path: Path) -> None:
    with self_hosted(fake, tmp_path, context_tokens=1000) as c:
        with pytest.raises(ClefRequestTooLarge) as err:
            c.ask("x" * 5000, Q)
        assert err.value.field == "state"
        with pytest.raises(ClefRequestTooLarge):
            c.ask("x", {"q": {"type": "noul", "instructions": "y" * 5000}})
    with self_hosted(fake, tmp_path, max_state_tokens=100) as c, pytest.raises(ClefRequestTooLarge):
        c.ask("x" * 1000, Q)
    assert fake.calls == 0


def test_silent_truncation_is_caught(fake: FakeServer, tmp_path: Path) -> None:
    # The hosted service once read only ~2,048 tokens of a state without saying so: an
    # answer whose reported input is far below the state must fail, not pass as an answer.
    state = "word " * 6000  # about 6,000 tokens
    answer = answer_for(
        parse_request({"model": "clef-flash", "state": state, "questions": Q}).wire()
    )
    answer["usage"]["input_tokens"] = 2048 + 200
    fake.script(Reply(body=answer))
    with self_hosted(fake, tmp_path) as c, pytest.raises(ClefBadAnswer, match="truncation"):
        c.ask(state, Q)
    fake.script(Reply(body=answer | {"usage": {"input_tokens": 6000 + 300}}))
    with self_hosted(fake, tmp_path) as c:
        c.ask(state, Q, use_cache=False)  # a plausible count passes


def test_invalid_questions_are_refused_before_sending(fake: FakeServer, tmp_path: Path) -> None:
    with self_hosted(fake, tmp_path) as c:
        with pytest.raises(ClefValidationError) as err:
            c.ask("s", {"t": {"type": "choice", "instructions": "x", "criteria": {"only": None}}})
        assert err.value.field == "questions.t.criteria"
        with pytest.raises(ClefValidationError):
            c.ask("s", {})
    assert fake.calls == 0


def test_auto_backend_resolution_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    cfg = ClefConfig()
    assert resolve_backend(cfg, {})[0] == "off"
    assert resolve_backend(cfg, {"CLEF_BASE_URL": "http://x"})[0] == "self-hosted"
    both = {"CLOUDFLARE_ACCOUNT_ID": "a", "CLOUDFLARE_API_TOKEN": "t", "CLEF_BASE_URL": "http://x"}
    assert resolve_backend(cfg, both)[0] == "workers-ai"
    assert resolve_backend(cfg, {"CLOUDFLARE_ACCOUNT_ID": "a"})[0] == "off"
    assert resolve_backend(ClefConfig(backend="local"), both)[0] == "local"
    client_mod._SAID.clear()
    with caplog.at_level(logging.INFO, logger="clef_pipelines.clef"):
        client_mod.make_backend(cfg, {})
        client_mod.make_backend(cfg, {})
    said = [r.getMessage() for r in caplog.records if "Clef backend" in r.getMessage()]
    assert len(said) == 1 and "off" in said[0]


def test_off_backend_is_disabled(tmp_path: Path) -> None:
    with SyncClefClient(ClefConfig(backend="off"), data_dir=tmp_path) as c:
        assert c.enabled is False
        with pytest.raises(ClefNotConfigured):
            c.ask("s", Q)
    assert not (tmp_path / "clef-cache.sqlite3").exists()


def test_misconfigured_backends_say_what_is_missing() -> None:
    with pytest.raises(ClefNotConfigured, match="CLOUDFLARE"):
        client_mod.make_backend(ClefConfig(backend="workers-ai"), {})
    with pytest.raises(ClefNotConfigured, match="CLEF_BASE_URL"):
        client_mod.make_backend(ClefConfig(backend="self-hosted"), {})
    with pytest.raises(ClefNotConfigured, match="NOPE"):
        client_mod.make_backend(
            ClefConfig(backend="self-hosted", base_url="http://x", api_key_env="NOPE"), {}
        )
    with pytest.raises(ClefNotConfigured, match="release_dir"):
        client_mod.make_backend(ClefConfig(backend="local"), {})


def test_async_client_shares_one_loop(fake: FakeServer, tmp_path: Path) -> None:
    async def run() -> int:
        config = ClefConfig(
            backend="self-hosted", base_url=fake.base_url, api_key_env="KEY", **FAST
        )
        async with ClefClient(config, env={"KEY": "test-key"}, data_dir=tmp_path) as c:
            out = await asyncio.gather(*(c.ask({"i": i}, Q) for i in range(5)))
            return len(out)

    assert asyncio.run(run()) == 5


def test_retry_after_parsing() -> None:
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("garbage") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


def test_usage_percentiles_and_reset() -> None:
    u = Usage(backend="workers-ai", model="clef")
    for ms in [1.0, 2.0, 3.0, 4.0, 100.0]:
        u.record(latency_ms=ms, cached=False, input_tokens=1000)
    u.record(latency_ms=0.1, cached=True)
    snap = u.snapshot()
    assert snap["requests"] == 6 and snap["cached"] == 1 and snap["sent"] == 5
    assert snap["input_tokens"] == 5000
    assert snap["cost_usd"] == pytest.approx(5000 * 0.24 / 1e6)
    assert snap["latency_p50_ms"] == 2.0  # nearest rank of [0.1, 1, 2, 3, 4, 100]
    assert percentile([], 50) == 0.0
    u.reset()
    assert u.snapshot()["requests"] == 0


def test_rate_limited_error_type() -> None:
    from clef_pipelines.clef.backends.http import error_for_status

    assert isinstance(error_for_status(429, "x", request_id=None, retry_after=0), ClefRateLimited)
    assert isinstance(
        error_for_status(408, "x", request_id=None, retry_after=None), ClefRateLimited
    )
    assert isinstance(
        error_for_status(529, "x", request_id=None, retry_after=None), ClefServerError
    )
    assert isinstance(error_for_status(401, "x", request_id=None, retry_after=None), ClefAuthError)
    assert isinstance(error_for_status(422, "x", request_id=None, retry_after=None), ClefBadRequest)
