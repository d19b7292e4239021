"""HTML -> blocks, via selectolax (lexbor).

Boilerplate is skipped while walking: script/style/nav/footer/aside/noscript/form/... and
any element whose id, class, role or aria-label marks it as a cookie/consent banner, a
navigation menu, breadcrumbs or a sidebar; `<header>` is skipped unless it sits inside
`<article>`/`<main>` (where it usually holds the page's own title).

Offsets are best effort: HTML text is normalised (entities decoded, tags removed, blank space
collapsed), so each block's text is searched in the source after the previous block, first
verbatim, then word by word allowing tags and blank space between words. A block not found
gets char_start = char_end = -1.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

from clef_pipelines.parsing.builder import BlockBuilder
from clef_pipelines.parsing.models import Block, BlockKind

_DROP_TAGS = {
    "script", "style", "nav", "footer", "aside", "noscript", "form", "template", "svg",
    "iframe", "button", "select", "input", "textarea", "head", "object", "canvas", "dialog",
}  # fmt: skip
_INLINE_TAGS = {
    "a", "span", "b", "strong", "em", "i", "code", "small", "sup", "sub", "abbr", "time",
    "mark", "u", "s", "kbd", "q", "cite", "label", "var", "samp", "del", "ins", "font", "bdi",
    "bdo", "data", "wbr", "tt",
}  # fmt: skip
_PARAGRAPH_TAGS = {"p", "dt", "dd", "figcaption", "summary", "caption", "address", "legend"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Words in id/class/role/aria-label that mark an element as boilerplate.
_BOILERPLATE_WORDS = {
    "cookie", "cookies", "consent", "gdpr", "ccpa", "nav", "navbar", "navigation", "menu",
    "breadcrumb", "breadcrumbs", "sidebar", "skip", "skiplink", "newsletter",
    "share", "social", "advert", "ads", "popup", "modal", "toc",
}  # fmt: skip
_ANCHORS = {"list_item": "<li", "code": "<pre", "quote": "<blockquote"}
_BOILERPLATE_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "dialog"}
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_SPACE = re.compile(r"\s+")


_TAGS = r"(?:<[^>]*>)*"
_CHAR_FORMS = {
    "&": "(?:&amp;|&#0*38;|&)",
    "<": "(?:&lt;|&#0*60;|<)",
    ">": "(?:&gt;|&#0*62;|>)",
    '"': '(?:&quot;|&#0*34;|")',
    "'": "(?:&#0*39;|&apos;|')",
}


def _source_pattern(words: list[str]) -> re.Pattern[str]:
    """Regex for normalised words as they may appear in HTML source: tags may sit between
    and inside words, blank space may be any blank space or &nbsp;, and the characters HTML
    escapes may be entities."""
    parts = []
    for w in words:
        parts.append(_TAGS.join(_CHAR_FORMS.get(c, re.escape(c)) for c in w))
    return re.compile(r"(?:\s|&nbsp;|&#160;|<[^>]*>)+".join(parts))


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _is_boilerplate(node: LexborNode, in_article: bool) -> bool:
    tag = node.tag
    if tag in _DROP_TAGS:
        return True
    if tag == "header" and not in_article:
        return True
    attrs = node.attributes
    if not attrs:
        return False
    if "hidden" in attrs or attrs.get("aria-hidden") == "true":
        return True
    if (attrs.get("role") or "").lower() in _BOILERPLATE_ROLES:
        return True
    for key in ("id", "class", "aria-label"):
        value = attrs.get(key)
        if value and not _BOILERPLATE_WORDS.isdisjoint(_WORD_SPLIT.split(value.lower())):
            # A page wrapper such as <div class="page has-sidebar"> holds the content
            # itself: never drop an element that contains the main content.
            return node.css_first("main, article, h1") is None
    return False


def _table_text(table: LexborNode) -> str:
    rows: list[list[str]] = []
    header = False
    for i, tr in enumerate(table.css("tr")):
        cells = tr.css("th, td")
        if not cells:
            continue
        if i == 0 and all(c.tag == "th" for c in cells):
            header = True
        rows.append([_norm(c.text(deep=True)).replace("|", "\\|") for c in cells])
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    if header and rows:
        lines.insert(1, "| " + " | ".join("---" for _ in rows[0]) + " |")
    return "\n".join(lines)


class _Walker:
    def __init__(self, original: str) -> None:
        self.original = original
        self.out = BlockBuilder(original)
        # Search from <body> on, so that <title> text never claims a heading's offsets.
        self.cursor = max(original.lower().find("<body"), 0)
        self.buffer: list[str] = []

    def locate(self, text: str, anchor: str | None = None) -> tuple[int, int]:
        """Span of `text` in the source, searched after the previous block.

        With `anchor` (an opening tag such as "<h2" or "<li"), the search starts at the next
        such tag, which skips look-alike text in navigation links and <title>.
        """
        low = self.original.lower()
        starts = []
        if anchor is not None:
            a = low.find(anchor, self.cursor)
            if a >= 0:
                starts.append(a)
        starts.append(self.cursor)
        for origin in starts:
            span = self._find(text, origin)
            if span is not None:
                self.cursor = span[1]
                return span
        return -1, -1

    def _find(self, text: str, origin: int) -> tuple[int, int] | None:
        pos = self.original.find(text, origin)
        if pos >= 0:
            return pos, pos + len(text)
        words = text.split()
        if not words or len(words) > 300:
            return None
        m = _source_pattern(words).search(self.original, origin)
        return (m.start(), m.end()) if m else None

    def locate_tag(self, tag: str) -> tuple[int, int]:
        """Span of the next <tag ...>...</tag> in the source (tables: text never matches)."""
        low = self.original.lower()
        start = low.find(f"<{tag}", self.cursor)
        end = low.find(f"</{tag}>", start) if start >= 0 else -1
        if start < 0 or end < 0:
            return -1, -1
        self.cursor = end + len(tag) + 3
        return start, self.cursor

    def emit(self, kind: BlockKind, text: str, level: int = 0) -> None:
        text = text if kind in ("code", "table") else _norm(text)
        if not text.strip():
            return
        if kind == "table":
            s, e = self.locate_tag("table")
        else:
            anchor = _ANCHORS.get(kind) if kind != "heading" else f"<h{level}"
            s, e = self.locate(text.strip("\n") if kind == "code" else text, anchor)
        if kind == "heading":
            self.out.heading(text, level, s, e)
        else:
            self.out.add(kind, text, s, e)

    def flush(self) -> None:
        if self.buffer:
            self.emit("paragraph", "".join(self.buffer))
            self.buffer = []

    def walk(self, node: LexborNode, in_article: bool = False) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag
            if tag == "-text":
                self.buffer.append(child.text(deep=False) or "")
                continue
            if tag.startswith("-") or _is_boilerplate(child, in_article):
                continue
            if tag == "br":
                self.buffer.append(" ")
            elif tag in _INLINE_TAGS:
                self.buffer.append(child.text(deep=True) or "")
            elif tag == "img":
                continue
            elif tag in _HEADINGS:
                self.flush()
                self.emit("heading", child.text(deep=True) or "", _HEADINGS[tag])
            elif tag in _PARAGRAPH_TAGS:
                # Walked like a container so that <br> separates words; it ends with a flush.
                self.flush()
                self.walk(child, in_article)
            elif tag == "li":
                self.flush()
                self.list_item(child, in_article)
            elif tag == "table":
                self.flush()
                self.emit("table", _table_text(child))
            elif tag == "pre":
                self.flush()
                self.emit("code", child.text(deep=True) or "")
            elif tag == "blockquote":
                self.flush()
                self.emit("quote", child.text(deep=True) or "")
            else:
                self.flush()
                self.walk(child, in_article or tag in ("article", "main"))
        self.flush()

    def list_item(self, li: LexborNode, in_article: bool) -> None:
        # The item's own text, then its nested lists as items of their own.
        own: list[str] = []
        nested: list[LexborNode] = []
        for child in li.iter(include_text=True):
            if child.tag in ("ul", "ol"):
                nested.append(child)
            elif child.tag == "-text":
                own.append(child.text(deep=False) or "")
            elif child.tag == "br":
                own.append(" ")
            elif not child.tag.startswith("-") and not _is_boilerplate(child, in_article):
                inner = child.text(deep=True) or ""
                # Inline markup joins its neighbours; block children are separate words.
                own.append(inner if child.tag in _INLINE_TAGS else f" {inner} ")
        self.emit("list_item", "".join(own))
        for sub in nested:
            self.walk(sub, in_article)


def parse_html(original: str) -> list[Block]:
    tree = LexborHTMLParser(original)
    root = tree.body or tree.root
    if root is None:
        return []
    walker = _Walker(original)
    walker.walk(root)
    return walker.out.blocks
