"""Any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, Ollama, TEI, LiteLLM ...)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from clef_pipelines.embedding.base import Embedder, EmbedderError
from clef_pipelines.redact import secret_from_env

_RETRY_STATUS = {408, 429, 500, 502, 503, 504, 529}


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in _RETRY_STATUS


class OpenAIEmbedder(Embedder):
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimension: int | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        super().__init__()
        if not base_url or not model:
            raise EmbedderError("embedder.kind 'openai' needs embedder.base_url and embedder.model")
        headers = {}
        if api_key_env:
            key = secret_from_env(api_key_env)
            if not key:
                raise EmbedderError(
                    f"embedder.api_key_env names {api_key_env}, which is not set in the environment"
                )
            headers["Authorization"] = f"Bearer {key}"
        self.model = model
        self.name = f"openai:{model}"
        self._dimension = dimension
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s
        )

    @property
    def dimension(self) -> int:  # type: ignore[override]
        if self._dimension is None:
            # Ask once: the manifest needs the size before anything is stored.
            self._dimension = int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    @retry(
        retry=retry_if_exception(_retryable),
        wait=wait_random_exponential(multiplier=0.5, max=20),
        stop=stop_after_attempt(5),
        reraise=True,
    )
    def _post(self, texts: list[str]) -> dict:
        response = self._client.post("/embeddings", json={"model": self.model, "input": texts})
        response.raise_for_status()
        return response.json()

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            body = self._post(texts)
        except httpx.HTTPStatusError as exc:
            # The provider's own words ("Incorrect API key provided") say what to fix; the key
            # it may echo is registered with the redactor (`secret_from_env`) and masked.
            said = " ".join(exc.response.text.split())[:300]
            raise EmbedderError(
                f"embedding request to {self._client.base_url} failed: HTTP "
                f"{exc.response.status_code}" + (f": {said}" if said else "")
            ) from exc
        except httpx.HTTPError as exc:
            raise EmbedderError(
                f"embedding request to {self._client.base_url} failed: {exc}"
            ) from exc
        try:
            rows = sorted(body["data"], key=lambda d: d["index"])
            out = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"malformed embeddings response: {exc}") from exc
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise EmbedderError(
                f"embeddings response has {out.shape[0]} rows for {len(texts)} texts"
            )
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._request(list(texts))

    def close(self) -> None:
        self._client.close()
