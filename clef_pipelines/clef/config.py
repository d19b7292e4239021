"""Clef configuration: which backend answers System One requests, and its limits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from clef_pipelines._strict import StrictModel, yaml_off

# YAML 1.1 reads a bare `off` (and `no`) as false: that is the `off` backend.
Backend = Annotated[
    Literal["auto", "workers-ai", "self-hosted", "local", "ray", "off"], BeforeValidator(yaml_off)
]


class ClefConfig(StrictModel):
    backend: Backend = "auto"

    model: Literal["clef", "clef-flash"] = "clef-flash"
    base_url: str | None = Field(
        None, description="Self-hosted System One endpoint base URL (or env CLEF_BASE_URL)."
    )
    api_key_env: str | None = Field(
        None, description="Name of the env variable holding a self-hosted bearer key."
    )
    release_dir: str | None = Field(None, description="Release folder for local / ray backends.")

    # Workers AI: the base URL is overridable so a loopback fake can exercise the envelope path.
    workers_ai_base_url: str | None = Field(
        None,
        description="Cloudflare API base (or env CLEF_WORKERS_AI_BASE_URL); "
        "default https://api.cloudflare.com/client/v4.",
    )

    # Pacing. Cloudflare publishes no limits; 60 concurrent requests have drawn 429s.
    requests_per_second: float = Field(20.0, gt=0, description="Client-side request rate cap.")
    tokens_per_second: float = Field(
        200_000.0, gt=0, description="Client-side input-token rate cap."
    )
    max_concurrency: int = Field(8, ge=1, le=256, description="Requests in flight at once.")

    # Retries: 408, 429, 500, 502, 503, 504, 529 and transport errors.
    max_retries: int = Field(5, ge=0, le=50)
    backoff_base_s: float = Field(0.5, ge=0, description="First backoff; doubles per attempt.")
    backoff_max_s: float = Field(30.0, ge=0, description="Cap on one backoff.")
    max_retry_after_s: float = Field(
        60.0,
        ge=0,
        description="Longest retry-after honoured; a server asking for longer is an error.",
    )
    timeout_s: float = Field(60.0, gt=0, description="Per-request HTTP timeout.")
    connect_timeout_s: float = Field(10.0, gt=0)

    # Cache: answers keyed by backend, model, state, images and the questions in order.
    cache: bool = Field(True, description="Persist answers in a sqlite cache.")
    cache_path: str | None = Field(
        None, description="sqlite file; default <data_dir>/clef-cache.sqlite3."
    )

    # Token budgets. A state over budget is refused, never truncated.
    max_state_tokens: int | None = Field(
        None, ge=16, description="Cap on the state alone; None: only the context budget applies."
    )
    context_tokens: int | None = Field(
        None,
        ge=256,
        description="Tokens per request (state + questions + prompt); None: the backend's "
        "(workers-ai 24,576, the smallest published; self-hosted, local and ray: max_length).",
    )
    token_counter: Literal["auto", "estimate", "qwen"] = Field(
        "auto",
        description="How request tokens are counted for the budget: auto (the release "
        "folder's tokenizer when release_dir has one, else estimate), estimate (calibrated "
        "on the Qwen3.5 tokenizer, a little over it; no vocabulary to load) or qwen (the "
        "Qwen3.5 tokenizer itself, exact; 1-3 s to load).",
    )
    truncation_check: bool = Field(
        True,
        description="Fail an answer whose reported input tokens show the state was cut.",
    )
    max_length: int = Field(
        16_384, ge=256, description="Context of the local engine (the release code's default)."
    )

    # local / ray engine.
    device: str | None = Field(None, description="torch device; default cuda when available.")
    max_batch: int = Field(8, ge=1, le=256, description="Requests per forward pass.")
    batch_wait_ms: float = Field(
        2.0, ge=0, description="How long the engine waits to fill a batch after the first request."
    )
    engine_workers: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Forward passes run side by side (default: 2 on a multi-core CPU, 1 on GPU).",
    )

    # ray
    ray_address: str | None = Field(
        None, description="Ray cluster to join (e.g. ray://host:10001 or auto); None: local Ray."
    )
    ray_namespace: str = Field("clef-pipelines", description="Namespace of the detached actors.")
    ray_num_actors: int = Field(1, ge=1, le=64)
    ray_num_gpus_per_actor: float | None = Field(
        None, ge=0, description="GPUs per actor; default 1 when the cluster has GPUs, else 0."
    )
    ray_num_cpus_per_actor: float = Field(1.0, ge=0)
    ray_local_num_cpus: int | None = Field(
        None, ge=1, description="CPUs of a Ray started here (no ray_address); default all."
    )
    ray_max_restarts: int = Field(
        3,
        ge=0,
        description=(
            "Times Ray restarts an engine actor that died (its node was lost), on a node with "
            "room, retrying the batches it held; the actors are spread over the nodes."
        ),
    )
