"""One source ingested three ways: local disk, S3 (moto) with the intermediates and LanceDB
there too, and S3 with every step in a process of its own; then an unchanged refresh of each.

    .venv/bin/python -m bench run object_store [--docs 20000] [--modes local,s3,s3-multiprocess]
        [--keep DIR] [--quick] [--json]

The same generated Markdown files (80 to 400 words, `bench.scale`'s text), hash embedder, guard
off, so what differs is where the bytes live. S3 is moto's server on loopback behind the
counting proxy of `clef_pipelines.testing.s3_server` (started here; the runs are child
processes), so "bytes read" and "bytes written" are the bodies that crossed the wire. Per run:
wall and CPU seconds, peak RSS of the run's process (`s3-multiprocess`: of its largest step
process, and the orchestrating process beside it), requests and bytes to the object store,
objects downloaded. The unchanged refresh should list and compare only: no object downloaded.
Then, per mode, two ticks of the sensor in a fresh process (`source_change_sensor`, evaluated as
the daemon evaluates it, against the run's instance): the automated refresh's no-change path,
which lists and compares and requests no run. The first tick pays the process's first listing
(the object store's client); the second is what each later tick of a long-lived daemon costs.
moto is a Python server on the same cores, so S3 figures here are a floor on the work, not a
forecast of AWS latency. `--quick`: 500 documents.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from bench._common import bench_cmd, child_env

QUICK = {"docs": 500}
MODES = ("local", "s3", "s3-multiprocess")
SOURCE = "bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--docs", type=int, default=20_000, help="Documents in the source.")
    parser.add_argument(
        "--modes", default=",".join(MODES), help="Comma-separated: " + ", ".join(MODES)
    )
    parser.add_argument("--keep", type=Path, help="Work folder to keep (default: a temp folder).")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-mode", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)


def _documents(n: int, seed: int = 13) -> list[tuple[str, bytes]]:
    from bench.scale import _text, _vocabulary

    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    out = []
    for i in range(n):
        title = " ".join(rng.choice(vocab) for _ in range(rng.randint(2, 6))).title()
        out.append(
            (f"d{i // 1000:03d}/doc-{i:07d}.md", f"# {title}\n\n{_text(rng, vocab)}\n".encode())
        )
    return out


def _child(config: Path, mode: str, out: Path) -> None:
    """One ingestion run in this process (or, multiprocess, orchestrated from it)."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import run_ingestion

    settings = load_settings(config)
    started = time.perf_counter()
    if mode != "s3-multiprocess":
        (report,) = run_ingestion(settings, [SOURCE])
        ok, error, assets = report.success, report.error, report.assets
    else:
        ok, error, assets = _multiprocess(config, settings)
    wall = time.perf_counter() - started
    flat = {
        k: {m: v for m, v in meta.items() if isinstance(v, int | float | str)}
        for k, meta in assets.items()
    }
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out.write_text(
        json.dumps(
            {
                "success": ok,
                "error": error,
                "wall_s": wall,
                "assets": flat,
                "children_peak_kib": children,
            }
        )
    )


def _sensor_child(config: Path, out: Path) -> None:
    """One evaluation of the sensor, as the daemon's tick makes it: no cursor (a first tick),
    so the last inventory's change signal is read from the instance."""
    import dagster as dg

    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import ensure_dagster_home
    from clef_pipelines.jobs.location import build_definitions, build_resources

    settings = load_settings(config)
    ensure_dagster_home(settings)
    sensor = build_definitions(settings).resolve_sensor_def("source_change_sensor")
    resources = build_resources(settings)
    ticks: list[float] = []
    requests: list[Any] = []
    cursor = None
    with dg.DagsterInstance.get() as instance:
        # Two ticks: the first pays this process's first listing (the object store's client
        # and its imports); the second is what every later tick of the daemon costs.
        for _ in range(2):
            started = time.perf_counter()
            with dg.build_sensor_context(
                instance=instance, resources=resources, cursor=cursor
            ) as context:
                result = sensor(context)
            ticks.append(time.perf_counter() - started)
            cursor = getattr(result, "cursor", None)
            requests += list(getattr(result, "run_requests", None) or [])
    out.write_text(
        json.dumps(
            {
                "success": True,
                "error": None,
                "wall_s": sum(ticks),
                "first_tick_s": ticks[0],
                "tick_s": ticks[1],
                "runs_requested": len(requests),
                "assets": {},
                "children_peak_kib": 0,
            }
        )
    )


def _multiprocess(config: Path, settings: Any) -> tuple[bool, str | None, dict[str, Any]]:
    import dagster as dg

    from clef_pipelines.jobs.ingestion import PARTITIONS
    from clef_pipelines.jobs.launch import ensure_dagster_home, run_config
    from clef_pipelines.jobs.location import configured_ingestion_job
    from clef_pipelines.jobs.results import plain_value

    os.environ["CLEF_PIPELINES_CONFIG"] = str(config)
    ensure_dagster_home(settings)
    # Spawned step processes (Dagster's default start method): each imports what it needs,
    # as a step in a container of its own does, and each is this process's child, so its
    # peak memory and CPU time are counted (a forkserver's children would not be).
    run = run_config()
    with dg.DagsterInstance.get() as instance:
        if SOURCE not in instance.get_dynamic_partitions(PARTITIONS):
            instance.add_dynamic_partitions(PARTITIONS, [SOURCE])
        with dg.execute_job(
            dg.reconstructable(configured_ingestion_job),
            instance=instance,
            tags={"dagster/partition": SOURCE},
            run_config=run,
        ) as result:
            assets: dict[str, Any] = {}
            for event in result.all_events:
                if event.event_type_value == "ASSET_MATERIALIZATION":
                    mat = event.event_specific_data.materialization  # type: ignore[union-attr]
                    assets[mat.asset_key.path[-1]] = {
                        k: plain_value(v) for k, v in mat.metadata.items()
                    }
            return result.success, None if result.success else "a step failed", assets


def _config(work: Path, mode: str, s3: Any) -> Path:
    raw: dict[str, Any] = {
        "collection": "docs",
        "embedder": {"kind": "hash", "dimension": 64},
        "steering": {"guard": {"mode": "off"}},
        "data_dir": str(work / mode / "state"),
        "sources": [{"name": SOURCE, "path": str(work / "corpus")}],
    }
    if mode != "local":
        raw["sources"] = [{"name": SOURCE, "path": f"s3://{s3.bucket_name}/corpus/"}]
        raw["data_dir"] = f"s3://{s3.bucket_name}/{mode}"
        raw["local_dir"] = str(work / mode / "local")
        raw["object_store"] = {**s3.settings(), "max_attempts": 3}
    if mode == "s3-multiprocess":
        raw["executor"] = "multiprocess"  # each step a process (the run's own setting)
    (work / mode).mkdir(parents=True, exist_ok=True)
    path = work / mode / "clef-pipelines.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _gets_by_area(gets: list[str], bucket: str, mode: str) -> dict[str, int]:
    areas: dict[str, int] = {}
    for path in gets:
        if "list-type=" in path:
            prefix = parse_qs(urlsplit(path).query).get("prefix", [""])[0].split("/")
            area = "listings of " + (
                f"{mode}/{prefix[1]}" if prefix[0] == mode and len(prefix) > 1 else prefix[0]
            )
        else:
            rest = path.split("?")[0].removeprefix(f"/{bucket}/")
            parts = rest.split("/")
            area = parts[0] if parts[0] != mode or len(parts) < 2 else f"{mode}/{parts[1]}"
        areas[area] = areas.get(area, 0) + 1
    return dict(sorted(areas.items()))


def _measured(config: Path, mode: str, label: str, s3: Any) -> dict[str, Any]:
    """One pass in a fresh process: a run (`first`, `unchanged`) or the sensor's tick."""
    out = config.parent / f"{label}.json"
    env = child_env()
    env["DAGSTER_HOME"] = str(config.parent / "dagster")
    if s3 is not None:
        env.update(s3.env())
        s3.traffic.reset()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.Popen(
        bench_cmd(
            "object_store",
            "--child",
            str(config),
            "--child-mode",
            "sensor" if label == "sensor tick" else mode,
            "--child-out",
            str(out),
        ),
        env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    result = json.loads(out.read_text()) if out.exists() else {}
    if status != 0 or not result.get("success"):
        raise SystemExit(f"{mode} {label}: the run failed: {result.get('error')} (status {status})")
    assets = result["assets"]
    docs = assets.get("source_documents", {})
    row: dict[str, Any] = {
        "mode": mode,
        "run": label,
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        # ru_maxrss (KiB) of wait4: the largest of the run's process and the step processes
        # it waited for; `step_peak_mb`: the largest step process alone (multiprocess mode).
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "step_peak_mb": round(result["children_peak_kib"] / 1024),
        "documents_new": docs.get("documents_new"),
        "documents_unchanged": docs.get("documents_unchanged"),
        "chunks": assets.get("chunks", {}).get("chunks", 0),
        "load": f"{load_before:.1f}-{os.getloadavg()[0]:.1f}",
    }
    if "tick_s" in result:
        row["first_tick_s"] = round(result["first_tick_s"], 2)
        row["tick_s"] = round(result["tick_s"], 2)
        row["runs_requested"] = result["runs_requested"]
    if s3 is not None:
        t = s3.traffic
        corpus = f"/{s3.bucket_name}/corpus/"
        row.update(
            {
                "requests": dict(t.requests),
                "bytes_read": t.bytes_out,
                "bytes_written": t.bytes_in,
                "objects_downloaded": sum(1 for p in t.object_gets() if p.startswith(corpus)),
                # Where the GETs went: the folder under the mode's data_dir (intermediates,
                # lancedb, ...), the corpus, or a listing.
                "gets_by_area": _gets_by_area(t.gets, s3.bucket_name, mode),
            }
        )
    return row


def _upload(s3: Any, docs: list[tuple[str, bytes]]) -> float:
    client = s3.client()
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda d: client.put_object(Bucket=s3.bucket_name, Key=f"corpus/{d[0]}", Body=d[1]),
                docs,
            )
        )
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.child is not None:
        if args.child_mode == "sensor":
            _sensor_child(args.child, args.child_out)
        else:
            _child(args.child, args.child_mode, args.child_out)
        return {}
    from clef_pipelines.testing.s3_server import running_s3

    modes = [m for m in args.modes.split(",") if m]
    docs = _documents(args.docs)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-object-store-") as tmp, running_s3() as s3:
        work = args.keep or Path(tmp)
        for rel, body in docs:
            path = work / "corpus" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        s3.bucket_name = s3.bucket("bench-object-store")  # type: ignore[attr-defined]
        upload_s = _upload(s3, docs) if any(m != "local" for m in modes) else 0.0
        for mode in modes:
            config = _config(work, mode, s3)
            for label in ("first", "unchanged", "sensor tick"):
                rows.append(_measured(config, mode, label, None if mode == "local" else s3))
    print(f"\nobject_store: {args.docs:,} documents, hash embedder, {os.cpu_count()} CPUs")
    print(f"(corpus upload to moto, not measured below: {upload_s:.0f} s)\n")
    print(
        "| mode | run | wall s | CPU s | peak RSS MB | step peak MB | new | unchanged "
        "| requests | read MB | written MB | objects downloaded | load |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|")
    for r in rows:
        if "tick_s" in r:
            continue
        reqs = ", ".join(f"{k} {v}" for k, v in sorted((r.get("requests") or {}).items()))
        print(
            f"| {r['mode']} | {r['run']} | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_mb']} "
            f"| {r['step_peak_mb']} | {r['documents_new']} "
            f"| {r['documents_unchanged']} | {reqs or '-'} "
            f"| {r.get('bytes_read', 0) / 1e6:.1f} | {r.get('bytes_written', 0) / 1e6:.1f} "
            f"| {r.get('objects_downloaded', '-')} | {r['load']} |"
        )
    for r in rows:
        if r.get("gets_by_area"):
            print(f"GETs of {r['mode']} {r['run']}: {r['gets_by_area']}")
    ticks = [r for r in rows if "tick_s" in r]
    if ticks:
        print("\nthe sensor's tick (an unchanged source: lists, compares, requests no run):\n")
        print(
            "| mode | tick s (a later tick) | first tick s | process wall s | runs requested "
            "| requests (both ticks) | objects downloaded |"
        )
        print("|---|---:|---:|---:|---:|---|---:|")
        for r in ticks:
            reqs = ", ".join(f"{k} {v}" for k, v in sorted((r.get("requests") or {}).items()))
            print(
                f"| {r['mode']} | {r['tick_s']} | {r['first_tick_s']} | {r['wall_s']} "
                f"| {r['runs_requested']} "
                f"| {reqs or '-'} | {r.get('objects_downloaded', '-')} |"
            )
    return {"documents": args.docs, "upload_s": round(upload_s, 1), "rows": rows}
