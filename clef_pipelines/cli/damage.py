"""Damaged state on disk as one line naming what is damaged and the way out, not a traceback.

Every command runs through `DamageAwareGroup`: an exception that escapes a command is looked
at once more before it becomes a traceback. Damage recognised:

- Dagster's instance storage (``$DAGSTER_HOME``'s SQLite files) that SQLite cannot read;
- a LanceDB table whose ``_versions`` folder is gone, or whose data file is truncated or
  missing (`stores.lancedb_health`, which finds the table from its files' sizes).

Anything else is raised as before: a bug should keep its traceback.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

#: SQLite's own words for a file that is not (or no longer) a database it can read.
_SQLITE_DAMAGE = ("file is not a database", "malformed", "disk image")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes and contexts, and a SQLAlchemy error's DB-API error."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        orig = getattr(e, "orig", None)
        todo += [e.__cause__, e.__context__, orig if isinstance(orig, BaseException) else None]


def dagster_damage(exc: BaseException) -> str | None:
    """The line for a Dagster instance whose SQLite storage is damaged, else None."""
    for e in _chain(exc):
        # (OperationalError, "database is locked" among them, is not damage.)
        damaged = isinstance(e, sqlite3.DatabaseError) and not isinstance(
            e, sqlite3.OperationalError
        )
        if damaged and any(words in str(e) for words in _SQLITE_DAMAGE):
            home = os.environ.get("DAGSTER_HOME") or "$DAGSTER_HOME"
            return (
                f"Dagster's storage in {home} is damaged ({e}); move that folder aside "
                f"(mv {home} {home}.damaged) and run again: it holds the run history, "
                "not the ingested data"
            )
    return None


def lancedb_damage(exc: BaseException, args: list[str]) -> str | None:
    """The line for a damaged LanceDB table, when `exc` came from Lance and a table of the
    command's LanceDB folder is damaged; else None."""
    from clef_pipelines.stores.lancedb_health import (
        DamagedTable,
        find_damage,
        looks_like_lance_failure,
    )

    for e in _chain(exc):
        if isinstance(e, DamagedTable):
            return str(e)
    if not any(looks_like_lance_failure(e) for e in _chain(exc)):
        return None
    root = _lancedb_root(args)
    damaged = find_damage(root) if root is not None else []
    return damaged[0] if damaged else None


def _lancedb_root(args: list[str]) -> Path | None:
    """The LanceDB folder of the settings the command was given (``--config`` / ``-c``, else
    the default file), or None when they name another store or cannot be read."""
    from clef_pipelines.config import load_settings
    from clef_pipelines.stores.factory import lancedb_location, lancedb_path

    config: str | None = None
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            config = args[i + 1]
        elif arg.startswith("--config="):
            config = arg.split("=", 1)[1]
    try:
        settings = load_settings(config)
    except Exception:  # no diagnosis without settings: the original error stands
        return None
    if settings.store.kind != "lancedb" or lancedb_location(
        settings.store, settings.data_path
    ) != str(lancedb_path(settings.store, settings.data_path)):
        return None  # another store, or LanceDB on an object store (no local files to check)
    return lancedb_path(settings.store, settings.data_path)


def damage_message(exc: BaseException, args: list[str]) -> str | None:
    return dagster_damage(exc) or lancedb_damage(exc, args)


class DamageAwareGroup(TyperGroup):
    """The app's command group: damaged state becomes one line and exit code 1."""

    def invoke(self, ctx: Any) -> Any:  # (typer's own click Context)
        # (The arguments are the command's: `_protected_args` holds its name, `args` the rest.)
        args = [*ctx._protected_args, *ctx.args]
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException):  # exits and usage errors as they are
            raise
        except Exception as exc:
            message = damage_message(exc, args)
            if message is None:
                raise
            from clef_pipelines.cli.common import fail

            fail(message, code=1)
