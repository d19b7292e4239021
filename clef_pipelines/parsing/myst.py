"""MyST (Sphinx Markdown) syntax rewritten, line for line, into the CommonMark it stands for.

Documentation written for Sphinx wraps prose in directives (```` ```{note} ```` fences and
`:::{warning}` colon fences), links with roles (``{ref}`text <target>` ``) and labels headings
with `(name)=` lines. Read as plain CommonMark, a `{note}` body became a code block, a nested
fence put its inner backticks into the text, and a colon fence, a role or a label landed in
the chunks as stray `:::{...}`, braces and backticks. Here each such line is rewritten before
markdown-it sees it: the fences of a prose directive vanish (its body is parsed as Markdown,
its title kept as a line of text), a code directive becomes a plain fence, a directive that
holds no text (`toctree`, `image`) vanishes whole, and a role becomes its text. The number of
lines never changes, so the token line maps still point into the original document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_OPEN = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[A-Za-z][\w:.+-]*)\}[ \t]*(?P<arg>.*?)\s*$"
)
_PLAIN_FENCE = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})")
_OPTION = re.compile(r"^[ \t]*:[\w-]+:(?:[ \t].*)?$")
_LABEL = re.compile(r"^[ \t]*\([^()\s]+\)=[ \t]*$")
# {role}`text` and {role}`text <target>`: the text is what a reader sees.
_ROLE = re.compile(r"\{[A-Za-z][\w:.+-]*\}`(?P<body>[^`]+)`")
_TARGETED = re.compile(r"^(?P<text>.*?)\s*<[^<>]+>$")

#: Directives whose body is source code (or a formula), not prose.
_CODE = frozenset(
    {"code", "code-block", "code-cell", "sourcecode", "math", "mermaid", "graphviz", "literal"}
)
#: Directives that hold no text a reader would search for (navigation, files, images).
_DROP = frozenset(
    {
        "toctree",
        "contents",
        "tableofcontents",
        "include",
        "literalinclude",
        "image",
        "raw",
        "bibliography",
        "automodule",
        "autoclass",
        "autofunction",
        "csv-table",
    }
)
#: Prose directives whose argument is a file, not a title.
_PATH_ARGUMENT = frozenset({"figure"})

Kind = Literal["prose", "code", "drop", "fence"]


@dataclass
class _Open:
    kind: Kind
    fence: str  # the opening run of backticks, colons or tildes
    replacement_fence: str = ""  # a code directive's closing line, as rewritten
    in_options: bool = True  # option lines may follow the opening line


def _kind(name: str, colon: bool) -> Kind:
    name = name.lower()
    if name in _CODE:
        return "code"
    if name in _DROP:
        return "drop"
    # An unknown name in a backtick fence is a code cell (```{r}, ```{python} in notebooks);
    # a colon fence is MyST's way of writing a prose directive.
    if colon or name in _PROSE:
        return "prose"
    return "code"


_PROSE = frozenset(
    {
        "note",
        "warning",
        "tip",
        "hint",
        "important",
        "caution",
        "attention",
        "danger",
        "error",
        "seealso",
        "admonition",
        "todo",
        "versionadded",
        "versionchanged",
        "deprecated",
        "dropdown",
        "topic",
        "sidebar",
        "margin",
        "epigraph",
        "glossary",
        "figure",
        "card",
        "grid",
        "grid-item",
        "grid-item-card",
        "tab-set",
        "tab-item",
        "tab",
        "div",
        "container",
        "rubric",
        "list-table",
        "table",
        "only",
        "eval-rst",
    }
)


def _closes(line: str, top: _Open) -> bool:
    stripped = line.strip()
    char = top.fence[0]
    return len(stripped) >= len(top.fence) and stripped == char * len(stripped)


def _role_text(m: re.Match[str]) -> str:
    body = m.group("body")
    targeted = _TARGETED.match(body)
    text = targeted.group("text") if targeted else body
    return text.lstrip("~!")


def _open_line(m: re.Match[str], stack: list[_Open]) -> str:
    """Push the directive opened on this line; what the line becomes."""
    name, arg, indent = m.group("name"), m.group("arg"), m.group("indent")
    fence = m.group("fence")
    kind = _kind(name, fence.startswith(":"))
    if kind == "code":
        ticks = "`" * max(3, len(fence))
        stack.append(_Open("code", fence, replacement_fence=indent + ticks))
        lang = arg.split()[0] if arg else ("" if name.lower() in _CODE else name)
        return f"{indent}{ticks}{lang}"
    stack.append(_Open(kind, fence))
    if kind == "prose" and arg and name.lower() not in _PATH_ARGUMENT:
        return indent + _ROLE.sub(_role_text, arg)
    return ""


def _inside(line: str, top: _Open) -> tuple[str, bool]:
    """(what a line inside an open directive becomes, whether it is still an option line)."""
    if top.in_options and _OPTION.match(line):
        return "", True
    if top.kind == "drop":
        return "", False
    return line, False


def rewrite_myst(text: str) -> str:
    """`text` with MyST directives, roles and labels rewritten as described above; text
    without them comes back unchanged (the same object)."""
    if "{" not in text and ")=" not in text:
        return text
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    stack: list[_Open] = []
    for raw in lines:
        body = raw.rstrip("\r\n")
        end = raw[len(body) :]
        out.append(_rewrite_line(body, stack) + end)
    rewritten = "".join(out)
    return text if rewritten == text else rewritten


def _rewrite_line(line: str, stack: list[_Open]) -> str:
    top = stack[-1] if stack else None
    if top is not None and top.kind in ("code", "fence"):
        if _closes(line, top):
            stack.pop()
            return top.replacement_fence if top.kind == "code" else line
        if top.kind == "code" and top.in_options:
            new, top.in_options = _inside(line, top)
            return new
        return line
    if top is not None and _closes(line, top):
        stack.pop()
        return ""
    opened = _OPEN.match(line)
    if opened:
        if top is not None:
            top.in_options = False
        return _open_line(opened, stack)
    plain = _PLAIN_FENCE.match(line)
    if plain:
        if top is not None:
            top.in_options = False
        if top is not None and top.kind == "drop":
            stack.append(_Open("drop", plain.group("fence")))
            return ""
        stack.append(_Open("fence", plain.group("fence"), in_options=False))
        return line
    if top is not None:
        line, top.in_options = _inside(line, top)
        if top.kind == "drop":
            return ""
    if _LABEL.match(line):
        return ""
    return _ROLE.sub(_role_text, line) if "`" in line else line
