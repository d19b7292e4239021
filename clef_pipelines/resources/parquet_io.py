"""Parquet intermediates, one file per asset and partition, read and written with polars."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import polars as pl

from clef_pipelines.assets.metadata import frame_metadata
from clef_pipelines.resources.settings import PipelineSettings


class PolarsParquetIOManager(dg.ConfigurableIOManager):
    """Stores each asset partition as `<data_dir>/intermediates/<asset>/<partition>.parquet`.

    Written to a temporary name and renamed, so a run killed mid-write never leaves a torn file
    for the next run to read.
    """

    settings: PipelineSettings
    base_dir: str | None = None

    def _root(self) -> Path:
        if self.base_dir:
            return Path(self.base_dir)
        return self.settings.settings.data_path / "intermediates"

    def _path(self, asset_key: dg.AssetKey, partition: str | None) -> Path:
        return self._root().joinpath(*asset_key.path) / f"{partition or '__all__'}.parquet"

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame | None) -> None:
        if obj is None:
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

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        partition = context.asset_partition_key if context.has_asset_partitions else None
        path = self._path(context.asset_key, partition)
        if not path.exists():
            raise FileNotFoundError(
                f"no intermediate for {context.asset_key.to_user_string()} "
                f"partition {partition!r} at {path}: materialise it first"
            )
        return pl.read_parquet(path)
