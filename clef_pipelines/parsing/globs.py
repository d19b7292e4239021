"""Glob patterns over posix relative paths, with `**` spanning folders.

`**/*.md` matches `a.md` and `x/y/a.md`; `*` and `?` never cross a `/`; a pattern without a
`/` matches the file name at any depth (like .gitignore).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(rel_path: str, patterns: Sequence[str]) -> bool:
    name = rel_path.rsplit("/", 1)[-1]
    for p in patterns:
        p = p.removeprefix("./")
        target = rel_path if "/" in p else name
        if _compile(p).match(target):
            return True
    return False
