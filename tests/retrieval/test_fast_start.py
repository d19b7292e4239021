"""The query path's deferred LanceDB REST client: LanceDB still works, and the REST client
still loads when something asks for it. Runs in a fresh interpreter (a module deferred in this
one would stay deferred for every other test)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("lancedb")


def test_lancedb_works_with_the_rest_client_deferred(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from clef_pipelines.retrieval.fast_start import LANCE_REST_CLIENT, defer_package
        assert defer_package(LANCE_REST_CLIENT)
        import lancedb
        pkg = sys.modules[LANCE_REST_CLIENT]
        assert "ApiClient" not in pkg.__dict__  # the package __init__ has not run
        db = lancedb.connect({str(tmp_path)!r})
        t = db.create_table("t", data=[{{"id": "a", "vector": [0.1, 0.2]}}])
        assert t.search([0.1, 0.2]).limit(1).to_list()[0]["id"] == "a"
        from lance_namespace_urllib3_client import ApiClient  # loads on demand
        assert ApiClient.__name__ == "ApiClient"
        assert not defer_package(LANCE_REST_CLIENT)  # already imported: left alone
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_store_opened_quickly_works_without_pandas_and_pandas_still_imports_later(
    tmp_path: Path,
) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from clef_pipelines.retrieval.fast_start import quick_store_import
        with quick_store_import():
            import lancedb
            import httpx
            db = lancedb.connect({str(tmp_path)!r})
        assert "pandas" not in sys.modules and "polars" not in sys.modules
        assert "httpx._main" not in sys.modules and httpx.AsyncClient  # its CLI only
        t = db.create_table("t", data=[{{"id": "a", "vector": [0.1, 0.2]}}])
        assert t.search([0.1, 0.2]).where("id = 'a'").limit(1).to_list()[0]["id"] == "a"
        from pydantic import BaseModel
        assert "defer_build" not in BaseModel.model_config  # restored
        import pandas  # not hidden outside the block
        if sys.version_info < (3, 12):
            # LanceDB's overrides were marked, not checked; the checking decorator is back.
            import overrides
            from lancedb.db import LanceDBConnection
            assert LanceDBConnection.open_table.__override__ is True
            assert overrides.override.__module__ == "overrides.overrides"
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_query_imports_no_heavy_package_it_does_not_need(tmp_path: Path) -> None:
    """What a cold `query` imports stays lean: no torch, sentence-transformers, Dagster,
    polars or pandas (timings are for `python -m bench run cold_query`, never for a test)."""
    code = textwrap.dedent(
        """
        import sys
        import clef_pipelines.cli.main  # every command module registers itself
        from clef_pipelines.config import settings_from_dict
        from clef_pipelines.retrieval.fast_start import quick_store_import
        from clef_pipelines.retrieval.retriever import Retriever
        settings = settings_from_dict({"data_dir": sys.argv[1], "clef": {"backend": "off"}})
        with quick_store_import():
            r = Retriever(settings)
        r.close()
        heavy = {"torch", "sentence_transformers", "dagster", "polars", "pandas", "transformers"}
        print(sorted(heavy & {m.split(".")[0] for m in sys.modules}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
