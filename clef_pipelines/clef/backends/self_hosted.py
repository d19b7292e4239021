"""`self-hosted`: any `POST {base}/v1/systemone` answering the plain body, optional bearer key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clef_pipelines.clef.backends.http import HttpBackend, error_for_status

if TYPE_CHECKING:
    from clef_pipelines.clef.wire import SystemOneRequest


def _detail(data: Any, fallback: str) -> str:
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            field = err.get("field")
            msg = str(err.get("message") or err)
            return f"{field}: {msg}" if field and field not in msg else msg
        if err:
            return str(err)
        if data.get("detail"):
            return str(data["detail"])
    return fallback


class SelfHostedBackend(HttpBackend):
    name = "self-hosted"

    def __init__(self, model: str, *, base_url: str, api_key: str | None, **kw: Any) -> None:
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        super().__init__(model, url=base_url.rstrip("/") + "/v1/systemone", headers=headers, **kw)
        self.base_url = base_url.rstrip("/")

    async def send(self, request: SystemOneRequest) -> dict[str, Any]:
        resp, data = await self._post(request.wire())
        rid, retry_after = self._meta(resp)
        if resp.status_code != 200:
            raise error_for_status(
                resp.status_code,
                _detail(data, resp.reason_phrase or "error"),
                request_id=rid,
                retry_after=retry_after,
            )
        if not isinstance(data, dict):
            raise self._malformed(resp, rid)
        return data
