"""Sources -> documents, one result per document so one broken document fails alone.

`iter_source_entries` lists a source cheaply: for each document its id, URI, format and the
sha256 of its raw bytes (JSONL: of the record's canonical JSON), or the error that stops it,
without decoding or parsing. An entry is loaded into a `Document` later, with `entry.load()`,
and only if its hash shows it changed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from clef_pipelines.config import ParsingConfig, SourceConfig
from clef_pipelines.objectstore import ObjectStoreConfig
from clef_pipelines.parsing.decode import check_string
from clef_pipelines.parsing.entries import (  # noqa: F401 - re-exported
    SUFFIX_FORMATS,
    file_document,
    first_heading,
    jsonl_entry,
)
from clef_pipelines.parsing.globs import matches
from clef_pipelines.parsing.models import (
    Document,
    ParseError,
    SourceEntry,
)
from clef_pipelines.records import sha256_hex

_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})


def resolve_source_path(source_cfg: SourceConfig, base_dir: str | os.PathLike[str]) -> Path:
    p = Path(source_cfg.path).expanduser()
    return p if p.is_absolute() else (Path(base_dir) / p)


def iter_source_entries(
    source_cfg: SourceConfig,
    base_dir: str | os.PathLike[str],
    parsing_cfg: ParsingConfig | None = None,
    object_store: ObjectStoreConfig | None = None,
) -> Iterator[SourceEntry]:
    """List a source's documents with their raw hashes, in a stable (sorted) order.

    A missing source path raises ParseError('unreadable'): that fails the whole source, not
    one document. A source on an object store or the web is listed by `parsing.remote`
    (`object_store`: how to reach it).
    """
    cfg = parsing_cfg or ParsingConfig()
    if source_cfg.remote:
        from clef_pipelines.parsing.remote import iter_remote_entries

        yield from iter_remote_entries(source_cfg, cfg, object_store or ObjectStoreConfig())
        return
    path = resolve_source_path(source_cfg, base_dir)
    kind = source_cfg.kind
    if kind == "auto":
        kind = "folder" if path.is_dir() else "jsonl"
        if kind == "jsonl" and path.suffix.lower() not in _JSONL_SUFFIXES and path.exists():
            raise ParseError(
                "unsupported",
                f"source {source_cfg.name!r}: {path} is neither a folder nor a .jsonl file",
            )
    if not path.exists():
        raise ParseError("unreadable", f"source {source_cfg.name!r}: {path} does not exist")
    if kind == "folder":
        if not path.is_dir():
            raise ParseError("unreadable", f"source {source_cfg.name!r}: {path} is not a folder")
        yield from _folder_entries(source_cfg, path, cfg)
    elif kind == "file":
        yield _file_entry(source_cfg.name, path.name, path, cfg)
    else:
        yield from _jsonl_entries(source_cfg, path, cfg)


# --- folders -------------------------------------------------------------------------------


def _folder_entries(
    source_cfg: SourceConfig, root: Path, cfg: ParsingConfig
) -> Iterator[SourceEntry]:
    candidates: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Version-control internals are never documents (and can be huge).
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        here = Path(dirpath)
        # Folders whose name matches an include pattern are reported (as unreadable):
        # someone meant a file there.
        for name in [*filenames, *dirnames]:
            full = here / name
            rel = full.relative_to(root).as_posix()
            if matches(rel, source_cfg.include) and not matches(rel, source_cfg.exclude):
                candidates.append((rel, full))
    # Links that lead out of the source are refused unless the source allows them: a link
    # `docs/passwd.md -> /etc/passwd` must not put /etc/passwd in the index.
    confine_to = None if source_cfg.follow_links_outside else root.resolve()
    for rel, full in sorted(candidates):
        yield _file_entry(source_cfg.name, rel, full, cfg, confine_to=confine_to)


def _file_uri(path: Path) -> str:
    return path.absolute().as_uri()


_NOT_REGULAR = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _open_regular(full: Path, what: str) -> int:
    """Open `full` for reading only if it is a regular file; returns the descriptor.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer (it has no
    effect on regular files), and the type is checked on the open descriptor, so a file
    swapped for a FIFO between a check and the read cannot hang us either.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(full, flags)
    except OSError as exc:
        raise ParseError("unreadable", f"{what}: cannot read ({exc.strerror or exc})") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
        raise ParseError("unreadable", f"{what}: is {kind}; only regular files are read")
    os.set_blocking(fd, True)
    return fd


def _read_regular(full: Path, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (ParseError otherwise)."""
    fd = _open_regular(full, what)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise ParseError("oversize", f"{what}: {size} bytes, over the {limit} limit")
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew since it was opened
        raise ParseError("oversize", f"{what}: over the {limit} byte limit")
    return data


def _outside(full: Path, root: Path) -> bool:
    """Whether `full` (a link, or inside one) resolves to somewhere outside `root`."""
    # realpath does not raise on a link loop; a loop resolves to a path that is no file.
    return not Path(os.path.realpath(full)).is_relative_to(root)


def _file_entry(
    source: str, rel: str, full: Path, cfg: ParsingConfig, *, confine_to: Path | None = None
) -> SourceEntry:
    uri = _file_uri(full)
    fmt = SUFFIX_FORMATS.get(full.suffix.lower())

    def failed(err: ParseError) -> SourceEntry:
        return SourceEntry(source, rel, uri, fmt, None, err)

    try:  # a file name that is not UTF-8 (its bytes arrive as lone surrogates) is no id
        check_string(rel, "a file", f"the path {ascii(rel)}")
    except ParseError as exc:
        rel = rel.encode("utf-8", "backslashreplace").decode("utf-8")  # the failure's id
        return failed(exc)
    if fmt is None:
        return failed(
            ParseError(
                "unsupported", f"{rel}: no parser for {full.suffix or 'files without a suffix'!r}"
            )
        )
    if full.is_symlink() and not full.exists():
        return failed(ParseError("unreadable", f"{rel}: broken symbolic link"))
    if confine_to is not None and _outside(full, confine_to):
        return failed(
            ParseError(
                "outside_source",
                f"{rel}: a link to {os.path.realpath(full)}, outside the source folder; set the "
                "source's follow_links_outside: true to read it",
            )
        )
    try:
        raw = _read_regular(full, rel, cfg.max_file_bytes)
    except ParseError as exc:
        return failed(exc)
    digest = sha256_hex(raw)
    del raw

    def load(override: ParsingConfig | None) -> Document:
        parsing_cfg = override or cfg
        # Re-read rather than keep every file's bytes in memory between listing and loading.
        data = _read_regular(full, rel, parsing_cfg.max_file_bytes)
        return file_document(rel, uri, fmt, data, sha256_hex(data), parsing_cfg)

    return SourceEntry(source, rel, uri, fmt, digest, None, load)


# --- JSONL ---------------------------------------------------------------------------------


def _jsonl_entries(
    source_cfg: SourceConfig, path: Path, cfg: ParsingConfig
) -> Iterator[SourceEntry]:
    file_uri = _file_uri(path)
    name = path.name
    seen: set[str] = set()
    # A FIFO named *.jsonl would block the listing for ever: only a regular file is read.
    fd = _open_regular(path, f"source {source_cfg.name!r}: {path}")
    with os.fdopen(fd, "rb") as fh:
        for lineno, raw_line in enumerate(fh, start=1):
            if not raw_line.strip():
                continue
            where = f"{name} line {lineno}"
            entry = jsonl_entry(source_cfg, raw_line, where, lineno, file_uri, cfg, seen)
            yield entry


def load_file(path: str | os.PathLike[str], parsing_cfg: ParsingConfig | None = None) -> Document:
    """Load one file (doc_id = its file name); raises ParseError."""
    full = Path(path)
    entry = _file_entry("file", full.name, full, parsing_cfg or ParsingConfig())
    return entry.load()


def load_documents(
    source_cfg: SourceConfig,
    base_dir: str | os.PathLike[str],
    parsing_cfg: ParsingConfig | None = None,
) -> Iterator[Document | ParseError]:
    """Every document of a source, or the error that stopped it (convenience for scripts)."""
    for entry in iter_source_entries(source_cfg, base_dir, parsing_cfg):
        try:
            yield entry.load(parsing_cfg)
        except ParseError as exc:
            yield exc
