"""Issue 54 (Medium 11): `clef_deadline` bounds a Clef request's retries, backoffs and waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clef_pipelines.clef.client import ClefClient, clef_deadline
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.errors import ClefDeadlineExceeded
from tests.clef.fake_server import FakeServer, Reply
from tests.clef.test_client import Q, Sleeps


def client(fake: FakeServer, tmp_path: Path, sleeps: Sleeps, **cfg: float) -> ClefClient:
    config = ClefConfig(
        backend="self-hosted",
        base_url=fake.base_url,
        api_key_env="KEY",
        cache=False,
        requests_per_second=1000.0,
        **cfg,
    )
    return ClefClient(config, env={"KEY": "test-key"}, data_dir=tmp_path, sleep=sleeps)


def test_a_backoff_past_the_deadline_is_not_waited(fake: FakeServer, tmp_path: Path) -> None:
    fake.script(*[Reply(status=503)] * 6)
    sleeps = Sleeps()

    async def go() -> None:
        async with client(fake, tmp_path, sleeps, backoff_base_s=5.0) as c:
            with clef_deadline(2.0), pytest.raises(ClefDeadlineExceeded, match="retry"):
                await c.ask("s", Q)

    asyncio.run(go())
    assert fake.calls == 1 and sleeps == []  # 2.5 to 5 s of backoff would pass the deadline


def test_a_server_that_never_answers_is_cut_at_the_deadline(
    fake: FakeServer, tmp_path: Path
) -> None:
    fake.script(*[Reply(delay_s=2.0)] * 6)

    async def go() -> None:
        async with client(fake, tmp_path, Sleeps(), timeout_s=60.0, backoff_base_s=0.0) as c:
            with clef_deadline(0.3), pytest.raises(ClefDeadlineExceeded, match="did not answer"):
                await c.ask("s", Q)

    asyncio.run(go())
    assert fake.calls == 1  # cancelled at the deadline, not retried
