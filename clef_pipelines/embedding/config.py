"""The embedder's settings: which model, where batches are embedded, and how Ray is used."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clef_pipelines._strict import StrictModel

Executor = Literal["local", "ray"]


class RayEmbedConfig(StrictModel):
    """How `embedder.executor: ray` uses Ray."""

    address: str | None = Field(
        None, description="Ray cluster address (ray://host:10001 or auto); None: a local Ray."
    )
    namespace: str = Field("clef-pipelines", description="Ray namespace of the actors.")
    num_actors: int = Field(2, ge=1, description="Embedding actors (one model copy each).")
    num_cpus_per_actor: float = Field(1.0, gt=0)
    num_gpus_per_actor: float | None = Field(
        None, ge=0, description="GPUs per actor; None: 1 when the cluster has GPUs, else 0."
    )
    in_flight_per_actor: int = Field(2, ge=1, description="Batches queued per actor.")
    local_num_cpus: int | None = Field(
        None, ge=1, description="CPUs of a local Ray started here (None: all)."
    )
    scheduling: Literal["SPREAD", "DEFAULT"] = Field(
        "SPREAD",
        description=(
            "Ray scheduling strategy of the actors: SPREAD puts them on as many nodes as "
            "possible (a lost node takes fewer of them); DEFAULT packs them where Ray likes."
        ),
    )
    max_batch_retries: int = Field(
        3,
        ge=0,
        description=(
            "Times one batch is sent again after its actor was lost (node died, process "
            "killed) before the pass fails."
        ),
    )
    replace_lost_actors: bool = Field(
        True,
        description=(
            "Start a new actor for each one lost (at most num_actors per pass); it takes "
            "batches once it is up, where the cluster has room for it."
        ),
    )
    actor_start_wait_s: float = Field(
        600.0,
        gt=0,
        description=(
            "How long a pass waits with no actor up (at its start, or after every actor was "
            "lost) before it fails: long enough for an autoscaler to add a node."
        ),
    )
    node_loss_wait_s: float = Field(
        30.0,
        ge=0,
        description=(
            "After a pass that lost actors: how long to wait for the cluster to report "
            "their nodes dead, to tell a lost node from a lost actor process in the counts."
        ),
    )


class EmbedderConfig(StrictModel):
    """Which model turns chunk texts into vectors."""

    kind: Literal["minilm", "e5-multilingual", "hash", "openai"] = Field(
        "minilm",
        description=(
            "minilm (offline all-MiniLM-L6-v2, English), e5-multilingual (offline "
            "multilingual-e5-small 4-bit, extra 'e5'), hash (tests) or openai (HTTP endpoint). "
            "A collection records its embedder: query it with the same kind."
        ),
    )
    model: str | None = Field(None, description="Model name (openai kind); fixed for the others.")
    dimension: int | None = Field(
        None, ge=1, description="Vector size (hash, openai); minilm and e5-multilingual are 384."
    )
    batch_size: int = Field(64, ge=1, description="Texts per embedder call.")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL (openai kind).")
    api_key_env: str | None = Field(None, description="Env variable with the API key (openai).")
    timeout_s: float = Field(60.0, description="HTTP timeout of one embedder call (openai).")
    executor: Executor = Field(
        "local", description="Where batches are embedded: in this process, or on Ray actors."
    )
    ray: RayEmbedConfig = RayEmbedConfig()
