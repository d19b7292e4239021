"""A faster cold start for the query path: LanceDB without its REST namespace client, and
without pandas.

`import lancedb` imports `lance_namespace`, which imports the generated REST client
`lance_namespace_urllib3_client`; that package's `__init__` builds about 375 pydantic-validated
API methods that a local (embedded) database never calls, which costs 1 to 1.5 s of CPU here,
the largest single part of a cold `clef-pipelines query`. `defer_package` registers the package
so that its submodules (the models LanceDB does use) import normally, and its own `__init__`
runs only when someone first reads an attribute of the package itself (e.g. `ApiClient` for
a REST namespace). Nothing changes for code that uses the REST client; it just pays later.

`quick_store_import()`, around opening the store in the CLI's `query` and `ask`:

- pandas looks uninstalled (`pandas_hidden()`): `import lancedb` imports `pyarrow.dataset`, whose module init asks pyarrow's
pandas shim whether pandas is installed, which imports pandas (about 0.4 s of CPU, a tenth of
a cold query) though a query never builds a DataFrame. Inside the block pandas looks
uninstalled, so the shim records "no pandas"; afterwards pandas imports normally for anyone
who needs it (pyarrow then will not convert to or from pandas in that process). The
  `Retriever` API does not do this, since a library user may want pandas.
- pydantic models defined meanwhile (LanceDB's namespace client defines about a hundred
  request and response models it never uses on a local database) get `defer_build`: their
  validation schema is built on first use instead of at import, about 10% of `import lancedb`.
- httpx's command-line module looks uninstalled too: `import httpx` imports it only to
  offer `httpx.main` (the `httpx` command), and falls back to a stub that says to install
  `httpx[cli]` when it cannot; it costs click and pygments, about 0.07 s of CPU, when Clef is on.
- `@override` from the `overrides` package only marks the method (`overrides_unchecked()`),
  as `typing.override` does: LanceDB uses the package's checking decorator on Python < 3.12 and
  `typing.override` from 3.12 on. The check disassembles each class body's bytecode to find the
  base classes and compares signatures, for about 100 methods of `import lancedb`: about a
  seventh of the import's CPU (0.97 -> 0.83 s median here), spent checking a released library
  against itself.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

LANCE_REST_CLIENT = "lance_namespace_urllib3_client"
# `import httpx` tries its command-line tool's module (click, pygments, rich's syntax and
# progress) and falls back to a stub `httpx.main` when that import fails.
HTTPX_CLI = "httpx._main"
# httpcore imports its HTTP/2 connection (h2, hpack, hyperframe) whenever h2 is installed;
# the Clef client speaks HTTP/1.1 only, and httpcore falls back to a stub without h2.
HTTP2 = ("h2", "hpack", "hyperframe")
# The Clef client's pacer; its `__init__` reads its version with importlib.metadata.
PACER_PACKAGE = "aiolimiter"


class _DeferredPackage(types.ModuleType):
    """A package whose `__init__` runs on first attribute access."""

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__") or self.__dict__.get("_clef_init_done"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        self.__dict__["_clef_init_done"] = True
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(self)
        return getattr(self, attr)


def defer_package(name: str) -> bool:
    """Register `name` deferred unless it is imported already; True when deferred."""
    if name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return False
    module = _DeferredPackage(name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__file__ = spec.origin
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    sys.modules[name] = module
    return True


class _Hidden:
    """A meta path finder under which the named modules (and their submodules) look
    uninstalled."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@contextmanager
def pandas_hidden() -> Iterator[None]:
    """pandas, and httpx's command-line module, look uninstalled inside the block, unless
    something imported them already."""
    hidden = [m for m in ("pandas", HTTPX_CLI) if m not in sys.modules]
    if not hidden:
        yield
        return
    finder = _Hidden(*hidden)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@contextmanager
def quick_clef_import() -> Iterator[None]:
    """The Clef client's imports on a cold `compact` path: httpx's command-line module (click,
    rich, pygments) and the HTTP/2 packages look uninstalled inside the block, unless
    something imported them already. A one-shot process that only talks HTTP/1.1 to Clef
    never needs them. aiolimiter's package `__init__` is deferred (`defer_package`): it only
    reads the package's own version from the installed metadata, which imports
    `importlib.metadata` (email, csv, zipfile) and scans the distributions; the client imports
    `aiolimiter.leakybucket` itself."""
    defer_package(PACER_PACKAGE)
    hidden = [m for m in (HTTPX_CLI, *HTTP2) if m not in sys.modules]
    finder = _Hidden(*hidden)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def _mark_override(method: Any = None, **_checks: Any) -> Any:
    """`typing.override` (Python 3.12): mark the method as an override, check nothing."""
    if method is None:  # used as @override(check_signature=...)
        return _mark_override
    # An object that takes no attributes stays unmarked, as with typing.override.
    with suppress(AttributeError, TypeError):
        method.__override__ = True
    return method


@contextmanager
def overrides_unchecked() -> Iterator[None]:
    """Inside the block `overrides.override` marks without checking (see the module
    docstring); modules imported meanwhile keep that decorator, others get the original."""
    if sys.version_info >= (3, 12):  # LanceDB uses typing.override there
        yield
        return
    try:
        import overrides
    except ImportError:
        yield
        return
    original = overrides.override
    overrides.override = _mark_override
    try:
        yield
    finally:
        overrides.override = original


@contextmanager
def quick_store_import() -> Iterator[None]:
    """Open the store inside this block on a cold query path: see the module docstring."""
    from pydantic import BaseModel

    config = BaseModel.model_config
    had = "defer_build" in config
    config.setdefault("defer_build", True)
    try:
        with pandas_hidden(), overrides_unchecked():
            yield
    finally:
        if not had:
            config.pop("defer_build", None)
