"""Stable document batches, and the batched Parquet frames the ingestion steps pass on.

A source of any size is processed a batch at a time, so an ingest's peak memory is set by
`batching.batch_documents`, not by the size of the source. A document's batch is a hash of its
id modulo the batch count, and the count is a power of two chosen from the source's size: adding
documents never moves another document to another batch, except when the count doubles, and
then each batch splits into exactly two (a document of batch `b` goes to `b` or `b + count`).

Between the steps a run's work is a `FrameBatches`: Parquet files holding one row group per
batch (the `batch` column), so a step reads one batch by reading only that batch's row groups.
The parse step writes one file per slice of the listing (documents in listing order, each file
grouped by batch); every later step writes one file per batch.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from clef_pipelines.ingest.config import MAX_BATCHES, BatchingConfig  # noqa: F401
from clef_pipelines.ingest.process_memory import trim_heap

#: The column every batched frame carries.
BATCH = "batch"

#: The only columns whose Parquet statistics (min / max per row group) are written: the batch
#: key, which `FrameBatches.index` reads, and the document id. Statistics of the text columns
#: would be whole passages (up to 4 KB each, twice) in every row group's footer entry: a
#: regrouped batch file of a 1,000,000-document source held 492 row groups in a 2.5 MB
#: footer, 3.9 KB of each row group's 5.2 KB the min and max of `text`, and each open writer
#: keeps its footer in memory until it closes (docs/BENCHMARKS.md).
_STATISTICS_COLUMNS = (BATCH, "doc_id")


#: What `BatchWriter.regroup` holds of a round's batches before writing the largest: one
#: row group of a batch file is at least this over the round's batch count (256 KB at 64
#: batches), so a batch of 2,000 parsed documents is about a dozen row groups. 64 MB held
#: raised the parse step's high-water mark at 50,000 documents by more than the writers'
#: metadata it saved there (docs/BENCHMARKS.md, "The regroup's memory").
REGROUP_BUFFER_BYTES = 16 * 1024 * 1024


def _statistics(names: list[str]) -> list[str]:
    return [c for c in _STATISTICS_COLUMNS if c in names]


def batch_count(documents: int, batch_documents: int) -> int:
    """The power of two that keeps `documents / count` at or under `batch_documents`."""
    wanted = max(1, math.ceil(documents / max(1, batch_documents)))
    return min(MAX_BATCHES, 1 << (wanted - 1).bit_length())


def batch_of(doc_id: str, count: int) -> int:
    """The batch of a document: a hash of its id modulo the (power-of-two) batch count."""
    if count <= 1:
        return 0
    digest = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def batch_column(doc_ids: pl.Series, count: int) -> pl.Series:
    return pl.Series(BATCH, [batch_of(d, count) for d in doc_ids.to_list()], dtype=pl.Int64)


@dataclass
class FrameBatches:
    """A run's frames of one step, one or more Parquet files with a row group per batch."""

    directory: Path
    _index: dict[int, list[tuple[Path, int]]] | None = field(default=None, repr=False)

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("*.parquet")) if self.directory.exists() else []

    def index(self) -> dict[int, list[tuple[Path, int]]]:
        """Batch -> the (file, row group) pairs holding its rows (read from the footers)."""
        if self._index is None:
            index: dict[int, list[tuple[Path, int]]] = {}
            for path in self.files():
                meta = pq.ParquetFile(path).metadata
                col = meta.schema.to_arrow_schema().get_field_index(BATCH)
                for rg in range(meta.num_row_groups):
                    stats = meta.row_group(rg).column(col).statistics
                    if meta.row_group(rg).num_rows == 0 or stats is None:
                        continue
                    if stats.min != stats.max:  # written by BatchWriter: never happens
                        raise ValueError(f"{path}: row group {rg} mixes batches")
                    index.setdefault(int(stats.min), []).append((path, rg))
            self._index = dict(sorted(index.items()))
        return self._index

    def keys(self) -> list[int]:
        return list(self.index())

    def schema(self) -> dict[str, pl.DataType]:
        """The columns of the batches (the union over the files) with their types."""
        out: dict[str, pl.DataType] = {}
        for path in self.files():
            for name, dtype in pl.read_parquet_schema(path).items():
                out.setdefault(name, dtype)
        return out

    def rows(self) -> int:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in self.files())

    def read(self, key: int) -> pl.DataFrame:
        # Each file opened once, however many of its row groups hold the batch.
        groups: dict[Path, list[int]] = {}
        for path, rg in self.index().get(key, []):
            groups.setdefault(path, []).append(rg)
        parts = [pl.from_arrow(pq.ParquetFile(p).read_row_groups(rgs)) for p, rgs in groups.items()]
        frames = [p for p in parts if isinstance(p, pl.DataFrame)]
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()

    def __iter__(self) -> Iterator[tuple[int, pl.DataFrame]]:
        for key in self.keys():
            yield key, self.read(key)

    def read_all(self) -> pl.DataFrame:
        """Every batch in one frame: for small sources and tests only."""
        frames = [f for _, f in self]
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


@dataclass(frozen=True)
class FrameFile:
    """A step's frame handed on as the one Parquet file the step wrote, not as the frame.

    Why: a run in one process (`execute_in_process`, how the CLI and the tests run the job)
    keeps every step's output value until the run ends, so an inventory returned as a
    DataFrame stayed resident through every later step, the sync included (about 56 MB at
    500,000 documents; docs/BENCHMARKS.md). The IO manager moves the file into place, and a
    step that takes it as input gets the DataFrame (or only the columns it asks for)."""

    path: Path

    @classmethod
    def write(cls, frame: pl.DataFrame, path: Path) -> FrameFile:
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(path)
        return cls(path)

    def rows(self) -> int:
        return pq.ParquetFile(self.path).metadata.num_rows

    def schema(self) -> dict[str, pl.DataType]:
        return dict(pl.read_parquet_schema(self.path))


class BatchWriter:
    """Writes a step's batched output into a staging folder the IO manager moves into place."""

    def __init__(self, directory: Path) -> None:
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        self.directory = directory
        self._files = 0

    def write(self, frame: pl.DataFrame, name: str | None = None) -> None:
        """One file: the frame's rows grouped by batch, one row group per batch."""
        if frame.height == 0:
            return
        frame = frame.sort(BATCH, maintain_order=True)
        self._files += 1
        path = self.directory / f"{name or f'part-{self._files:06d}'}.parquet"
        table = frame.to_arrow()
        with pq.ParquetWriter(
            path, table.schema, write_statistics=_statistics(table.column_names)
        ) as out:
            for (_key,), part in frame.group_by([BATCH], maintain_order=True):
                out.write_table(part.to_arrow(), row_group_size=max(1, part.height))

    def regroup(self, max_open: int = 64, buffer_bytes: int = REGROUP_BUFFER_BYTES) -> None:
        """Rewrite the files written so far as one file per batch.

        Why: a step that must read its input in order (the parse step reads a source front to
        back) writes files that each hold a row group of nearly every batch, since a
        document's batch is a hash of its id; reading one batch then opened every file, so a
        step over all batches cost files x batches, which grows with the square of the source
        (docs/BENCHMARKS.md, "50,000 and 500,000 documents"). A round takes up to
        ``max_open`` batches and reads, file by file, only those batches' row groups, so the
        data is read once in all, however many rounds.

        A batch's pieces are held until the round's held pieces pass ``buffer_bytes``, then
        the batch holding the most is written as one row group. Why: an open Parquet writer
        keeps every row group's metadata (about 12 KB for the 15 columns of parsed blocks)
        until it is freed, and writing each input file's piece as its own row group gave a
        batch file a row group per input file, whose number grows with the source: 64 open
        writers held 0.2 GB at 500,000 documents (docs/BENCHMARKS.md, "The regroup's
        memory"). Held pieces are bounded by ``buffer_bytes``, and a batch file's row groups
        by its own size (a batch) over ``buffer_bytes / max_open``: both set by
        configuration, neither by the source."""
        sources = sorted(p for p in self.directory.glob("*.parquet"))
        if len(sources) < 2:
            return
        index = FrameBatches(self.directory).index()
        keys = sorted(index)
        staging = self.directory / ".regroup"
        staging.mkdir()
        for start in range(0, len(keys), max_open):
            _regroup_round(sources, index, keys[start : start + max_open], staging, buffer_bytes)
        for path in sources:
            path.unlink()
        for path in staging.iterdir():
            path.rename(self.directory / path.name)
        staging.rmdir()
        # The steps of a run share one process (Dagster's in-process executor), so what the
        # regroup freed but the allocators keep (the input footers' parse, the pieces) would
        # stay under the next steps: hand it back.
        pa.default_memory_pool().release_unused()
        trim_heap()

    def write_batch(self, key: int, frame: pl.DataFrame) -> None:
        """One batch's frame as its own file (the `batch` column set to `key`)."""
        self.write(frame.with_columns(pl.lit(key, dtype=pl.Int64).alias(BATCH)), f"batch-{key:05d}")

    def finish(self) -> FrameBatches:
        return FrameBatches(self.directory)


def _regroup_round(
    sources: list[Path],
    index: dict[int, list[tuple[Path, int]]],
    keys: list[int],
    staging: Path,
    buffer_bytes: int,
) -> None:
    """One round of `BatchWriter.regroup`: the batches `keys`, each into its file in
    `staging`. The files hold one row group per batch (`BatchWriter.write`), so a row group
    is one batch's piece and is read as it is, never regrouped row by row in memory."""
    by_file: dict[Path, list[tuple[int, int]]] = {}
    for key in keys:
        for path, rg in index[key]:
            by_file.setdefault(path, []).append((rg, key))
    held: dict[int, list[pa.Table]] = {}
    held_bytes: dict[int, int] = {}
    writers: dict[int, pq.ParquetWriter] = {}

    def flush(key: int) -> None:
        table = pa.concat_tables(held.pop(key))
        del held_bytes[key]
        if key not in writers:
            writers[key] = pq.ParquetWriter(
                staging / f"batch-{int(key):05d}.parquet",
                table.schema,
                write_statistics=_statistics(table.column_names),
            )
        writers[key].write_table(table, row_group_size=max(1, table.num_rows))

    try:
        for path in sources:
            if path not in by_file:
                continue
            file = pq.ParquetFile(path)
            for rg, key in sorted(by_file[path]):
                piece = file.read_row_group(rg)
                held.setdefault(key, []).append(piece)
                held_bytes[key] = held_bytes.get(key, 0) + piece.nbytes
                if sum(held_bytes.values()) > buffer_bytes:
                    flush(max(held_bytes, key=held_bytes.__getitem__))
        for key in sorted(held):
            flush(key)
    finally:
        for w in writers.values():
            w.close()


def merge_reports(total: Any, part: Any) -> Any:
    """Fold one batch's report dataclass into the run's: numbers add up, dicts merge (their
    numbers adding up), lists extend without repeats, text keeps the first value set."""
    if total is None:
        return part
    for f in fields(part):
        a, b = getattr(total, f.name), getattr(part, f.name)
        setattr(total, f.name, _merge(a, b))
    return total


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, bool) or isinstance(b, bool):
        return a or b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _merge(out[k], v) if k in out else v
        return out
    if isinstance(a, list) and isinstance(b, list):
        return a + [x for x in b if x not in a]
    return a if a not in (None, "", "off") else b
