"""One config, found the same way by every command: `ui` hands the config it resolved (here
./clef-pipelines.yaml, no --config) to the process it starts, and a sensor that loaded a
config without sources removes no partition and says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from clef_pipelines.cli.common import load_cli_settings
from clef_pipelines.cli.ingest_cmds import ui_launch
from clef_pipelines.cli.main import app
from clef_pipelines.config import CONFIG_ENV
from clef_pipelines.jobs.ingestion import source_change_sensor
from clef_pipelines.resources.settings import PipelineSettings
from tests.ingest.conftest import Workspace

# What the code location does when it loads (definitions.py): resolve and load the config.
_CHILD = (
    "from clef_pipelines.config import find_config_file, load_settings\n"
    "s = load_settings()\n"
    "print(find_config_file(), s.data_dir, [x.name for x in s.sources])\n"
)


def test_ui_from_the_project_folder_without_config_loads_that_config(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace.root)
    cmd, cwd, env = ui_launch(load_cli_settings(None), None, 3999)
    assert env[CONFIG_ENV] == str(workspace.config_path.resolve())
    assert Path(env["DAGSTER_HOME"]) == workspace.root / "dagster"
    # The process the UI starts, in the folder and environment `ui` gives it (the package
    # folder for `dg dev`), resolves the very file the user's commands resolve.
    out = subprocess.run(
        [sys.executable, "-c", _CHILD],
        cwd=cwd or workspace.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out[0] == str(workspace.config_path.resolve())
    assert out[-1] == "['sample']"


def test_ui_without_any_config_refuses_and_names_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    result = CliRunner().invoke(app, ["ui", "--port", "3999"])
    assert result.exit_code == 2
    assert "no config found" in result.output and "clef-pipelines init" in result.output
    assert not (tmp_path / ".clef").exists()


def test_sensor_with_a_config_without_sources_removes_nothing(workspace: Workspace) -> None:
    workspace.write_config(sources=[])
    resources = {"pipeline_settings": PipelineSettings(validated=workspace.settings())}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("sources", ["sample", "extra"])
        with dg.build_sensor_context(instance=instance, cursor="{}", resources=resources) as ctx:
            result = source_change_sensor(ctx)
        assert isinstance(result, dg.SensorResult)
        assert not result.dynamic_partitions_requests and not result.run_requests
        assert result.skip_reason is not None
        reason = result.skip_reason.skip_message or ""
        assert "has no sources" in reason and "extra, sample" in reason
        assert sorted(instance.get_dynamic_partitions("sources")) == ["extra", "sample"]


def test_sensor_of_another_projects_config_removes_nothing(
    workspace: Workspace, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The project's commands record its data folder in the Dagster home they use; a code
    location that loaded another project's config (here: other sources, another data folder)
    removes none of this project's partitions and says why."""
    from clef_pipelines.config import settings_from_dict
    from clef_pipelines.jobs.launch import ensure_dagster_home

    ensure_dagster_home(workspace.settings())
    other_root = tmp_path_factory.mktemp("other")
    (other_root / "docs").mkdir()
    other = settings_from_dict(
        {"data_dir": "state", "sources": [{"name": "other", "path": "docs"}]}, base_dir=other_root
    )
    resources = {"pipeline_settings": PipelineSettings(validated=other)}
    instance = dg.DagsterInstance.get()
    try:
        instance.add_dynamic_partitions("sources", ["sample"])
        with dg.build_sensor_context(instance=instance, cursor=None, resources=resources) as ctx:
            result = source_change_sensor(ctx)
        assert isinstance(result, dg.SensorResult)
        assert not result.dynamic_partitions_requests and not result.run_requests
        reason = result.skip_reason.skip_message if result.skip_reason else ""
        assert "belongs to the project whose data is in" in (reason or "")
        assert instance.get_dynamic_partitions("sources") == ["sample"]
        # The project's own config still reconciles: its sensor adds and runs as before.
        own = {"pipeline_settings": PipelineSettings(validated=workspace.settings())}
        with dg.build_sensor_context(instance=instance, cursor=None, resources=own) as ctx:
            mine = source_change_sensor(ctx)
        assert [r.partition_key for r in mine.run_requests] == ["sample"]
    finally:
        instance.dispose()
