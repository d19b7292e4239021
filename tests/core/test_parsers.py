"""Each parser on small inline documents: block kinds, heading paths, exact offsets."""

from __future__ import annotations

import pytest

from clef_pipelines.parsing.html import parse_html
from clef_pipelines.parsing.markdown import parse_markdown
from clef_pipelines.parsing.models import Block
from clef_pipelines.parsing.rst import parse_rst
from clef_pipelines.parsing.text import parse_text

MD = """---
title: ignored front matter
---
# Guide

Northwind Sync keeps *folders* in step
across devices.

## Auth

### Tokens

Tokens expire after one hour.

- create a token
- revoke a token
  - nested revoke note

| Scope | Meaning |
|-------|---------|
| read  | list files |

```bash
nw token create --scope read
```

> Never share a token.

## Limits

    indented code
"""


def _kinds(blocks: list[Block]) -> list[str]:
    return [b.kind for b in blocks]


def _assert_offsets(original: str, blocks: list[Block]) -> None:
    """Every block's span is in range, ordered, and holds the block text (or its source)."""
    last = -1
    for b in blocks:
        assert 0 <= b.char_start < b.char_end <= len(original), b
        assert b.char_start >= last, "blocks out of document order"
        last = b.char_start
        span = original[b.char_start : b.char_end]
        if b.verbatim:
            assert span == b.text
        else:
            # The source span holds the text once markup (markers, fences, indentation) is
            # removed: every line of the text occurs in it.
            for line in b.text.splitlines():
                if b.kind != "table":
                    assert line.strip() in span, (line, span)


def test_markdown_blocks_and_heading_paths() -> None:
    blocks = parse_markdown(MD)
    assert _kinds(blocks) == [
        "heading", "paragraph", "heading", "heading", "paragraph",
        "list_item", "list_item", "list_item", "table", "code", "quote", "heading", "code",
    ]  # fmt: skip
    by_text = {b.text: b for b in blocks}
    assert by_text["Tokens"].heading_path == ["Guide", "Auth", "Tokens"]
    assert by_text["Tokens"].level == 3
    assert by_text["Tokens expire after one hour."].heading_path == ["Guide", "Auth", "Tokens"]
    assert by_text["Limits"].heading_path == ["Guide", "Limits"]
    assert by_text["indented code"].heading_path == ["Guide", "Limits"]
    assert "ignored front matter" not in " ".join(b.text for b in blocks)
    table = next(b for b in blocks if b.kind == "table")
    assert table.text.splitlines()[0] == "| Scope | Meaning |"
    assert "| read | list files |" in table.text
    code = next(b for b in blocks if b.kind == "code")
    assert code.text == "nw token create --scope read"
    assert next(b for b in blocks if b.kind == "quote").text == "Never share a token."
    assert [b.order for b in blocks] == list(range(len(blocks)))


def test_markdown_offsets_exact() -> None:
    blocks = parse_markdown(MD)
    _assert_offsets(MD, blocks)
    para = blocks[1]
    assert MD[para.char_start : para.char_end] == (
        "Northwind Sync keeps *folders* in step\nacross devices."
    )
    code = next(b for b in blocks if b.kind == "code")
    assert MD[code.char_start : code.char_end].startswith("```bash")
    heading = next(b for b in blocks if b.text == "Tokens")
    assert MD[heading.char_start : heading.char_end] == "### Tokens"


def test_markdown_crlf_offsets() -> None:
    src = "# A\r\n\r\nFirst para.\r\n\r\n## B\r\n\r\nSecond para.\r\n"
    blocks = parse_markdown(src)
    _assert_offsets(src, blocks)
    assert src[blocks[-1].char_start : blocks[-1].char_end] == "Second para."


TXT = """Northwind Sync FAQ
==================

GENERAL

How much storage do I get?
Every plan starts with 50 GB.

Where is my data kept?
In the region you chose at sign-up.

Billing
-------

- Monthly invoices
- Annual discount of 15%
"""


def test_text_blocks_headings_and_offsets() -> None:
    blocks = parse_text(TXT)
    assert _kinds(blocks) == [
        "heading", "heading", "paragraph", "paragraph", "heading", "list_item", "list_item",
    ]  # fmt: skip
    assert blocks[0].text == "Northwind Sync FAQ"
    assert blocks[1].heading_path == ["Northwind Sync FAQ", "GENERAL"]
    assert blocks[4].heading_path == ["Northwind Sync FAQ", "Billing"]
    assert blocks[2].text == "How much storage do I get?\nEvery plan starts with 50 GB."
    _assert_offsets(TXT, blocks)
    for b in blocks:
        if b.kind != "heading":
            assert TXT[b.char_start : b.char_end] == b.text


def test_text_caps_sentence_is_not_heading() -> None:
    blocks = parse_text(
        "NOTE: THIS IS A SHOUTED SENTENCE THAT GOES ON AND ON AND ON FOR A LONG WHILE.\n"
    )
    assert _kinds(blocks) == ["paragraph"]


RST = """==============
Northwind Sync
==============

Sync keeps folders identical.

Installation
============

Run the installer::

    sudo nw-install --channel stable

Then check the version.

.. code-block:: python

    import northwind
    print(northwind.__version__)

* Windows 11
* macOS 14 and
  later

Tokens
------

Tokens expire after one hour.

.. note:: Rotate tokens monthly.

.. image:: diagram.png

    :alt: the image body belongs to the directive

Closing words.

    An indented quote.
"""


def test_rst_blocks_and_levels() -> None:
    blocks = parse_rst(RST)
    assert _kinds(blocks) == [
        "heading", "paragraph", "heading", "paragraph", "code", "paragraph", "code",
        "list_item", "list_item", "heading", "paragraph", "paragraph", "paragraph", "quote",
    ]  # fmt: skip
    heads = [b for b in blocks if b.kind == "heading"]
    assert [(h.text, h.level) for h in heads] == [
        ("Northwind Sync", 1), ("Installation", 2), ("Tokens", 3),
    ]  # fmt: skip
    assert heads[2].heading_path == ["Northwind Sync", "Installation", "Tokens"]
    assert blocks[3].text == "Run the installer:"
    assert blocks[4].text == "sudo nw-install --channel stable"
    assert blocks[6].text == "import northwind\nprint(northwind.__version__)"
    assert blocks[8].text == "macOS 14 and\nlater"
    assert blocks[11].text == "Rotate tokens monthly."
    joined = " ".join(b.text for b in blocks)
    assert "diagram.png" not in joined and "image body" not in joined
    assert blocks[-1].text == "An indented quote."


def test_rst_offsets_exact() -> None:
    blocks = parse_rst(RST)
    _assert_offsets(RST, blocks)
    para = blocks[1]
    assert para.verbatim and RST[para.char_start : para.char_end] == para.text


HTML = """<!doctype html>
<html><head><title>Selective sync</title><style>body{color:red}</style>
<script>track()</script></head>
<body>
<header class="site-header"><a href="/">Northwind</a> <a href="/login">Log in</a></header>
<div id="cookie-consent" class="banner"><p>We use cookies to improve your experience.</p>
<button>Accept all</button></div>
<nav><ul><li><a href="/docs">Docs</a></li><li><a href="/pricing">Pricing</a></li>
<li>Excluded folders stay in the cloud</li><li><a href="/sel">Selective sync</a></li></ul></nav>
<div class="breadcrumbs">Home / Docs / Sync</div>
<main>
<h1>Selective sync</h1>
<p>Selective sync lets you choose which folders stay <em>on this device</em>.</p>
<h2>Rules</h2>
<ul><li>Excluded folders stay in the cloud<ul><li>and can be restored</li></ul></li></ul>
<table><tr><th>Plan</th><th>Folders</th></tr><tr><td>Free</td><td>3</td></tr></table>
<pre><code>nw sync --exclude Videos
</code></pre>
<blockquote>Sync what you need, keep the rest safe.</blockquote>
</main>
<aside>Related articles</aside>
<footer>&copy; 2026 Northwind</footer>
</body></html>
"""


def test_html_drops_boilerplate_and_keeps_content() -> None:
    blocks = parse_html(HTML)
    text = "\n".join(b.text for b in blocks)
    for junk in (
        "cookies",
        "Accept all",
        "Pricing",
        "Log in",
        "Home / Docs",
        "Related",
        "2026",
        "track()",
        "color:red",
    ):
        assert junk not in text, junk
    assert _kinds(blocks) == [
        "heading", "paragraph", "heading", "list_item", "list_item", "table", "code", "quote",
    ]  # fmt: skip
    assert blocks[1].text == "Selective sync lets you choose which folders stay on this device."
    assert blocks[3].text == "Excluded folders stay in the cloud"
    assert blocks[4].text == "and can be restored"
    assert blocks[5].text == "| Plan | Folders |\n| --- | --- |\n| Free | 3 |"
    assert blocks[6].text.strip() == "nw sync --exclude Videos"
    assert blocks[3].heading_path == ["Selective sync", "Rules"]


def test_html_offsets_best_effort() -> None:
    import html as html_lib
    import re

    blocks = parse_html(HTML)
    for b in blocks:
        assert b.char_start >= 0, b  # every block of this page is found
        span = HTML[b.char_start : b.char_end]
        if b.kind == "table":
            assert span.startswith("<table") and span.endswith("</table>")
            continue
        # With tags removed and entities decoded, the source span reads as the block text.
        visible = " ".join(html_lib.unescape(re.sub(r"<[^>]*>", "", span)).split())
        assert visible == " ".join(b.text.split()), (b.text, span)
    # The nav link and <title> with the same words do not claim the heading's offsets.
    assert blocks[0].char_start == HTML.index("Selective sync</h1>")
    assert blocks[3].char_start > HTML.index("<main>")


def test_html_wrapper_with_boilerplate_word_keeps_content() -> None:
    page = (
        '<body><div class="page has-sidebar"><aside class="sidebar">Links</aside>'
        "<main><h1>Title</h1><p>Line one<br>line two</p></main></div></body>"
    )
    blocks = parse_html(page)
    assert [b.text for b in blocks] == ["Title", "Line one line two"]


@pytest.mark.parametrize("parse", [parse_markdown, parse_text, parse_rst, parse_html])
def test_blank_input_gives_no_blocks(parse) -> None:  # type: ignore[no-untyped-def]
    assert parse("\n  \n") == []


def test_rst_doctest_blocks_are_code_not_quotes() -> None:
    """An interactive session (first line `>>>`) is code, indented or not, as docutils reads
    it; other indented text stays a quote."""
    from clef_pipelines.parsing.rst import parse_rst

    doc = (
        "Fix code like this:\n\n    >>> import autopep8\n    >>> autopep8.fix_code('x')\n"
        "    'x'\n\n>>> fix('a')\n'a'\n\nA quote follows:\n\n    Simple is better than complex.\n"
    )
    kinds = [(b.kind, b.text.splitlines()[0]) for b in parse_rst(doc)]
    assert kinds == [
        ("paragraph", "Fix code like this:"),
        ("code", ">>> import autopep8"),
        ("code", ">>> fix('a')"),
        ("paragraph", "A quote follows:"),
        ("quote", "Simple is better than complex."),
    ]


MYST = """# Install

(install-label)=
## Steps

```{note}
Run the installer as root.
```

:::{warning} Mind the disk
:class: dropdown
The cache fills the disk.
:::

````{tip}
Check the version first:
```python
print(version())
```
````

```{code-block} python
:linenos:
x = 1
```

See {ref}`the upgrade guide <upgrade>` and {doc}`setup`.

```{toctree}
:maxdepth: 2
intro
usage
```
"""


def test_myst_directives_roles_and_labels_leave_no_markup_in_blocks() -> None:
    blocks = parse_markdown(MYST)
    got = [(b.kind, b.text) for b in blocks if b.kind != "heading"]
    assert got == [
        ("paragraph", "Run the installer as root."),
        ("paragraph", "Mind the disk"),
        ("paragraph", "The cache fills the disk."),
        ("paragraph", "Check the version first:"),
        ("code", "print(version())"),
        ("code", "x = 1"),
        ("paragraph", "See the upgrade guide and setup."),
    ]
    # The label line is gone, not a paragraph; headings and paths are as without MyST.
    assert [b.heading_path for b in blocks][-1] == ["Install", "Steps"]
    for b in blocks:
        span = MYST[b.char_start : b.char_end]
        assert all(word.strip(".:") in span for word in b.text.split()), (b.text, span)


def test_myst_in_chunks_leaves_no_stray_backticks_or_braces() -> None:
    from clef_pipelines.chunking import chunk_blocks
    from clef_pipelines.config import ChunkingConfig

    cfg = ChunkingConfig(min_tokens=1, target_tokens=400, max_tokens=800, overlap_tokens=0)
    chunks = chunk_blocks(parse_markdown(MYST), "Install", "i", cfg)
    text = "\n".join(c.text for c in chunks)
    for stray in ("{", "}", ":::", "````", ":linenos:", ":maxdepth:", "intro\nusage", ")="):
        assert stray not in text, stray
    # The only backticks left are the fences the chunker puts around each code block.
    assert text.count("```") == 4


def test_plain_markdown_is_not_rewritten_as_myst() -> None:
    from clef_pipelines.parsing.myst import rewrite_myst

    plain = "# T\n\nA set {a, b} and `code` and f(x)=1.\n\n```{r}\nplot(x)\n```\n"
    assert rewrite_myst(plain) == plain.replace("```{r}", "```r")
    blocks = parse_markdown(plain)
    assert [b.text for b in blocks][1:] == ["A set {a, b} and `code` and f(x)=1.", "plot(x)"]
