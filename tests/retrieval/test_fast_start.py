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
