"""A faster cold start for the query path: LanceDB without its REST namespace client.

`import lancedb` imports `lance_namespace`, which imports the generated REST client
`lance_namespace_urllib3_client`; that package's `__init__` builds about 375 pydantic-validated
API methods that a local (embedded) database never calls, which costs 1 to 1.5 s of CPU here,
the largest single part of a cold `clef-pipelines query`. `defer_package` registers the package
so that its submodules (the models LanceDB does use) import normally, and its own `__init__`
runs only when someone first reads an attribute of the package itself (e.g. `ApiClient` for
a REST namespace). Nothing changes for code that uses the REST client; it just pays later.
"""

from __future__ import annotations

import importlib.util
import sys
import types

LANCE_REST_CLIENT = "lance_namespace_urllib3_client"


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
