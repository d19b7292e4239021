"""Is a LanceDB table on disk whole? A check from metadata alone, for one line of diagnosis.

A table folder (``<name>.lance``) holds ``_versions`` (the manifests), ``data`` (the files
the manifest lists, each with the size it was written with) and ``_indices``. Damage seen in
the field (issue 54): ``_versions`` gone (LanceDB then says only "Table was not found"), a data
file truncated or missing (a read fails deep in Lance's Rust code, naming a Rust source path).
`table_damage` finds either by opening the manifest and comparing each data file's size on
disk with the size the manifest records: no data is read, so it is cheap enough to run before
every ingest (`check_tables`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clef_pipelines.stores.base import StoreError


class DamagedTable(StoreError):
    """A LanceDB table whose files are damaged; the message names it and the way out."""


def table_damage(table_dir: Path) -> str | None:
    """What is wrong with the table in `table_dir`, in a few words; None when it looks whole."""
    versions = table_dir / "_versions"
    if not versions.is_dir() or not any(versions.glob("*.manifest")):
        return "its _versions folder is missing"
    import lance  # pylance: only here, never on the query path

    try:
        ds = lance.dataset(str(table_dir))
        fragments = ds.get_fragments()
    except Exception as exc:  # any failure to read the manifest is damage to report
        return f"its manifest cannot be read: {_first_line(exc)}"
    for fragment in fragments:
        for data_file in fragment.metadata.files:
            path = table_dir / "data" / data_file.path
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return f"data file data/{data_file.path} is missing"
            expected = getattr(data_file, "file_size_bytes", None)
            if expected and size != expected:
                return (
                    f"data file data/{data_file.path} is truncated ({size:,} of {expected:,} bytes)"
                )
    return None


def damage_line(name: str, table_dir: Path, reason: str) -> str:
    """One line: what is damaged, and the way out."""
    return (
        f"collection {name!r}: the LanceDB table {table_dir} is damaged ({reason}); restore "
        f"that folder from a backup, or remove it (rm -rf {table_dir}) and run "
        "`clef-pipelines ingest` to rebuild it from the sources"
    )


def find_damage(root: Path, names: Iterable[str] | None = None) -> list[str]:
    """`damage_line` for each damaged table under the LanceDB folder `root` (only `names`
    when given); empty when every table looks whole."""
    wanted = set(names) if names is not None else None
    out = []
    for table_dir in sorted(root.glob("*.lance")) if root.is_dir() else []:
        name = table_dir.name.removesuffix(".lance")
        if wanted is not None and name not in wanted:
            continue
        reason = table_damage(table_dir)
        if reason:
            out.append(damage_line(name, table_dir, reason))
    return out


def check_tables(root: Path, names: Iterable[str]) -> None:
    """Raise `DamagedTable` naming the first damaged table of `names` under `root`."""
    damaged = find_damage(root, names)
    if damaged:
        raise DamagedTable(damaged[0])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # Lance's messages end in the Rust source that raised them: of no use to the operator.
    return text.split(", /rustc/")[0].split(", /home/")[0][:200]


def looks_like_lance_failure(exc: BaseException) -> bool:
    """An error raised from Lance's runtime, or LanceDB's "not found" for a table folder
    whose manifests are gone."""
    text = str(exc)
    return (
        "LanceError" in text
        or "lance error" in text
        or (isinstance(exc, ValueError) and "was not found" in text)
    )


__all__ = [
    "DamagedTable",
    "check_tables",
    "damage_line",
    "find_damage",
    "looks_like_lance_failure",
    "table_damage",
]
