"""A small synchronous HTTP client of the service, for the command line's ``--url`` mode.

It imports httpx (when a client is made: an embedded command, which imports this module for its
options, never does) and the standard library only: a command that talks to a running service starts
in a fraction of a second, without the engine or the embedding model.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..errors import RecallError
from .wire import EXTRAS

#: the environment variables the command line reads for ``--url`` and ``--api-key``
URL_ENV = "HINDSIGHT_RECALL_URL"
API_KEY_ENV = "HINDSIGHT_RECALL_API_KEY"


class ServiceCallError(RecallError):
    """The service answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status, self.code = status, code


class ServiceClient:
    """Calls to one service.

    :param url: the service's base URL, e.g. ``http://127.0.0.1:8888``.
    :param api_key: sent as ``Authorization: Bearer <key>`` when given.
    :param timeout: seconds per request.
    """

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 300) -> None:
        import httpx

        # this project's own fields and error codes (forget branches on ``memory_not_found``)
        headers = {**EXTRAS, **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """One request; the decoded JSON answer, or :class:`ServiceCallError` with the service's message."""
        import httpx

        try:
            response = self.http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise ServiceCallError(f"cannot reach the service at {self.url}: {exc} (check --url / {URL_ENV})") from None
        if response.is_success:
            return response.json()
        try:
            error = response.json()
        except ValueError:
            error = {}
        message = error.get("message") or error.get("detail") or response.text or response.reason_phrase
        raise ServiceCallError(f"{response.status_code} {message}", response.status_code, error.get("code", ""))

    @staticmethod
    def bank_path(bank_id: str, rest: str = "") -> str:
        return f"/v1/default/banks/{quote(bank_id, safe='')}{rest}"

    def recall(self, bank_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", self.bank_path(bank_id, "/memories/recall"), body)  # type: ignore[no-any-return]

    def import_memories(self, memories: list[dict[str, Any]]) -> dict[str, Any]:
        return self.call("POST", "/v1/default/memories/import", {"memories": memories})  # type: ignore[no-any-return]

    def list_banks(self) -> list[dict[str, Any]]:
        return self.call("GET", "/v1/default/banks", params={"limit": 1_000_000})["banks"]  # type: ignore[no-any-return]

    def bank_stats(self, bank_id: str) -> dict[str, Any]:
        return self.call("GET", self.bank_path(bank_id, "/stats"))  # type: ignore[no-any-return]

    def delete_bank(self, bank_id: str) -> dict[str, Any]:
        return self.call("DELETE", self.bank_path(bank_id))  # type: ignore[no-any-return]

    def forget(self, bank_id: str, memory_id: str) -> bool:
        """Remove one memory; False when the bank has no such memory."""
        try:
            self.call("DELETE", self.bank_path(bank_id, f"/memories/{quote(memory_id, safe='')}"))
        except ServiceCallError as exc:
            if exc.code == "memory_not_found":
                return False
            raise
        return True

    def bank_config(self, bank_id: str, updates: dict[str, Any] | None = None) -> dict[str, Any]:
        if updates:
            body = self.call("PATCH", self.bank_path(bank_id, "/config"), {"updates": updates})
        else:
            body = self.call("GET", self.bank_path(bank_id, "/config"))
        return body["overrides"]  # type: ignore[no-any-return]
