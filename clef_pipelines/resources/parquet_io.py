"""Parquet intermediates, read and written with polars: one file per asset and partition, or,
for the batched ingestion steps, one folder per asset and partition (see `ingest.batches`)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from clef_pipelines.assets.metadata import frame_metadata, table_metadata
from clef_pipelines.ingest.batches import FrameBatches, FrameFile
from clef_pipelines.ingest.remote_frames import RemoteFrames
from clef_pipelines.objectstore import is_cloud_url, join
from clef_pipelines.resources.settings import PipelineSettings

#: This process's remote input downloads: the step that made them, then their folders.
_DOWNLOADS: list[Any] = []


class PolarsParquetIOManager(dg.ConfigurableIOManager):
    """Stores each asset partition as `<data_dir>/intermediates/<asset>/<partition>.parquet`,
    or a batched step's output as the folder `<data_dir>/intermediates/<asset>/<partition>/`.

    Written to a temporary name and renamed, so a run killed mid-write never leaves a torn file
    for the next run to read (a batched step writes its folder aside and it is swapped in; a
    `FrameFile` step writes its file aside and it is moved in).

    An input whose `AssetIn` metadata names `columns` is read with those columns only: a step
    that needs three columns of an inventory of millions of documents does not hold all eight.

    With `data_dir` an object-store URL the same layout lives there (`ingest.remote_frames`):
    an output is written on local disk and uploaded, an input downloaded and read locally, so
    the steps of a run may run on machines that share only the object store.
    """

    settings: PipelineSettings
    base_dir: str | None = None

    def _location(self) -> str:
        return self.base_dir or self.settings.settings.intermediates_location

    def _remote(self) -> RemoteFrames | None:
        location = self._location()
        if not is_cloud_url(location):
            return None
        return RemoteFrames(location, self.settings.settings.object_store)

    def _root(self) -> Path:
        return Path(self._location())

    def _url(self, asset_key: dg.AssetKey, partition: str | None, suffix: str = "") -> str:
        return join(self._location(), *asset_key.path, f"{partition or '__all__'}{suffix}")

    def _scratch(self, partition: str | None) -> Path:
        """Local room for a remote input's download, under the staging folder of the source
        (emptied when the source's next run starts)."""
        settings = self.settings.settings
        root = settings.data_path / "intermediates" / ".staging" / (partition or "__all__")
        return root / "inputs" / uuid.uuid4().hex[:12]

    def _input_scratch(self, context: dg.InputContext, partition: str | None) -> Path:
        """`_scratch` for an input of the step now loading; the downloads of the steps this
        process ran before are removed (steps run one at a time in a process, so they are
        done), so a long-lived worker does not keep every run's inputs."""
        try:
            step = context.step_context.step.key
        except Exception:  # a context built outside a run (tests, direct loads)
            step = "?"
        if _DOWNLOADS and _DOWNLOADS[0] != step:
            for folder in _DOWNLOADS[1:]:
                shutil.rmtree(folder, ignore_errors=True)
            _DOWNLOADS.clear()
        if not _DOWNLOADS:
            _DOWNLOADS.append(step)
        path = self._scratch(partition)
        _DOWNLOADS.append(path)
        return path

    def _path(self, asset_key: dg.AssetKey, partition: str | None) -> Path:
        return self._root().joinpath(*asset_key.path) / f"{partition or '__all__'}.parquet"

    def _folder(self, asset_key: dg.AssetKey, partition: str | None) -> Path:
        return self._root().joinpath(*asset_key.path) / (partition or "__all__")

    def _put_batches(self, context: dg.OutputContext, obj: FrameBatches) -> None:
        partition = context.partition_key if context.has_partition_key else None
        folder = self._folder(context.asset_key, partition)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staged = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
        if staged.exists():
            shutil.rmtree(staged)
        if not obj.files() and folder.is_dir():
            # An empty change (nothing changed): keep the columns the data has, as one file of
            # no rows, so the catalog's schema still says what a downstream step reads.
            columns = FrameBatches(folder).schema()
            if columns:
                obj.directory.mkdir(parents=True, exist_ok=True)
                pl.DataFrame(schema=columns).write_parquet(obj.directory / "columns.parquet")
        shutil.move(str(obj.directory), staged)
        old = folder.with_name(f"{folder.name}.old-{os.getpid()}")
        if folder.exists():
            os.replace(folder, old)
        os.replace(staged, folder)
        shutil.rmtree(old, ignore_errors=True)
        self._path(context.asset_key, partition).unlink(missing_ok=True)  # an older layout
        batches = FrameBatches(folder)
        context.add_output_metadata(
            {
                "path": dg.MetadataValue.path(str(folder)),
                **table_metadata(batches.rows(), batches.schema()),
                "batch_files": len(batches.files()),
            }
        )

    def _put_file(self, context: dg.OutputContext, obj: FrameFile) -> None:
        partition = context.partition_key if context.has_partition_key else None
        path = self._path(context.asset_key, partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".parquet.tmp-{os.getpid()}")
        shutil.move(str(obj.path), tmp)  # (the staging folder may be on another filesystem)
        os.replace(tmp, path)
        placed = FrameFile(path)
        context.add_output_metadata(
            {
                "path": dg.MetadataValue.path(str(path)),
                **table_metadata(placed.rows(), placed.schema()),
            }
        )

    def _put_remote(
        self,
        remote: RemoteFrames,
        context: dg.OutputContext,
        obj: pl.DataFrame | FrameBatches | FrameFile,
    ) -> None:
        partition = context.partition_key if context.has_partition_key else None
        if isinstance(obj, FrameBatches):
            url = self._url(context.asset_key, partition)
            if not obj.files():
                # An empty change keeps the columns the data has (as `_put_batches` does).
                previous = remote.folder_schema_file(url)
                if previous is not None:
                    obj.directory.mkdir(parents=True, exist_ok=True)
                    columns = pl.DataFrame(
                        schema=pl.from_arrow(remote.read_schema(previous).empty_table()).schema
                    )
                    columns.write_parquet(obj.directory / "columns.parquet")
            remote.put_folder(obj.directory, url)
            meta = {
                **table_metadata(obj.rows(), obj.schema()),
                "batch_files": len(obj.files()),
            }
            shutil.rmtree(obj.directory, ignore_errors=True)
        else:
            url = self._url(context.asset_key, partition, ".parquet")
            if isinstance(obj, FrameFile):
                path = obj.path
                meta = table_metadata(obj.rows(), obj.schema())
            else:
                path = self._scratch(partition) / "output.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                obj.write_parquet(path)
                meta = frame_metadata(obj)
            remote.put_file(path, url)
            path.unlink(missing_ok=True)
        context.add_output_metadata({"path": dg.MetadataValue.url(url), **meta})

    def _load_remote(
        self, remote: RemoteFrames, context: dg.InputContext
    ) -> pl.DataFrame | FrameBatches:
        partition = context.asset_partition_key if context.has_asset_partitions else None
        local = self._input_scratch(context, partition)
        if remote.get_folder(self._url(context.asset_key, partition), local):
            return FrameBatches(local)
        url = self._url(context.asset_key, partition, ".parquet")
        path = local / "input.parquet"
        if not remote.get_file(url, path):
            raise FileNotFoundError(
                f"no intermediate for {context.asset_key.to_user_string()} "
                f"partition {partition!r} at {url}: materialise it first"
            )
        columns = (context.definition_metadata or {}).get("columns")
        frame = pl.read_parquet(path, columns=list(columns) if columns else None)
        shutil.rmtree(local, ignore_errors=True)
        return frame

    def handle_output(
        self, context: dg.OutputContext, obj: pl.DataFrame | FrameBatches | FrameFile | None
    ) -> None:
        if obj is None:
            return
        remote = self._remote()
        if remote is not None:
            if not isinstance(obj, pl.DataFrame | FrameBatches | FrameFile):
                raise TypeError(
                    f"{context.asset_key.to_user_string()} must return a polars DataFrame"
                )
            self._put_remote(remote, context, obj)
            return
        if isinstance(obj, FrameBatches):
            self._put_batches(context, obj)
            return
        if isinstance(obj, FrameFile):
            self._put_file(context, obj)
            return
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()} must return a polars DataFrame")
        partition = context.partition_key if context.has_partition_key else None
        path = self._path(context.asset_key, partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".parquet.tmp-{os.getpid()}")
        obj.write_parquet(tmp)
        os.replace(tmp, path)
        # Row count and column schema under Dagster's standard keys: the UI tables and plots them.
        context.add_output_metadata(
            {"path": dg.MetadataValue.path(str(path)), **frame_metadata(obj)}
        )

    def load_input(self, context: dg.InputContext) -> pl.DataFrame | FrameBatches:
        remote = self._remote()
        if remote is not None:
            return self._load_remote(remote, context)
        partition = context.asset_partition_key if context.has_asset_partitions else None
        folder = self._folder(context.asset_key, partition)
        if folder.is_dir():
            return FrameBatches(folder)
        path = self._path(context.asset_key, partition)
        if not path.exists():
            raise FileNotFoundError(
                f"no intermediate for {context.asset_key.to_user_string()} "
                f"partition {partition!r} at {path}: materialise it first"
            )
        columns = (context.definition_metadata or {}).get("columns")
        return pl.read_parquet(path, columns=list(columns) if columns else None)
