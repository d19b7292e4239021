"""In-process progress listeners: the CLI shows a bar while an in-process run embeds and syncs."""

from __future__ import annotations

from collections.abc import Callable

Listener = Callable[[str, int, int], None]
_listeners: list[Listener] = []


def add_listener(listener: Listener) -> None:
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def report(stage: str, done: int, total: int) -> None:
    for listener in list(_listeners):
        listener(stage, done, total)
