"""The Parquet IO manager: a step's frame handed on as its file, and inputs read by column."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from clef_pipelines.config import Settings
from clef_pipelines.ingest.batches import FrameFile
from clef_pipelines.resources.parquet_io import PolarsParquetIOManager
from clef_pipelines.resources.settings import PipelineSettings

FRAME = pl.DataFrame(
    {"doc_id": ["a", "b", "c"], "status": ["new", "new", "unchanged"], "uri": ["x", "y", "z"]}
)


def test_a_frame_file_is_moved_in_and_read_back_by_the_columns_an_input_asks_for(
    tmp_path: Path,
) -> None:
    staging = tmp_path / "staging"
    seen: dict[str, pl.DataFrame] = {}

    @dg.asset(io_manager_key="parquet_io")
    def inventory() -> FrameFile:
        return FrameFile.write(FRAME, staging / "inventory.parquet")

    @dg.asset(ins={"inventory": dg.AssetIn(metadata={"columns": ["doc_id", "status"]})})
    def slim(inventory: pl.DataFrame) -> None:
        seen["slim"] = inventory

    @dg.asset
    def whole(inventory: pl.DataFrame) -> None:
        seen["whole"] = inventory

    io = PolarsParquetIOManager(
        settings=PipelineSettings(validated=Settings()), base_dir=str(tmp_path / "out")
    )
    result = dg.materialize([inventory, slim, whole], resources={"parquet_io": io})

    assert result.success
    placed = tmp_path / "out" / "inventory" / "__all__.parquet"
    assert placed.exists() and not (staging / "inventory.parquet").exists()
    # The run holds the handle, not the frame (a run in one process keeps its outputs).
    assert isinstance(result.output_for_node("inventory"), FrameFile)
    (event,) = result.asset_materializations_for_node("inventory")
    assert event.metadata["dagster/row_count"].value == 3
    assert [c.name for c in event.metadata["dagster/column_schema"].value.columns] == [
        "doc_id",
        "status",
        "uri",
    ]
    assert seen["slim"].columns == ["doc_id", "status"]
    assert seen["whole"].equals(FRAME)
