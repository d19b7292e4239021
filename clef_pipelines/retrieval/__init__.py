"""Query-time retrieval: recall, the Clef stages that steer it, compaction and answers.

Public API (imported lazily so `import clef_pipelines.retrieval.config` stays light):
`Retriever`, `RetrievalResult`, `compact`, `acompact`, `AnswerResult`.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Retriever": "clef_pipelines.retrieval.retriever",
    "RetrievalResult": "clef_pipelines.retrieval.result",
    "compact": "clef_pipelines.retrieval.compaction",
    "acompact": "clef_pipelines.retrieval.compaction",
    "AnswerResult": "clef_pipelines.retrieval.answer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clef_pipelines.retrieval' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
