"""The tiny release end to end: the in-process engine, the `local` backend and `serve`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from clef_pipelines.clef.backends.local import LocalBackend
from clef_pipelines.clef.client import SyncClefClient
from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.clef.engine import Engine
from clef_pipelines.clef.errors import ClefBadRequest, ClefRequestTooLarge
from clef_pipelines.clef.serve import build_app
from clef_pipelines.clef.wire import parse_request, parse_response
from tests.clef.conftest import ServedApp
from tests.clef.test_wire import body as make_body

MAX_LENGTH = 4096
KEY = "serve-key"


@pytest.fixture(scope="module")
def engine(tiny_release: Path) -> Engine:
    return Engine(tiny_release, device="cpu", max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def served(tiny_release: Path):  # type: ignore[no-untyped-def]
    backend = LocalBackend(
        "clef", release_dir=str(tiny_release), max_length=MAX_LENGTH, max_batch=8, batch_wait_ms=20
    )
    app = build_app(backend, api_key=KEY, max_body_bytes=64 * 1024)
    with ServedApp(app) as server:
        yield SimpleNamespace(url=server.base_url, backend=backend, release_dir=tiny_release)


def post(url: str, payload, *, key: str | None = KEY, raw: bytes | None = None) -> httpx.Response:  # type: ignore[no-untyped-def]
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    if raw is not None:
        return httpx.post(url + "/v1/systemone", content=raw, headers=headers, timeout=60)
    return httpx.post(url + "/v1/systemone", json=payload, headers=headers, timeout=60)


# ---- the engine ----------------------------------------------------------------------


def test_engine_matches_the_release_code(engine: Engine) -> None:
    """Our loader + batching path gives what the release's own `systemone` gives."""
    req = parse_request(make_body())
    ours = engine.answer_batch([req])[0]
    processor = SimpleNamespace(tokenizer=engine.tokenizer)  # text only: no media processor
    theirs = engine.jsm.systemone(engine.model, processor, req.wire(), max_length=MAX_LENGTH)
    assert ours == theirs
    parse_response(ours, req)  # and it passes our answer checks


def test_a_batch_answers_like_single_requests(engine: Engine) -> None:
    reqs = [parse_request(make_body(state={"passage": "x" * n})) for n in (5, 300, 40)] + [
        parse_request(make_body(state="short"))
    ]
    batched = engine.answer_batch(reqs)
    for req, got in zip(reqs, batched, strict=True):
        alone = engine.answer_batch([req])[0]
        assert isinstance(got, dict)
        assert got["usage"] == alone["usage"]
        for qid, a in alone["answers"].items():
            for opt, p in a.get("probabilities", {}).items():
                assert got["answers"][qid]["probabilities"][opt] == pytest.approx(p, abs=2e-3)


def test_oversize_state_is_refused_not_truncated(engine: Engine) -> None:
    big = parse_request(make_body(state="y" * (MAX_LENGTH + 10)))
    ok = parse_request(make_body(state="fits"))
    out = engine.answer_batch([big, ok])
    assert isinstance(out[0], ClefRequestTooLarge) and out[0].field == "state"
    assert isinstance(out[1], dict)  # one bad request does not sink its batch


def test_the_whole_state_is_read(engine: Engine) -> None:
    """Two states equal for their first 2,500 tokens and different after: a backend that
    silently read a prefix would answer both the same."""
    head = "a" * 2500
    a = engine.answer_batch([parse_request(make_body(state=head + " the API is down"))])[0]
    b = engine.answer_batch([parse_request(make_body(state=head + " a billing question!"))])[0]
    assert a["usage"]["input_tokens"] > 2500
    assert a["answers"] != b["answers"]


# ---- the local backend through the client --------------------------------------------


def test_local_backend_through_the_client(tiny_release: Path, tmp_path: Path) -> None:
    cfg = ClefConfig(backend="local", release_dir=str(tiny_release), max_length=MAX_LENGTH)
    with SyncClefClient(cfg, data_dir=tmp_path) as c:
        assert c.backend.counter.exact
        out = c.ask_many([({"i": i}, make_body()["questions"]) for i in range(4)])
        assert all(not isinstance(r, Exception) for r in out)
        assert max(c.backend.batcher.batch_sizes) > 1  # concurrent asks shared a pass
        with pytest.raises(ClefRequestTooLarge):
            c.ask("z" * (MAX_LENGTH * 2), make_body()["questions"])
        snap = c.usage.snapshot()
        assert snap["cost_usd"] == 0.0 and snap["sent"] == 4
        c.ask({"i": 0}, make_body()["questions"])
        assert c.usage.cached == 1


# ---- serve over HTTP -----------------------------------------------------------------


def test_serve_answers(served) -> None:  # type: ignore[no-untyped-def]
    b = make_body()
    r = post(served.url, b)
    assert r.status_code == 200, r.text
    resp = parse_response(r.json(), parse_request(b))
    assert resp.usage.input_tokens > 0
    health = httpx.get(served.url + "/health", headers={"authorization": f"Bearer {KEY}"}).json()
    assert health["status"] == "ok" and health["engine"]["dtype"] == "float32"


@pytest.mark.parametrize("key", [None, "wrong", KEY + "x", KEY[:-1]])
def test_serve_refuses_bad_keys(served, key) -> None:  # type: ignore[no-untyped-def]
    r = post(served.url, make_body(), key=key)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"


def test_serve_http_errors(served) -> None:  # type: ignore[no-untyped-def]
    r = post(served.url, None, raw=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
    r = httpx.post(served.url + "/v2/other", json={}, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(served.url + "/v1/systemone")
    assert r.status_code == 405
    r = post(served.url, None, raw=json.dumps(make_body(state="x" * 70_000)).encode())
    assert r.status_code == 413
    r = post(served.url, [1, 2])
    assert r.status_code == 422 and r.json()["error"]["field"] == "(body)"


def test_serve_413_without_content_length(served) -> None:  # type: ignore[no-untyped-def]
    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b" " * 8192  # streamed (chunked): no content-length to trust

    r = httpx.post(
        served.url + "/v1/systemone",
        content=chunks(),
        headers={"authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert r.status_code == 413


def _invalid_cases():  # type: ignore[no-untyped-def]
    from tests.clef import test_wire

    marks = test_wire.test_every_rule_names_its_field.pytestmark
    return next(m for m in marks if m.name == "parametrize").args[1]


@pytest.mark.parametrize(("change", "field"), _invalid_cases())
def test_serve_422_names_the_field(served, change, field) -> None:  # type: ignore[no-untyped-def]
    r = post(served.url, make_body(**change))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field


def test_serve_422_for_state_over_budget_and_missing_state(served) -> None:  # type: ignore[no-untyped-def]
    r = post(served.url, make_body(state="q" * (MAX_LENGTH + 100)))
    assert r.status_code == 422 and r.json()["error"]["field"] == "state"
    b = make_body()
    del b["state"]
    r = post(served.url, b)
    assert r.status_code == 422 and r.json()["error"]["field"] == "state"


def test_images_without_an_image_processor_are_unsupported(served) -> None:  # type: ignore[no-untyped-def]
    # The tiny release ships no processor (and torchvision cannot load here): an image
    # request is refused by name instead of failing inside the engine.
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    r = post(served.url, make_body(images=[f"data:image/png;base64,{png}"]))
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {
        "code": "unsupported",
        "message": r.json()["error"]["message"],
        "field": "images",
    }
    assert post(served.url, make_body()).status_code == 200  # text still works


def test_serve_batches_concurrent_requests(served) -> None:  # type: ignore[no-untyped-def]
    async def run() -> list[int]:
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {KEY}"}, timeout=60) as c:
            rs = await asyncio.gather(
                *(
                    c.post(served.url + "/v1/systemone", json=make_body(state={"n": i}))
                    for i in range(8)
                )
            )
            return [r.status_code for r in rs]

    before = len(served.backend.batcher.batch_sizes)
    assert asyncio.run(run()) == [200] * 8
    sizes = served.backend.batcher.batch_sizes[before:]
    assert sum(sizes) == 8 and len(sizes) < 8


def test_self_hosted_client_against_serve(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = ClefConfig(
        backend="self-hosted",
        base_url=served.url,
        api_key_env="SERVE_KEY",
        release_dir=str(served.release_dir),  # its tokenizer counts exactly
        context_tokens=MAX_LENGTH,
    )
    with SyncClefClient(cfg, env={"SERVE_KEY": KEY}, data_dir=tmp_path) as c:
        resp = c.ask({"ticket": "API down"}, make_body()["questions"])
        assert set(resp.answers) == {"urgent", "team", "severity"}
        # 80 questions do not fit one 4,096-token request: split by the budget, all answered.
        many = {f"q{i}": {"type": "noul", "instructions": f"q {i}"} for i in range(80)}
        assert len(c.ask("s", many).answers) == 80
        assert c.usage.sent > 2
        with pytest.raises(ClefRequestTooLarge):  # refused before sending
            c.ask("w" * (MAX_LENGTH * 3), make_body()["questions"])
    # A client with a larger budget than the server's sends it; the server refuses it,
    # naming the state, and nothing is truncated.
    cfg = cfg.model_copy(update={"context_tokens": None, "cache": False})
    with (
        SyncClefClient(cfg, env={"SERVE_KEY": KEY}) as c,
        pytest.raises(ClefBadRequest, match="state.*never truncated"),
    ):
        c.ask("w" * (MAX_LENGTH * 3), make_body()["questions"])


def test_serve_cli_refuses_a_folder_that_is_not_a_release(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from clef_pipelines.cli.main import app

    result = CliRunner().invoke(app, ["serve", str(tmp_path)])
    assert result.exit_code == 2
    assert "joint_schema_model.py" in result.output
