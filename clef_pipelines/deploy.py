"""A production deployment, rendered from one `DeploySettings`: the instance's dagster.yaml
(PostgreSQL storage, the run queue with one run per source), the processes' commands, the
Dockerfile of the one image they all run, a Compose file for one machine, and the values for
Dagster's official Helm chart. `clef-pipelines deploy render` writes them; the committed
copies (Dockerfile, deploy/) are checked against this rendering by tests/packaging, and the
stress test starts the daemon, webserver and code server with these very commands and this
instance config. No Dagster import: this is text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clef_pipelines.config_deploy import DeploySettings

#: Runs of the partitioned ingestion job carry this tag, its value the source's name.
PARTITION_TAG = "dagster/partition"

#: At most one run per source at a time: the run queue starts one run per value of the tag.
ONE_RUN_PER_SOURCE: dict[str, Any] = {
    "key": PARTITION_TAG,
    "value": {"applyLimitPerUniqueValue": True},
    "limit": 1,
}

#: The module the code server loads (pyproject's [tool.dagster] module_name).
CODE_MODULE = "clef_pipelines.definitions"
#: The code location's name (`definitions.CODE_LOCATION`; tests/packaging checks they agree).
LOCATION_NAME = "clef_pipelines"

#: The instance database's connection, each part from this environment variable (the names
#: Dagster's own docs use; the Helm chart sets DAGSTER_PG_PASSWORD from its secret the same way).
PG_ENV = {
    "hostname": "DAGSTER_PG_HOST",
    "port": "DAGSTER_PG_PORT",
    "username": "DAGSTER_PG_USERNAME",
    "password": "DAGSTER_PG_PASSWORD",
    "db_name": "DAGSTER_PG_DB",
}

#: The driver dagster-postgres is written for. SQLAlchemy 2.1 takes psycopg 3 for a bare
#: `postgresql://`, whose server-side parameters break dagster-postgres's `NOTIFY run_events, %s`
#: (every event write fails); psycopg2 comes with dagster-postgres.
PG_SCHEME = "postgresql+psycopg2"

#: Where the committed renderings live, relative to the repository root.
RENDERED_PATHS = (
    "Dockerfile",
    ".dockerignore",
    "deploy/dagster.yaml",
    "deploy/workspace.yaml",
    "deploy/compose.yaml",
    "deploy/helm/values.yaml",
)

_HEADER = (
    "Rendered by `clef-pipelines deploy render` (clef_pipelines/deploy.py): change the\n"
    "settings or the code there and render again; tests/packaging/test_deploy.py checks that\n"
    "this file is the rendering."
)
_APP_DIR = "/opt/dagster/app"
_DATA_DIR = "/data"
_CONFIG_FILE = "clef-pipelines.yaml"
_CODE_HOST = "code"  # the code server's host name in Compose


def _comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())


def _yaml(data: dict[str, Any], header: str) -> str:
    return _comment(header) + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


# --- the processes -----------------------------------------------------------------------------


def code_server_command(host: str = "0.0.0.0", port: int = 3030) -> list[str]:
    """The image's default command: the gRPC code server that loads the code location and
    starts each run (the default run launcher) or answers the K8sRunLauncher's questions."""
    return ["dagster", "api", "grpc", "--module-name", CODE_MODULE]  + [
        "--host", host, "--port", str(port)
    ]  # fmt: skip


def webserver_command(workspace: str, host: str = "0.0.0.0", port: int = 3000) -> list[str]:
    return ["dagster-webserver", "-w", workspace, "-h", host, "-p", str(port)]


def daemon_command(workspace: str) -> list[str]:
    """The daemon: the run queue, the sensor, the schedule, backfills, run monitoring."""
    return ["dagster-daemon", "run", "-w", workspace]


def workspace_config(host: str = _CODE_HOST, port: int = 3030) -> dict[str, Any]:
    """The webserver's and the daemon's workspace: the running code server, not a module they
    would load (and start runs from) themselves."""
    return {
        "load_from": [{"grpc_server": {"host": host, "port": port, "location_name": LOCATION_NAME}}]
    }


# --- the instance --------------------------------------------------------------------------------


def instance_config(deploy: DeploySettings) -> dict[str, Any]:
    """The production dagster.yaml: run, event-log and schedule storage in PostgreSQL (the
    connection from the environment), the queued run coordinator with one run per source, each
    run in its own process (the default run launcher), telemetry off.

    Its `telemetry`, `nux` and `concurrency` keys are those `jobs.launch.ensure_dagster_home`
    wants, so a CLI command run against this home leaves the file as it is."""
    return {
        "storage": {
            "postgres": {
                "postgres_db": {
                    **{key: {"env": env} for key, env in PG_ENV.items()},
                    "scheme": PG_SCHEME,
                }
            }
        },
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
        },
        "run_launcher": {"module": "dagster._core.launcher", "class": "DefaultRunLauncher"},
        "concurrency": {
            "runs": {
                "max_concurrent_runs": deploy.max_concurrent_runs,
                "tag_concurrency_limits": [ONE_RUN_PER_SOURCE],
            }
        },
        # A run whose worker died (a killed container, a lost node) is marked failed, not left
        # in progress; one in progress blocks the next run of its source.
        # No resuming: the default run launcher cannot resume a run in a new process.
        "run_monitoring": {
            "enabled": True,
            "start_timeout_seconds": 300,
            "max_resume_run_attempts": 0,
        },
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
    }


def instance_yaml(deploy: DeploySettings) -> str:
    env = ", ".join(PG_ENV.values())
    header = (
        f"{_HEADER}\n\n"
        "The production Dagster instance of clef-pipelines: put it in $DAGSTER_HOME of the\n"
        "code server, the webserver and the daemon. The database comes from the environment,\n"
        f"never from this file:\n  {env}.\n"
        "Runs wait in the queue (the daemon starts them): at most max_concurrent_runs at once,\n"
        f"and one per source (tag {PARTITION_TAG}). Each run is a process of its own."
    )
    return _yaml(instance_config(deploy), header)


# --- the image -----------------------------------------------------------------------------------


def dockerfile(deploy: DeploySettings) -> str:
    extras = ",".join(deploy.extras)
    home, cfg = deploy.dagster_home, deploy.config_dir
    cmd = code_server_command(port=deploy.code_server_port)
    check = ["env", "-u", "CLEF_PIPELINES_CONFIG", "clef-pipelines", "deploy", "check"]
    return "\n".join(
        [
            "# syntax=docker/dockerfile:1",
            _comment(_HEADER).rstrip("\n"),
            "#",
            "# One image for the code server (the default command), the webserver",
            "# (`dagster-webserver`), the daemon (`dagster-daemon run`) and every run: see",
            "# deploy/compose.yaml and deploy/helm/values.yaml, docs/deploy.md.",
            f"FROM python:{deploy.python}-slim AS build",
            "WORKDIR /src",
            "RUN python -m venv /opt/venv",
            "COPY pyproject.toml README.md ./",
            "COPY clef_pipelines ./clef_pipelines",
            "# torch from its CPU index: the CUDA wheels add gigabytes a CPU worker never uses.",
            "RUN /opt/venv/bin/pip install --no-cache-dir \\",
            f'    --extra-index-url {deploy.torch_index} ".[{extras}]"',
            "",
            f"FROM python:{deploy.python}-slim",
            "ENV PATH=/opt/venv/bin:$PATH \\",
            f"    DAGSTER_HOME={home} \\",
            f"    CLEF_PIPELINES_CONFIG={cfg}/{_CONFIG_FILE} \\",
            "    PYTHONUNBUFFERED=1 \\",
            "    HF_HUB_OFFLINE=1 \\",
            "    DAGSTER_DG_UPDATE_CHECK_ENABLED=0",
            "# A user of its own: nothing in the image runs as root.",
            "RUN groupadd --gid 10001 clef \\",
            "    && useradd --uid 10001 --gid 10001 --create-home clef \\",
            f"    && mkdir -p {home} {cfg} {_DATA_DIR} {_APP_DIR} \\",
            f"    && chown clef:clef {home} {_DATA_DIR}",
            "COPY --from=build /opt/venv /opt/venv",
            f"COPY deploy/dagster.yaml {home}/dagster.yaml",
            f"COPY deploy/workspace.yaml {_APP_DIR}/workspace.yaml",
            "USER 10001:10001",
            f"WORKDIR {_APP_DIR}",
            "# Offline (no network): the code location loads with every default, and the default",
            "# embedder embeds a text from the weights inside the image. A run that needed to",
            "# download a model would fail the build here.",
            f"RUN --network=none {_exec_form(check)}",
            f"EXPOSE {deploy.code_server_port} {deploy.webserver_port}",
            f"CMD {_exec_form(cmd)}",
            "",
        ]
    )


def _exec_form(argv: list[str]) -> str:
    return "[" + ", ".join(f'"{a}"' for a in argv) + "]"


def dockerignore() -> str:
    return (
        _comment(_HEADER)
        # Only what the Dockerfile copies goes to the builder: never deploy/.env or a config.
        + "# Only what the Dockerfile copies is sent to the builder.\n"
        + "\n".join(
            [
                "*",
                "!pyproject.toml",
                "!README.md",
                "!clef_pipelines/",
                "!deploy/dagster.yaml",
                "!deploy/workspace.yaml",
                "**/__pycache__",
                "**/*.pyc",
            ]
        )
        + "\n"
    )


# --- one machine: Compose ------------------------------------------------------------------------


def compose(deploy: DeploySettings) -> dict[str, Any]:
    """PostgreSQL, the code server (which starts the runs), the webserver and the daemon."""
    workspace = f"{_APP_DIR}/workspace.yaml"

    def pg_env() -> dict[str, str]:
        env = {PG_ENV["hostname"]: "postgresql", PG_ENV["port"]: "5432"}
        for key in ("username", "password", "db_name"):
            env[PG_ENV[key]] = f"${{{PG_ENV[key]}:?set it in .env}}"
        return env

    def service(command: list[str], **extra: Any) -> dict[str, Any]:
        return {
            "image": deploy.image,
            "command": command,
            "environment": pg_env(),
            "depends_on": {"postgresql": {"condition": "service_healthy"}},
            "restart": "unless-stopped",
            **extra,
        }

    pg = PG_ENV
    return {
        "services": {
            "postgresql": {
                "image": "postgres:16",
                "environment": {
                    "POSTGRES_USER": f"${{{pg['username']}:?set it in .env}}",
                    "POSTGRES_PASSWORD": f"${{{pg['password']}:?set it in .env}}",
                    "POSTGRES_DB": f"${{{pg['db_name']}:?set it in .env}}",
                },
                "volumes": ["postgresql:/var/lib/postgresql/data"],
                "healthcheck": {
                    "test": ["CMD-SHELL", 'pg_isready -U "$${POSTGRES_USER}"'],
                    "interval": "5s",
                    "retries": 12,
                },
                "restart": "unless-stopped",
            },
            _CODE_HOST: service(
                code_server_command(port=deploy.code_server_port),
                # The runs start here (the default run launcher): they read the config, write
                # data_dir, and get the object store's credentials and the Clef key from .env.
                env_file=[".env"],
                volumes=[
                    f"./{_CONFIG_FILE}:{deploy.config_dir}/{_CONFIG_FILE}:ro",
                    f"data:{_DATA_DIR}",
                ],
            ),
            "webserver": service(
                webserver_command(workspace, port=deploy.webserver_port),
                ports=[f"127.0.0.1:{deploy.webserver_port}:{deploy.webserver_port}"],
            ),
            "daemon": service(daemon_command(workspace)),
        },
        "volumes": {"postgresql": {}, "data": {}},
    }


# --- Kubernetes: the official Helm chart ---------------------------------------------------------


def helm_values(deploy: DeploySettings) -> dict[str, Any]:
    """Values for Dagster's Helm chart (`helm install dagster dagster/dagster -f ...`): this
    image for the webserver, the daemon and the user-code deployment, each run a Kubernetes
    Job (K8sRunLauncher) that inherits the deployment's config, secrets and volumes, the
    instance in an existing PostgreSQL whose password is in a secret."""

    def image() -> dict[str, str]:
        return {"repository": deploy.repository, "tag": deploy.tag, "pullPolicy": "IfNotPresent"}

    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": deploy.config_map}}]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": deploy.config_dir, "readOnly": True}
    ]
    if deploy.data_claim:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": deploy.data_claim}})
        mounts.append({"name": "data", "mountPath": _DATA_DIR})
    return {
        "global": {
            "postgresqlSecretName": deploy.postgres_secret,
            "dagsterHome": deploy.dagster_home,
        },
        "telemetry": {"enabled": False},
        "dagsterWebserver": {"image": image()},
        "dagsterDaemon": {
            "image": image(),
            "runCoordinator": {
                "enabled": True,
                "type": "QueuedRunCoordinator",
                "config": {
                    "queuedRunCoordinator": {
                        "maxConcurrentRuns": deploy.max_concurrent_runs,
                        "tagConcurrencyLimits": [ONE_RUN_PER_SOURCE],
                    }
                },
            },
        },
        "runLauncher": {
            "type": "K8sRunLauncher",
            "config": {
                "k8sRunLauncher": {
                    "imagePullPolicy": "IfNotPresent",
                    "loadInclusterConfig": True,
                    "envConfigMaps": [],
                    "envSecrets": [],
                    "envVars": [],
                    "volumeMounts": [],
                    "volumes": [],
                }
            },
        },
        "dagster-user-deployments": {
            "enabled": True,
            "enableSubchart": True,
            "deployments": [
                {
                    "name": "clef-pipelines",
                    "image": image(),
                    "dagsterApiGrpcArgs": ["--module-name", CODE_MODULE],
                    "port": deploy.code_server_port,
                    # Each run's Job gets this deployment's env, secrets and volumes.
                    "includeConfigInLaunchedRuns": {"enabled": True},
                    "env": [
                        {
                            "name": "CLEF_PIPELINES_CONFIG",
                            "value": f"{deploy.config_dir}/{_CONFIG_FILE}",
                        }
                    ],
                    "envSecrets": [{"name": deploy.env_secret}],
                    "volumes": volumes,
                    "volumeMounts": mounts,
                    "podSecurityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "fsGroup": 10001,
                    },
                    "securityContext": {"allowPrivilegeEscalation": False},
                }
            ],
        },
        # The instance's database: an existing PostgreSQL (the chart's own is for trying out);
        # the password is the secret's `postgresql-password`, never a value here.
        "generatePostgresqlPasswordSecret": False,
        "postgresql": {
            "enabled": False,
            "postgresqlHost": deploy.postgres_host,
            "postgresqlUsername": deploy.postgres_user,
            "postgresqlDatabase": deploy.postgres_db,
            "postgresqlScheme": PG_SCHEME,
            "service": {"port": 5432},
        },
    }


# --- all of it -----------------------------------------------------------------------------------


def rendered_files(deploy: DeploySettings) -> dict[str, str]:
    """Each committed file's path (relative to the repository root) and its text."""
    files = {
        "Dockerfile": dockerfile(deploy),
        ".dockerignore": dockerignore(),
        "deploy/dagster.yaml": instance_yaml(deploy),
        "deploy/workspace.yaml": _yaml(
            workspace_config(port=deploy.code_server_port),
            f"{_HEADER}\n\nThe webserver's and the daemon's workspace: the code server named `code`.",
        ),
        "deploy/compose.yaml": _yaml(
            compose(deploy),
            f"{_HEADER}\n\nOne machine: `docker compose -f deploy/compose.yaml up -d` next to a\n"
            f"{_CONFIG_FILE} and a .env holding the DAGSTER_PG_* variables, the object store's\n"
            "credentials and the Clef key (docs/deploy.md).",
        ),
        "deploy/helm/values.yaml": _yaml(
            helm_values(deploy),
            f"{_HEADER}\n\nValues for Dagster's Helm chart: helm install dagster dagster/dagster\n"
            "-f deploy/helm/values.yaml (docs/deploy.md lists the secrets and the ConfigMap).",
        ),
    }
    assert set(files) == set(RENDERED_PATHS)
    return files


def write_rendered(deploy: DeploySettings, root: Path) -> list[Path]:
    """Write every rendered file under `root`; returns the paths written."""
    written = []
    for rel, text in rendered_files(deploy).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def stale_files(deploy: DeploySettings, root: Path) -> list[str]:
    """The rendered files under `root` that are missing or differ from the rendering."""
    out = []
    for rel, text in rendered_files(deploy).items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(rel)
    return out
