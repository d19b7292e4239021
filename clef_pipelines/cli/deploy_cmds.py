"""`deploy render`, `deploy instance`, `deploy check`: what a production deployment runs
(docs/deploy.md). The files come from `clef_pipelines.deploy`, rendered from `DeploySettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import ConfigOption, console, fail, lit, load_cli_settings
from clef_pipelines.config_deploy import DeploySettings

deploy_app = typer.Typer(
    help="A production deployment: the Dockerfile, the instance's dagster.yaml, Compose and "
    "Helm values (docs/deploy.md).",
    no_args_is_help=True,
)
app.add_typer(deploy_app, name="deploy")

ImageOption = Annotated[
    str | None, typer.Option(help="The image, repository:tag (default: clef-pipelines:VERSION).")
]
RunsOption = Annotated[
    int | None, typer.Option(help="Runs in progress at once, all sources together.")
]


def _deploy_settings(
    image: str | None, max_concurrent_runs: int | None, data_claim: str | None = None
) -> DeploySettings:
    given: dict[str, object] = {"image": image, "max_concurrent_runs": max_concurrent_runs}
    given = {k: v for k, v in given.items() if v is not None}
    if data_claim is not None:
        given["data_claim"] = None if data_claim == "none" else data_claim
    try:
        return DeploySettings(**given)
    except ValidationError as exc:
        fail("; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}"
                       for e in exc.errors()))  # fmt: skip


@deploy_app.command()
def render(
    out: Annotated[Path, typer.Option(help="The repository root to write into.")] = Path("."),
    image: ImageOption = None,
    max_concurrent_runs: RunsOption = None,
    data_claim: Annotated[
        str | None,
        typer.Option(
            help="The ReadWriteMany claim mounted at /data (default clef-pipelines-data); "
            "`none` where data_dir is an object-store URL."
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option(help="Write nothing; exit 1 if a file differs from the rendering.")
    ] = False,
) -> None:
    """Write the Dockerfile, .dockerignore and deploy/ (instance, workspace, Compose, Helm
    values), all from the same settings."""
    from clef_pipelines.deploy import stale_files, write_rendered

    settings = _deploy_settings(image, max_concurrent_runs, data_claim)
    if check:
        stale = stale_files(settings, out)
        for rel in stale:
            console.print(f"[red]differs from the rendering:[/] {lit(rel)}")
        if stale:
            raise typer.Exit(1)
        console.print("every deployment file is the rendering")
        return
    for path in write_rendered(settings, out):
        console.print(f"wrote {lit(path)}")


def write_instance(path: Path, settings: DeploySettings, *, force: bool) -> None:
    from clef_pipelines.deploy import instance_yaml

    if path.exists() and not force:
        fail(f"{path} exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(instance_yaml(settings), encoding="utf-8")
    console.print(f"wrote {lit(path)} (the production Dagster instance; see docs/deploy.md)")


@deploy_app.command()
def instance(
    path: Annotated[Path, typer.Argument(help="Where to write it (in $DAGSTER_HOME).")] = Path(
        "dagster.yaml"
    ),
    max_concurrent_runs: RunsOption = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a production dagster.yaml: PostgreSQL storage (DAGSTER_PG_* from the
    environment), the run queue with one run per source, each run its own process."""
    write_instance(path, _deploy_settings(None, max_concurrent_runs), force=force)


@deploy_app.command(name="check")
def check_image(config: ConfigOption = None) -> None:
    """Load the code location and embed a text with the configured embedder, offline: what
    the image's build runs to show that no run downloads a model."""
    from clef_pipelines.embedding import make_embedder
    from clef_pipelines.jobs.location import build_definitions

    settings = load_cli_settings(config)
    defs = build_definitions(settings)
    jobs = sorted(job.name for job in defs.resolve_all_job_defs())
    embedder = make_embedder(settings.embedder)
    vectors = embedder.embed(["clef-pipelines deployment check"])
    if vectors.shape != (1, embedder.dimension):
        fail(f"embedder {embedder.name} gave an array of shape {vectors.shape}")
    guard = settings.steering.guard
    languages = ""
    if guard.mode != "off" and guard.languages:
        from clef_pipelines.guard.langid_model import cache_folder
        from clef_pipelines.guard.language import check_codes

        # Loads the language identifier: unpacked into the user's cache here, at the image's
        # build, so that every run in the image memory-maps it instead of unpacking it.
        check_codes(guard.languages)
        languages = f"; the language check's model is in {cache_folder()}"
    console.print(
        f"code location loads ({', '.join(jobs)}); embedder {lit(embedder.name)} embeds "
        f"({embedder.dimension} dimensions) from local weights{languages}"
    )
