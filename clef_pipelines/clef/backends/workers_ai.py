"""`workers-ai`: Cloudflare's hosted Clef. Unwraps the API envelope and maps Cloudflare's
error codes, which take precedence over the HTTP status (a 429 carrying 3036 is an exhausted
daily allocation: not retried)."""

from __future__ import annotations

from typing import Any

from clef_pipelines.clef.backends.http import HttpBackend, error_for_status
from clef_pipelines.clef.errors import (
    ClefAuthError,
    ClefBadAnswer,
    ClefBadRequest,
    ClefError,
    ClefQuotaExhausted,
    ClefServerError,
)
from clef_pipelines.clef.wire import SystemOneRequest

DEFAULT_BASE_URL = "https://api.cloudflare.com/client/v4"
# Published contexts disagree (65,536 at launch, 24,576 on one model page): take the smaller.
CONTEXT_TOKENS = 24_576

_CODE_ERRORS: dict[int, type[ClefError]] = {
    10000: ClefAuthError,  # authentication error
    5006: ClefBadRequest,  # bad input
    3036: ClefQuotaExhausted,  # daily allocation exhausted
    3040: ClefServerError,  # out of capacity: retry
}


class WorkersAIBackend(HttpBackend):
    name = "workers-ai"
    request_id_header = "cf-ray"
    context_tokens = CONTEXT_TOKENS

    def __init__(
        self, model: str, *, account_id: str, api_token: str, base_url: str | None, **kw: Any
    ) -> None:
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        url = f"{base}/accounts/{account_id}/ai/run/@cf/cloudflare/{model}"
        headers = {"authorization": f"Bearer {api_token}", "content-type": "application/json"}
        super().__init__(model, url=url, headers=headers, **kw)

    async def send(self, request: SystemOneRequest) -> dict[str, Any]:
        resp, data = await self._post(request.wire())
        rid, retry_after = self._meta(resp)
        errors = data.get("errors") if isinstance(data, dict) else None
        if isinstance(errors, list) and errors:
            first = errors[0] if isinstance(errors[0], dict) else {"message": str(errors[0])}
            code = first.get("code")
            msg = str(first.get("message") or "error")
            cls = _CODE_ERRORS.get(code) if isinstance(code, int) else None
            if cls is not None:
                raise cls(
                    f"Workers AI error {code}: {msg}",
                    status=resp.status_code,
                    code=code,
                    request_id=rid,
                    retry_after=retry_after,
                )
            if resp.status_code != 200:
                err = error_for_status(
                    resp.status_code, f"{code}: {msg}", request_id=rid, retry_after=retry_after
                )
                err.code = code
                raise err
            raise ClefError(
                f"Workers AI error {code}: {msg}", status=200, code=code, request_id=rid
            )
        if resp.status_code != 200:
            raise error_for_status(
                resp.status_code,
                resp.reason_phrase or "error",
                request_id=rid,
                retry_after=retry_after,
            )
        if not isinstance(data, dict):
            raise self._malformed(resp, rid)
        if data.get("success") is not True or not isinstance(data.get("result"), dict):
            raise ClefBadAnswer(
                "Workers AI envelope without a successful result", status=200, request_id=rid
            )
        return data["result"]
