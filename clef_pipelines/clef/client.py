"""The one Clef client every stage shares: validation, splitting, pacing, retries, cache,
usage. Async at heart (`ClefClient`); `SyncClefClient` runs it on a private event loop for
callers without one."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from clef_pipelines.clef.backends.base import Backend
from clef_pipelines.clef.cache import AnswerCache, cache_key
from clef_pipelines.clef.errors import (
    ClefBadAnswer,
    ClefDeadlineExceeded,
    ClefError,
    ClefNotConfigured,
    ClefRequestTooLarge,
    ClefRetriesExhausted,
)
from clef_pipelines.clef.limiter import Pacer
from clef_pipelines.clef.tokens import (
    PROMPT_OVERHEAD_TOKENS,
    counter_for,
    question_tokens,
    state_tokens,
)
from clef_pipelines.clef.usage import Usage
from clef_pipelines.clef.wire_common import MAX_QUESTIONS, canonical_json
from clef_pipelines.redact import (
    redacting_logger,
    register_url_secrets,
    secret_from_env,
)

if TYPE_CHECKING:
    # Settings are the model, or a `config_light` section with the same attributes (a cold
    # `compact`, without pydantic).
    from clef_pipelines.clef.config import ClefConfig
    from clef_pipelines.clef.wire import SystemOneRequest, SystemOneResponse

log = redacting_logger("clef_pipelines.clef")
_SAID: set[str] = set()

#: When (time.monotonic()) the Clef requests of the current task, and the tasks it starts,
#: must be done by; None: no deadline but each request's own timeout and retries.
_DEADLINE: ContextVar[float | None] = ContextVar("clef_deadline", default=None)


@contextmanager
def clef_deadline(seconds: float | None) -> Iterator[None]:
    """Every Clef request made inside (in this task and the tasks it starts) ends within
    `seconds` from now, its retries and backoffs included: a wait that would pass the deadline
    is not started, a request in flight at the deadline is cancelled, and both fail with
    `ClefDeadlineExceeded`, which the query path treats as any Clef failure (degrade). Nested
    deadlines keep the earlier one. Why: a Clef server that never answers must not hold a query
    for `timeout_s` times `max_retries + 1` (six minutes by default)."""
    if seconds is None:
        yield
        return
    at = time.monotonic() + seconds
    current = _DEADLINE.get()
    token = _DEADLINE.set(at if current is None else min(current, at))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _deadline_exceeded(why: str) -> ClefDeadlineExceeded:
    return ClefDeadlineExceeded(f"no answer within the query's deadline ({why})")


def _say_once(message: str, level: int = logging.INFO) -> None:
    if message not in _SAID:
        _SAID.add(message)
        log.log(level, message)


def resolve_backend(config: ClefConfig, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The backend `config` selects, and why, in plain words (for `auto`)."""
    env = os.environ if env is None else env
    if config.backend != "auto":
        return config.backend, f"clef.backend is {config.backend!r}"
    if env.get("CLOUDFLARE_ACCOUNT_ID") and env.get("CLOUDFLARE_API_TOKEN"):
        return "workers-ai", "CLOUDFLARE_ACCOUNT_ID and CLOUDFLARE_API_TOKEN are set"
    if config.base_url or env.get("CLEF_BASE_URL"):
        return "self-hosted", "a self-hosted base URL is set (clef.base_url or CLEF_BASE_URL)"
    return "off", (
        "no Workers AI credentials (CLOUDFLARE_ACCOUNT_ID, CLOUDFLARE_API_TOKEN) and no "
        "CLEF_BASE_URL, so Clef is off and later stages fall back, marking results degraded"
    )


def make_backend(
    config: ClefConfig, env: Mapping[str, str] | None = None, *, http_in_threads: bool = False
) -> Backend:
    """The backend `config` resolves to. `http_in_threads`: an HTTP backend sends from threads
    with httpx's sync client (`backends/http.py`: for a one-shot process)."""
    env = os.environ if env is None else env
    name, why = resolve_backend(config, env)
    if config.backend == "auto":
        _say_once(
            f"Clef backend: {name}, because {why}.",
            logging.WARNING if name == "off" else logging.INFO,
        )
    http_kw = {
        "timeout_s": config.timeout_s,
        "connect_timeout_s": config.connect_timeout_s,
        "max_connections": config.max_concurrency,
        "in_threads": http_in_threads,
    }
    if name == "workers-ai":
        from clef_pipelines.clef.backends.workers_ai import WorkersAIBackend

        account, token = (
            env.get("CLOUDFLARE_ACCOUNT_ID"),
            secret_from_env("CLOUDFLARE_API_TOKEN", env),
        )
        if not account or not token:
            raise ClefNotConfigured(
                "clef.backend 'workers-ai' needs CLOUDFLARE_ACCOUNT_ID and CLOUDFLARE_API_TOKEN"
            )
        base = config.workers_ai_base_url or env.get("CLEF_WORKERS_AI_BASE_URL")
        backend = WorkersAIBackend(
            config.model, account_id=account, api_token=token, base_url=base, **http_kw
        )
        # The model's own tokenizer counts exactly when its release folder is at hand.
        backend.counter = counter_for(config.release_dir, config.token_counter)
        return backend
    if name == "self-hosted":
        from clef_pipelines.clef.backends.self_hosted import SelfHostedBackend

        base = config.base_url or env.get("CLEF_BASE_URL")
        register_url_secrets(base)
        if not base:
            raise ClefNotConfigured(
                "clef.backend 'self-hosted' needs clef.base_url or CLEF_BASE_URL"
            )
        key = None
        if config.api_key_env:
            key = secret_from_env(config.api_key_env, env)
            if not key:
                raise ClefNotConfigured(
                    f"clef.api_key_env names {config.api_key_env}, which is not set"
                )
        backend = SelfHostedBackend(config.model, base_url=base, api_key=key, **http_kw)
        backend.context_tokens = config.max_length
        backend.counter = counter_for(config.release_dir, config.token_counter)
        return backend
    if name == "local":
        from clef_pipelines.clef.backends.local import LocalBackend

        return LocalBackend(
            config.model,
            release_dir=config.release_dir,
            device=config.device,
            max_length=config.max_length,
            max_batch=config.max_batch,
            batch_wait_ms=config.batch_wait_ms,
            workers=config.engine_workers,
        )
    if name == "ray":
        from clef_pipelines.clef.backends.ray_pool import RayBackend

        return RayBackend(
            config.model,
            release_dir=config.release_dir,
            address=config.ray_address,
            namespace=config.ray_namespace,
            num_actors=config.ray_num_actors,
            num_gpus_per_actor=config.ray_num_gpus_per_actor,
            num_cpus_per_actor=config.ray_num_cpus_per_actor,
            device=config.device,
            max_length=config.max_length,
            max_batch=config.max_batch,
            batch_wait_ms=config.batch_wait_ms,
            local_num_cpus=config.ray_local_num_cpus,
            max_restarts=config.ray_max_restarts,
        )
    from clef_pipelines.clef.backends.off import OffBackend

    return OffBackend(config.model, reason=why)


def _cache_id(backend: Backend) -> str:
    """Answers depend on who computed them: the service, a server URL, or a release folder."""
    if backend.name == "self-hosted":
        return f"self-hosted:{getattr(backend, 'base_url', '')}"
    if backend.name in ("local", "ray"):
        return f"release:{os.path.realpath(getattr(backend, 'release_dir', ''))}"
    return backend.name


class ClefClient:
    """Ask Clef. One instance per event loop; share it across a run's stages.

    `plain_wire`: questions, requests and answers go through `wire_light` (plain objects for
    plain noul questions and their answers, the models for anything else), so that a
    one-shot process (the CLI's `compact`) imports no pydantic; else `wire`'s models, as the
    library and the services return them."""

    def __init__(
        self,
        config: ClefConfig | None = None,
        *,
        data_dir: str | Path | None = None,
        backend: Backend | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        http_in_threads: bool = False,
        plain_wire: bool = False,
    ) -> None:
        if plain_wire:
            from clef_pipelines.clef import wire_light as wire_api
        else:
            from clef_pipelines.clef import wire as wire_api  # type: ignore[no-redef]
        self._wire = wire_api
        if config is None:
            from clef_pipelines.clef.config import ClefConfig

            config = ClefConfig()
        self.config = config
        # Injectable so tests can see the waits chosen without waiting.
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self.backend = backend or make_backend(self.config, env, http_in_threads=http_in_threads)
        self.usage = Usage(backend=self.backend.name, model=self.backend.model)
        self.cache: AnswerCache | None = None
        if self.config.cache and self.backend.enabled:
            path = self.config.cache_path or (
                str(Path(data_dir) / "clef-cache.sqlite3") if data_dir else None
            )
            if path:
                self.cache = AnswerCache(path)
        self._cache_id = _cache_id(self.backend)
        self._pacer: Pacer | None = None
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    # ---- public -----------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """False when Clef is off: callers fall back and mark their results degraded."""
        return self.backend.enabled

    @property
    def context_tokens(self) -> int:
        return self.config.context_tokens or self.backend.context_tokens

    async def start(self) -> None:
        """Connect or load the engine now rather than on the first request."""
        if self._started:
            return
        # Concurrent first requests must start the backend once, not once each.
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if not self._started:
                await self.backend.start()
                self._started = True

    async def ask(
        self,
        state: Any,
        questions: Mapping[str, Any],
        *,
        images: Sequence[str] | None = None,
        model: str | None = None,
        use_cache: bool = True,
    ) -> SystemOneResponse:
        """Ask every question about `state`. More than 64 questions, or more than fit the
        token budget with the state, are split into several requests and the answers merged
        in order. A state that does not fit is refused (ClefRequestTooLarge)."""
        if not self.enabled:
            raise ClefNotConfigured(self.backend.describe())
        model = model or self.backend.model
        # Validated and dumped once: planning counts the dumps and the requests are built
        # from both.
        parsed, dumped = self._wire.parse_and_dump_questions(dict(questions))
        parts, state_n = self._plan(state, dumped)
        requests = [
            self._wire.request_from_parsed(
                model,
                state,
                {qid: parsed[qid] for qid in part},
                part,
                list(images) if images else None,
            )
            for part in parts
        ]
        if len(requests) == 1:
            return await self._ask_one(requests[0], use_cache, state_n)
        answers = await asyncio.gather(*(self._ask_one(r, use_cache, state_n) for r in requests))
        return self._wire.merge_responses(list(answers))

    async def ask_body(
        self, body: Mapping[str, Any], *, use_cache: bool = True
    ) -> SystemOneResponse:
        """Ask with a whole request body (`model` optional); split like `ask`."""
        return await self.ask(
            body.get("state"),
            body.get("questions") or {},
            images=body.get("images"),
            model=body.get("model"),
            use_cache=use_cache,
        )

    async def aclose(self) -> None:
        await self.backend.aclose()
        if self.cache is not None:
            self.cache.close()
            self.cache = None

    async def __aenter__(self) -> ClefClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- inside -----------------------------------------------------------------------

    def _plan(self, state: Any, questions: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        """Group questions so each request fits the budget and holds at most 64; also the
        state's token count, which every part shares."""
        counter = self.backend.counter
        budget = self.context_tokens
        st = state_tokens(counter, state)
        if self.config.max_state_tokens is not None and st > self.config.max_state_tokens:
            raise ClefRequestTooLarge(
                f"state: {st} tokens ({counter.name}) over clef.max_state_tokens="
                f"{self.config.max_state_tokens}; it is never truncated: shorten or split it",
                field="state",
            )
        room = budget - st - PROMPT_OVERHEAD_TOKENS
        if room <= 0:
            raise ClefRequestTooLarge(
                f"state: {st} tokens ({counter.name}) leave no room for questions in the "
                f"{budget}-token budget of {self.backend.name}; it is never truncated: "
                "shorten or split it",
                field="state",
            )
        parts: list[dict[str, Any]] = [{}]
        used = 0
        for qid, q in questions.items():
            n = question_tokens(counter, qid, q, len(parts[-1]) + 1)
            if n > room:
                raise ClefRequestTooLarge(
                    f"questions.{qid}: {n} tokens do not fit beside the state "
                    f"({st} tokens) in the {budget}-token budget",
                    field=f"questions.{qid}",
                )
            if parts[-1] and (used + n > room or len(parts[-1]) >= MAX_QUESTIONS):
                parts.append({})
                used = 0
            parts[-1][qid] = q
            used += n
        return parts, st

    def _pacer_now(self) -> Pacer:
        if self._pacer is None:
            c = self.config
            self._pacer = Pacer(c.requests_per_second, c.tokens_per_second, c.max_concurrency)
        return self._pacer

    def _asks_too_long(self, exc: BaseException) -> bool:
        """A retry-after past `max_retry_after_s` is a server asking us to stop for now."""
        retry_after = getattr(exc, "retry_after", None)
        return retry_after is not None and float(retry_after) > self.config.max_retry_after_s

    def _should_retry(self, exc: BaseException) -> bool:
        return isinstance(exc, ClefError) and exc.retryable and not self._asks_too_long(exc)

    def _before_sleep(self, state: RetryCallState) -> None:
        """Count the retry and say that we wait, how long and why: a wait is never silent."""
        self.usage.add_retry()
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        why = "as the server asks (retry-after)" if getattr(exc, "retry_after", None) else "backoff"
        log.warning(
            "Clef %s: %s; waiting %.1f s %s before attempt %d of %d",
            self.backend.describe(),
            exc,
            wait,
            why,
            state.attempt_number + 1,
            self.config.max_retries + 1,
        )

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:  # within max_retry_after_s: `_should_retry` saw to that
            return float(retry_after)
        cap = min(
            self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (state.attempt_number - 1)
        )
        # Equal jitter: at least half the backoff, so a crowd of clients spreads out without
        # any one of them retrying at once.
        return cap / 2 + random.uniform(0, cap / 2)

    async def _ask_one(
        self, request: SystemOneRequest, use_cache: bool, state_n: int
    ) -> SystemOneResponse:
        """One request; `state_n`: its state's token count, as `_plan` counted it (a state
        of thousands of tokens is not counted twice)."""
        started = time.perf_counter()
        wire = request.wire()
        key = cache_key(self._cache_id, request.model, wire) if self.cache is not None else None
        if key and use_cache and self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                resp = self._wire.parse_response(hit, request)
                self.usage.record(latency_ms=(time.perf_counter() - started) * 1e3, cached=True)
                return resp
        await self.start()
        pacer = self._pacer_now()
        counter = self.backend.counter
        tokens = state_n
        # The token limiter is charged for the whole input: state, questions and prompt.
        charge = tokens + counter.count(canonical_json(wire["questions"])) + PROMPT_OVERHEAD_TOKENS
        deadline = _DEADLINE.get()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            retry=retry_if_exception(self._should_retry),
            wait=self._wait,
            before_sleep=self._before_sleep,
            sleep=self._sleep if deadline is None else self._sleep_before(deadline),
            reraise=True,
        )
        attempts_made = 0
        try:
            async for attempt in retrying:
                attempts_made = attempt.retry_state.attempt_number
                with attempt:
                    # Hold a concurrency slot while sending only, not while backing off.
                    async with pacer.slots:
                        body = await self._send_by(deadline, pacer, charge, request)
            resp = self._wire.parse_response(body, request)
            self._check_not_truncated(request, resp, tokens)
        except ClefError as exc:
            self.usage.add_error()
            if exc.retryable and self._asks_too_long(exc):
                raise ClefRetriesExhausted(
                    f"gave up: the server asks to retry after {exc.retry_after:.0f} s, longer than "
                    f"clef.max_retry_after_s ({self.config.max_retry_after_s:g} s): {exc}",
                    last=exc,
                    attempts=attempts_made,
                ) from exc
            if exc.retryable:
                n = self.config.max_retries + 1
                raise ClefRetriesExhausted(
                    f"gave up after {n} attempt(s): {exc}", last=exc, attempts=n
                ) from exc
            raise
        self.usage.record(
            latency_ms=(time.perf_counter() - started) * 1e3,
            cached=False,
            input_tokens=resp.usage.input_tokens,
            output_tokens=resp.usage.output_tokens,
        )
        if key and self.cache is not None:
            self.cache.put(key, self._cache_id, request.model, resp.wire())
        return resp

    async def _send_by(
        self, deadline: float | None, pacer: Pacer, charge: int, request: SystemOneRequest
    ) -> Any:
        """Wait for the pacer and send, cancelled at the caller's deadline (if any)."""
        if deadline is None:
            await pacer.admit(charge)
            return await self.backend.send(request)
        left = deadline - time.monotonic()
        if left <= 0:
            raise _deadline_exceeded("passed before the request was sent")
        try:
            async with asyncio.timeout(left):
                await pacer.admit(charge)
                return await self.backend.send(request)
        except TimeoutError:
            raise _deadline_exceeded(f"the server did not answer within {left:.1f} s") from None

    def _sleep_before(self, deadline: float) -> Callable[[float], Awaitable[None]]:
        """The retry loop's sleep, refusing a backoff that would end past the deadline."""

        async def sleep(seconds: float) -> None:
            if time.monotonic() + seconds >= deadline:
                raise _deadline_exceeded(f"no time left for a retry after {seconds:.1f} s")
            await self._sleep(seconds)

        return sleep

    def _check_not_truncated(
        self, request: SystemOneRequest, resp: SystemOneResponse, state_n: int
    ) -> None:
        """A backend that read less than the state must not pass unnoticed (the hosted
        service once read only about the first 2,048 tokens, silently). With the exact
        tokenizer the reported input cannot be below the state; the estimate counts at most
        about 1.6x the real tokens (1.1-1.2x on prose, code and JSON), so a report under half
        of it means part of the state was not read; only states over 4,096 are judged."""
        reported = resp.usage.input_tokens
        if reported <= 0 or not self.config.truncation_check:
            return  # a backend that does not report usage cannot be checked
        exact = self.backend.counter.exact
        if (exact and reported < state_n) or (
            not exact and state_n > 4096 and reported * 2 < state_n
        ):
            raise ClefBadAnswer(
                f"the backend reports {reported} input tokens for a state of about "
                f"{state_n}: it read only part of the state (silent truncation)"
            )


class SyncClefClient:
    """The same client for code without an event loop: a private loop on a daemon thread."""

    def __init__(self, config: ClefConfig | None = None, **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="clef-client-loop", daemon=True
        )
        self._thread.start()
        self.client = ClefClient(config, **kw)

    def _run(self, coro: Any) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    def run(self, coro: Any) -> Any:
        """Run a coroutine that uses `self.client` (packed asks, say) on the client's loop."""
        return self._run(coro)

    @property
    def enabled(self) -> bool:
        return self.client.enabled

    @property
    def usage(self) -> Usage:
        return self.client.usage

    @property
    def backend(self) -> Backend:
        return self.client.backend

    def start(self) -> None:
        self._run(self.client.start())

    def ask(self, state: Any, questions: Mapping[str, Any], **kw: Any) -> SystemOneResponse:
        return self._run(self.client.ask(state, questions, **kw))

    def ask_body(self, body: Mapping[str, Any], **kw: Any) -> SystemOneResponse:
        return self._run(self.client.ask_body(body, **kw))

    def ask_many(
        self, items: Sequence[tuple[Any, Mapping[str, Any]]], **kw: Any
    ) -> list[SystemOneResponse | ClefError]:
        """Ask several (state, questions) pairs concurrently; errors come back in place."""

        async def run() -> list[Any]:
            return await asyncio.gather(
                *(self.client.ask(s, q, **kw) for s, q in items), return_exceptions=True
            )

        out = self._run(run())
        for r in out:
            if isinstance(r, BaseException) and not isinstance(r, ClefError):
                raise r
        return out

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self.client.aclose())
            self._run(self._cancel_leftovers())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()

    @staticmethod
    async def _cancel_leftovers() -> None:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> SyncClefClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
