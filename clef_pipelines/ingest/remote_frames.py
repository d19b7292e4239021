"""The Parquet intermediates on an object store (`data_dir: s3://bucket/prefix`).

A step writes its output on local disk as it always does (a `BatchWriter` folder, a
`FrameFile`), and the IO manager hands it here to be uploaded; a step that reads an input
downloads it to local disk first and reads it there as a local one. The steps of a run may
therefore run on machines that share nothing but the object store.

An object store has no rename, so a batched output (a folder of files) is made visible the way
a table format does it: its files are uploaded under a fresh folder name, then a small pointer
object (`<partition>.json`) naming that folder is written in one PUT, which is atomic; the
folder the pointer named before is deleted after. A reader follows the pointer, so it never
sees a half-uploaded output. A single file (`<partition>.parquet`) is one PUT.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from clef_pipelines.objectstore import ObjectStoreConfig, filesystem, join, strip_scheme

POINTER_SUFFIX = ".json"


class RemoteFrames:
    """One intermediates root on an object store (a URL), reached with `object_store`."""

    def __init__(self, root: str, object_store: ObjectStoreConfig) -> None:
        self.root = root.rstrip("/")
        self.fs: Any = filesystem(root, object_store)

    def _key(self, url: str) -> str:
        return strip_scheme(url)

    def url(self, *parts: str) -> str:
        return join(self.root, *parts)

    # ------------------------------------------------------------------ files

    def put_file(self, local: Path, url: str) -> None:
        """One file, in one PUT (readers see the old object or the new, never a torn one)."""
        self.fs.put_file(str(local), self._key(url))

    def get_file(self, url: str, local: Path) -> bool:
        """Download `url` to `local`; False when there is no such object."""
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.fs.get_file(self._key(url), str(local))
        except FileNotFoundError:
            return False
        return True

    def exists(self, url: str) -> bool:
        return bool(self.fs.exists(self._key(url)))

    def delete(self, url: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._key(url), recursive=True)

    # ---------------------------------------------------------------- folders

    def _pointer(self, url: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(self._key(url + POINTER_SUFFIX), "rb") as fh:
                return json.loads(fh.read().decode("utf-8"))  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    def has_folder(self, url: str) -> bool:
        return self._pointer(url) is not None

    def put_folder(self, local: Path, url: str) -> None:
        """Upload the Parquet files of `local` as the folder `url` (see the module doc)."""
        before = self._pointer(url)
        version = uuid.uuid4().hex[:12]
        target = f"{url}.v-{version}"
        files = sorted(p.name for p in local.glob("*.parquet"))
        for name in files:
            self.put_file(local / name, join(target, name))
        pointer = json.dumps({"folder": target.rsplit("/", 1)[-1], "files": files})
        with self.fs.open(self._key(url + POINTER_SUFFIX), "wb") as fh:
            fh.write(pointer.encode("utf-8"))
        if before is not None:
            self.delete(join(url.rsplit("/", 1)[0], before["folder"]))

    def get_folder(self, url: str, local: Path) -> bool:
        """Download the folder `url` into `local` (emptied first); False when there is none."""
        pointer = self._pointer(url)
        if pointer is None:
            return False
        if local.exists():
            shutil.rmtree(local)
        local.mkdir(parents=True)
        folder = join(url.rsplit("/", 1)[0], pointer["folder"])
        for name in pointer["files"]:
            self.fs.get_file(self._key(join(folder, name)), str(local / name))
        return True

    def folder_schema_file(self, url: str) -> str | None:
        """The URL of one file of the folder `url` (for its columns), or None."""
        pointer = self._pointer(url)
        if not pointer or not pointer["files"]:
            return None
        return join(url.rsplit("/", 1)[0], pointer["folder"], pointer["files"][0])

    def read_schema(self, url: str) -> Any:
        """The Arrow schema of a Parquet object (its footer only is read)."""
        with self.fs.open(self._key(url), "rb") as fh:
            return pq.read_schema(fh)
