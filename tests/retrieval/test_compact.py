"""`compact()` on its own (no store) and `clef-pipelines compact`."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.cli.main import app
from clef_pipelines.retrieval import compact
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import CONFLICT, PASSAGES, PLANTED, QUERY, judge

runner = CliRunner()


def clef_for(fake: FakeServer) -> ClefConfig:
    return ClefConfig(
        backend="self-hosted", base_url=fake.base_url, api_key_env="CLEF_TEST_KEY", cache=False
    )


def test_compact_drops_with_reasons_and_fills_budget(fake: FakeServer, monkeypatch: Any) -> None:
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    fake.answer_with(judge())
    items = [{"id": f"d{i}", "text": t, "source_uri": f"doc{i}.md"} for i, t in enumerate(PASSAGES)]
    res = compact(QUERY, items, token_budget=45, clef=clef_for(fake))
    reasons = {c.id: c.reason for c in res.dropped}
    assert reasons["d1"] == "instructs_ai"  # unknown provenance: always asked
    assert reasons["d5"] == "irrelevant"  # billing
    assert "over_budget" in reasons.values()
    kept = [*res.passages, *res.conflicts]
    assert sum(c.tokens for c in kept) <= 45
    assert res.passages[0].id == "d0" and res.passages[0].text == PASSAGES[0]  # verbatim
    assert res.tokens.before > res.tokens.after > 0
    assert res.tokens.saved_fraction == round(1 - res.tokens.after / res.tokens.before, 4)
    assert res.clef_requests == 1 and len(fake.requests) == 1  # 40 questions, one request
    assert PLANTED not in res.to_prompt()
    d = res.to_dict()
    assert d["tokens"]["budget"] == 45 and d["trace"]["clef_requests"] == 1


def test_compact_cli(fake: FakeServer, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    monkeypatch.chdir(tmp_path)
    fake.answer_with(judge())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "clef:\n  backend: self-hosted\n"
        f"  base_url: {fake.base_url}\n  api_key_env: CLEF_TEST_KEY\n  cache: false\n"
    )
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in PASSAGES))
    out = runner.invoke(
        app, ["compact", "-q", QUERY, "-i", "p.jsonl", "--budget", "200", "--json", "-c", str(cfg)]
    )
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["query"] == QUERY
    assert CONFLICT in [c["text"] for c in d["conflicts"]]
    assert {x["reason"] for x in d["dropped"]} >= {"instructs_ai", "irrelevant"}
    human = runner.invoke(
        app, ["compact", "-q", QUERY, "-d", PASSAGES[0], "-d", PLANTED, "-c", str(cfg)]
    )
    assert human.exit_code == 0, human.output
    assert "instructs_ai" in human.output
    empty = runner.invoke(app, ["compact", "-q", QUERY, "-c", str(cfg)])
    assert empty.exit_code == 2 and "no passages" in empty.output


#: What a cold `compact` must not import: no store client, no embedder, no Dagster; and, on
#: its fast path (`cli.compact_cmd`), no typer or rich (`--json` prints no rich text), no
#: HTTP/2 or httpx command-line packages, and no event-loop HTTP (sniffio; anyio's backends
#: are checked in the test: Clef's request goes out from a thread).
COMPACT_NEVER_IMPORTS = {
    "sniffio",
    "typer",
    "click",
    "rich",
    "pygments",
    "h2",
    "dotenv",
    "lancedb",
    "qdrant_client",
    "psycopg",
    "sentence_transformers",
    "torch",
    "transformers",
    "dagster",
    "numpy",
    "pandas",
    "pyarrow",
}


def test_cold_compact_cli_imports_no_store_embedder_or_dagster(
    fake: FakeServer, tmp_path: Any, monkeypatch: Any
) -> None:
    """The `compact` command run whole in a fresh interpreter (the console script's module,
    Clef on against the fake server) leaves no store, embedder or Dagster in `sys.modules`,
    nor typer, the other commands or the settings sections it does not read; without a
    config file (Clef from CLEF_BASE_URL), no YAML either.
    Its timings are for `python -m bench run compact`, never for a test."""
    import subprocess
    import sys
    import textwrap

    fake.answer_with(judge())
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"data_dir: {tmp_path / 'state'}\n"
        "clef:\n  backend: self-hosted\n"
        f"  base_url: {fake.base_url}\n  api_key_env: CLEF_TEST_KEY\n  cache: false\n"
    )
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in PASSAGES))
    code = textwrap.dedent(
        """
        import json, sys
        from clef_pipelines.cli.main import app  # what the console script imports
        try:
            app(sys.argv[1:])
        except SystemExit as exc:
            assert not exc.code, exc.code
        never = set(json.loads(sys.stdin.read()))
        loaded = {m for m in sys.modules if m.split(".")[0] in never}
        loaded |= {m for m in sys.modules if m.startswith(("clef_pipelines.stores.",
            "clef_pipelines.embedding.", "clef_pipelines.jobs", "clef_pipelines.assets"))
            and m not in ("clef_pipelines.stores.base", "clef_pipelines.stores.config",
            "clef_pipelines.stores.text", "clef_pipelines.embedding.config",
            "clef_pipelines.jobs", "clef_pipelines.jobs.results")}
        # The whole settings model and the other commands stay out too.
        loaded |= {m for m in sys.modules if m in ("clef_pipelines.config",
            "clef_pipelines.cli.app", "clef_pipelines.cli.common", "clef_pipelines.api.config",
            "clef_pipelines.evals.config", "clef_pipelines.ingest.config",
            "clef_pipelines.stores.config", "clef_pipelines.embedding.config")
            or m.endswith("_cmds")}
        loaded |= {m for m in sys.modules if m.startswith(("anyio._backends", "anyio._core"))}
        print("LOADED", json.dumps(sorted(loaded)))
        """
    )
    args = ["compact", "-q", QUERY, "-i", str(tmp_path / "p.jsonl"), "--json"]
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if k not in ("CLEF_PIPELINES_CONFIG", "CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_API_TOKEN")
    }
    bare = tmp_path / "bare"  # no config file here: `.clef` and Clef's cache land in it
    bare.mkdir()
    runs = [
        (["-c", str(cfg)], {"CLEF_TEST_KEY": "test-key"}, tmp_path, COMPACT_NEVER_IMPORTS),
        ([], {"CLEF_BASE_URL": fake.base_url}, bare, COMPACT_NEVER_IMPORTS | {"yaml"}),
    ]
    for extra_args, extra_env, cwd, never in runs:
        fake.token = extra_env.get("CLEF_TEST_KEY")  # without a config file, no key to send
        before = len(fake.requests)
        out = subprocess.run(
            [sys.executable, "-c", code, *args, *extra_args],
            input=json.dumps(sorted(never)),
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, **extra_env},
            cwd=cwd,
        )
        assert out.returncode == 0, out.stderr
        assert len(fake.requests) > before  # Clef answered: the command did its work
        loaded = json.loads(out.stdout.split("LOADED", 1)[1])
        assert loaded == [], extra_args


def test_preview_chars_sends_the_head_of_each_passage_and_keeps_it_whole(
    fake: FakeServer, monkeypatch: Any
) -> None:
    from clef_pipelines.retrieval.config import RetrievalConfig
    from clef_pipelines.steering.classify import preview

    monkeypatch.setenv("CLEF_TEST_KEY", "test-key")
    tail = " Later sentences hold the finding: uploads are capped at 5 MB/s." * 4
    items = [{"id": f"d{i}", "text": t + tail} for i, t in enumerate(PASSAGES[:3])]
    seen: list[str] = []

    def reader(qid: str, question: dict[str, Any], state: Any) -> Any:
        from tests.retrieval.conftest import text_of

        seen.append(text_of(question, state))
        return 0.02 if qid.endswith(("instructs_ai", "contradicts_query_premise")) else 0.9

    fake.answer_with(reader)
    cfg = RetrievalConfig.model_validate({"compact": {"preview_chars": 100}})
    res = compact(QUERY, items, config=cfg, clef=clef_for(fake))
    assert seen and all(len(t) <= 100 for t in seen)
    assert {preview(i["text"], 100) for i in items} == set(seen)
    assert {c.text for c in [*res.passages, *res.conflicts]} <= {i["text"] for i in items}
    assert res.passages and all(len(c.text) > 100 for c in res.passages)  # never cut
    assert preview("word " * 40, 64).endswith("word") and preview("short", 64) == "short"
