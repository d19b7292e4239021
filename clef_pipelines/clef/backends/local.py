"""`local`: a release folder in this process; concurrent requests share forward passes, and
on CPU several passes run side by side (see `LocalRunner`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clef_pipelines.clef.backends.base import Backend
from clef_pipelines.clef.engine import LocalRunner, WorkerBatcher
from clef_pipelines.clef.errors import ClefNotConfigured
from clef_pipelines.clef.tokens import counter_for
from clef_pipelines.clef.wire import SystemOneRequest


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        model: str,
        *,
        release_dir: str | None,
        device: str | None = None,
        max_length: int = 16_384,
        max_batch: int = 8,
        batch_wait_ms: float = 2.0,
        workers: int | None = None,
    ) -> None:
        super().__init__(model)
        if not release_dir:
            raise ClefNotConfigured("clef.backend 'local' needs clef.release_dir")
        if not (Path(release_dir) / "joint_schema_model.py").is_file():
            raise ClefNotConfigured(
                f"clef.release_dir {release_dir} is not a Clef release (no joint_schema_model.py)"
            )
        self.release_dir = release_dir
        self.context_tokens = max_length
        self.counter = counter_for(release_dir)
        # workers: forward passes side by side (default: 2 on a multi-core CPU, 1 on GPU).
        self.runner = LocalRunner(
            release_dir, device=device, max_length=max_length, workers=workers
        )
        self.batcher = WorkerBatcher(self.runner, max_batch=max_batch, wait_ms=batch_wait_ms)

    async def start(self) -> None:
        import asyncio

        # LocalRunner.load holds a lock: concurrent starts load the engine once.
        if self.runner.engine is None:
            await asyncio.get_running_loop().run_in_executor(None, self.runner.load)

    async def send(self, request: SystemOneRequest) -> dict[str, Any]:
        return await self.batcher.submit(request)

    async def aclose(self) -> None:
        await self.batcher.aclose()
        self.runner.close()

    def describe(self) -> str:
        return f"local ({self.release_dir})"
