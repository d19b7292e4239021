"""The offline injection guard at run time: the model (``model``), its tuned MiniLM layers
(``encoder``), the decoding of hidden text (``deobfuscate``), the language gate
(``language``), its settings (``config``), loading once per process (``loading``), and the
check of given files or quarantined records (``check``). ``weights.npz`` and
``MODEL_CARD.md`` ship beside them; training lives in the repository's ``lab/guard/``.

Nothing here is imported by the package's ``__init__``: importing the guard costs numpy work
and, on first score, MiniLM.
"""
