"""`serve`, `check` and `clef-pool-shutdown`: the Clef commands (see issue 3)."""

from __future__ import annotations

import contextlib
import ipaddress
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import ConfigOption, console, fail, lit, load_cli_settings
from clef_pipelines.redact import secret_from_env


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@app.command()
def serve(
    release_dir: Annotated[Path, typer.Argument(help="A Clef release folder.")],
    ray: Annotated[bool, typer.Option("--ray", help="Answer through a Ray actor pool.")] = False,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    api_key_env: Annotated[
        str | None,
        typer.Option(help="Env variable holding the bearer key clients must send."),
    ] = None,
    max_batch: Annotated[
        int | None, typer.Option(help="Requests per forward pass (default: clef.max_batch).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Forward passes side by side (default: clef.engine_workers, else auto)."
        ),
    ] = None,
    max_body_mb: Annotated[float, typer.Option(help="Largest request body, in MiB.")] = 16.0,
    config: ConfigOption = None,
) -> None:
    """Serve a release folder as a System One endpoint: POST /v1/systemone, GET /health."""
    from clef_pipelines.clef.errors import ClefError
    from clef_pipelines.clef.serve import serve as run_server

    settings = load_cli_settings(config)
    cfg = settings.clef
    if not (release_dir / "joint_schema_model.py").is_file():
        fail(f"{release_dir} is not a Clef release folder (no joint_schema_model.py)")
    api_key = None
    if api_key_env:
        api_key = secret_from_env(api_key_env)
        if not api_key:
            fail(f"--api-key-env names {api_key_env}, which is not set")
    elif not _is_loopback(host):
        console.print(
            f"[yellow]warning:[/] serving on {lit(host)} without a key; pass --api-key-env to "
            "require a bearer key"
        )
    batch = max_batch or cfg.max_batch
    try:
        if ray:
            from clef_pipelines.clef.backends.ray_pool import RayBackend

            backend: Any = RayBackend(
                cfg.model,
                release_dir=str(release_dir),
                address=cfg.ray_address,
                namespace=cfg.ray_namespace,
                num_actors=cfg.ray_num_actors,
                num_gpus_per_actor=cfg.ray_num_gpus_per_actor,
                num_cpus_per_actor=cfg.ray_num_cpus_per_actor,
                device=cfg.device,
                max_length=cfg.max_length,
                max_batch=batch,
                batch_wait_ms=cfg.batch_wait_ms,
                local_num_cpus=cfg.ray_local_num_cpus,
            )
        else:
            from clef_pipelines.clef.backends.local import LocalBackend

            backend = LocalBackend(
                cfg.model,
                release_dir=str(release_dir),
                device=cfg.device,
                max_length=cfg.max_length,
                max_batch=batch,
                batch_wait_ms=cfg.batch_wait_ms,
                workers=workers or cfg.engine_workers,
            )
    except ClefError as exc:
        fail(str(exc))
    run_server(
        backend,
        host=host,
        port=port,
        api_key=api_key,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
    )


@app.command("clef-pool-shutdown")
def clef_pool_shutdown(config: ConfigOption = None) -> None:
    """Kill the Ray actors of the Clef pool (only ours: clef.ray_namespace, clef-engine-*)."""
    from clef_pipelines.clef.backends.ray_pool import shutdown_pool

    cfg = load_cli_settings(config).clef
    killed = shutdown_pool(cfg.ray_namespace, address=cfg.ray_address)
    console.print(f"killed {len(killed)} actor(s): {lit(', '.join(killed) or 'none')}")


_NOT_CONFIGURED_CLEF = (
    "not configured: set CLOUDFLARE_ACCOUNT_ID and CLOUDFLARE_API_TOKEN (Workers AI), or "
    "CLEF_BASE_URL (a self-hosted server), or clef.backend: local with clef.release_dir"
)


def _check_clef(settings: Any) -> tuple[str, str, float | None]:
    from clef_pipelines.clef.client import SyncClefClient, resolve_backend
    from clef_pipelines.clef.errors import ClefError, ClefNotConfigured

    name, why = resolve_backend(settings.clef)
    if name == "off":
        return "skipped", _NOT_CONFIGURED_CLEF if settings.clef.backend == "auto" else why, None
    try:
        client = SyncClefClient(settings.clef)
    except ClefNotConfigured as exc:
        return "skipped", f"not configured: {exc}", None
    try:
        loaded = time.perf_counter()
        client.start()  # a local engine loads here: keep that out of the call's latency
        load_s = time.perf_counter() - loaded
        started = time.perf_counter()
        resp = client.ask(
            {"text": "clef-pipelines check"},
            {"ok": {"type": "noul", "instructions": "Is `text` a health check?"}},
            use_cache=False,
        )
        ms = (time.perf_counter() - started) * 1e3
        extra = f" (started in {load_s:.1f} s)" if load_s > 0.5 else ""
        detail = f"{client.backend.describe()}: noul={resp.answers['ok'].noul}{extra}"
        return "ok", detail, ms
    except ClefError as exc:
        return "failed", f"{client.backend.describe()}: {type(exc).__name__}: {exc}", None
    finally:
        client.close()


def _check_embedding(settings: Any) -> tuple[str, str, float | None, Any]:
    try:
        from clef_pipelines.embedding import make_embedder
    except ImportError as exc:
        return "skipped", f"not available: {exc}", None, None
    try:
        embedder = make_embedder(settings.embedder)
        started = time.perf_counter()
        vec = embedder.embed(["clef-pipelines check"])
        ms = (time.perf_counter() - started) * 1e3
        return "ok", f"{embedder.name}: {embedder.dimension}-d {embedder.metric}", ms, vec
    except Exception as exc:  # any failure is the report, not a crash
        return "failed", f"{settings.embedder.kind}: {type(exc).__name__}: {exc}", None, None


def _check_store(settings: Any, vector: Any) -> tuple[str, str, float | None]:
    try:
        from clef_pipelines.stores import open_store
        from clef_pipelines.stores.base import CollectionSpec
    except ImportError as exc:
        return "skipped", f"not available: {exc}", None
    dim = int(vector.shape[1]) if vector is not None else 8
    vec = [float(x) for x in vector[0]] if vector is not None else [1.0] + [0.0] * (dim - 1)
    name = f"clef_check_{uuid.uuid4().hex[:8]}"
    store = None
    try:
        store = open_store(settings.store, settings.data_path)
        started = time.perf_counter()
        store.ensure_collection(CollectionSpec(name=name, dimension=dim, fields={"text": "str"}))
        rid = str(uuid.uuid4())
        store.upsert(name, [{"id": rid, "vector": vec, "text": "check", "quarantined": False}])
        hits = store.query(name, vec, top_k=1)
        got = store.get(name, [rid])
        store.drop(name)
        ms = (time.perf_counter() - started) * 1e3
        if not got or not hits or hits[0].id != rid:
            return "failed", f"{settings.store.kind}: the record did not come back", ms
        return "ok", f"{settings.store.kind}: write, query, read, drop", ms
    except Exception as exc:  # any failure is the report, not a crash
        return "failed", f"{settings.store.kind}: {type(exc).__name__}: {exc}", None
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()


@app.command()
def check(config: ConfigOption = None) -> None:
    """One Clef call, one embedding and one store round trip, each with its latency."""
    settings = load_cli_settings(config)
    rows: list[tuple[str, str, str, float | None]] = []
    status, detail, ms = _check_clef(settings)
    rows.append(("clef", status, detail, ms))
    status, detail, ms, vector = _check_embedding(settings)
    rows.append(("embedding", status, detail, ms))
    status, detail, ms = _check_store(settings, vector)
    rows.append(("store", status, detail, ms))

    from rich.table import Table

    table = Table(title="clef-pipelines check")
    for col in ("component", "status", "latency", "detail"):
        table.add_column(col)
    colour = {"ok": "green", "skipped": "yellow", "failed": "red"}
    for comp, st, det, lat in rows:
        table.add_row(
            comp,
            f"[{colour[st]}]{st}[/]",
            f"{lat:.1f} ms" if lat is not None else "-",
            lit(det),
        )
    console.print(table)
    if any(r[1] == "failed" for r in rows):
        raise typer.Exit(1)
