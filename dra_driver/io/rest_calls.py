"""Kubernetes API calls on plain JSON through the `kubernetes` library's own ApiClient (its TLS, credentials
and connection pool), without its typed API classes.

Why: importing `kubernetes.client.CoreV1Api` builds the pydantic models of every core type it names, about
1.7 CPU-s (`ResourceV1Api` 0.35 s) — paid again by every process that starts: a node daemon, a kubelet
stand-in, a CLI call. A caller names the path (a template of api_objects.py) and gets the body back as a
dict. Errors stay the library's: `ApiException` for a status outside 2xx (what the typed calls raise),
urllib3's `HTTPError` for a broken connection; the caller translates them at its edge.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from dra_driver.io.api_objects import Json

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"  # a list of operations
MAX_LINE = 4 * 1024 * 1024  # one watch event: an object, which etcd bounds at 1.5 MiB
_AUTH = ["BearerToken"]  # what every typed call names: the bearer token, where the kubeconfig has one


class RestCalls:
    """GET, LIST, WATCH, POST, PUT, PATCH and DELETE of API paths, JSON in and out."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    def _send(
        self,
        method: str,
        resource_path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(
            method=method,
            resource_path=resource_path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params=headers,
            body=body,
            auth_settings=_AUTH,
        )
        answer: Any = self._api.call_api(*request, _request_timeout=timeout)
        if not 200 <= answer.status <= 299:
            text = bytes(answer.read() or b"").decode(errors="replace")
            raise ApiException.from_response(http_resp=answer, body=text, data=None)
        return answer

    def _json(self, method: str, resource_path: str, **kwargs: Any) -> Json:
        answer = self._send(method, resource_path, **kwargs)
        return _object(answer.read() or b"{}", status=answer.status)

    def get(self, resource_path: str, **query: Any) -> Json:
        """An object, or a list (`items`, `metadata.resourceVersion`) when the path names a collection."""
        return self._json("GET", resource_path, query=query)

    def create(self, resource_path: str, body: Mapping[str, Any]) -> Json:
        return self._json("POST", resource_path, body=body)

    def replace(self, resource_path: str, body: Mapping[str, Any]) -> Json:
        """PUT: the whole object, refused (409) unless its metadata.resourceVersion is still current."""
        return self._json("PUT", resource_path, body=body)

    def patch(
        self,
        resource_path: str,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        content_type: str = MERGE_PATCH,
        **query: Any,
    ) -> Json:
        """A merge patch (an object), or a JSON patch (a list of operations, content_type JSON_PATCH)."""
        return self._json("PATCH", resource_path, body=body, content_type=content_type, query=query)

    def delete(self, resource_path: str, body: Mapping[str, Any] | None = None) -> Json:
        return self._json("DELETE", resource_path, body=body)

    def watch(self, resource_path: str, *, timeout_s: int, **query: Any) -> Generator[Json, None, None]:
        """The watch's events (`type`, `object`) until the server ends it after `timeout_s`; the connection
        goes back to the pool when the iterator ends or is closed. An event longer than MAX_LINE ends it
        with an ApiException."""
        answer = self._send(
            "GET",
            resource_path,
            query={**query, "watch": "true", "timeoutSeconds": timeout_s},
            timeout=timeout_s + 10,
        )
        response = answer.response
        try:
            for line in _lines(response, status=answer.status):
                yield _object(line, status=answer.status)
        finally:
            response.close()
            response.release_conn()


def status_message(e: ApiException) -> str:
    """What a refused call says, for a log line or an error: the API server's own message in the Status body
    (what kubectl prints), else the HTTP reason, else the exception's first line (an empty answer, a proxy's
    page, a JSON list hold no message)."""
    message = None
    if isinstance(e.body, str):  # the client decodes the answer's bytes; None when there were none
        try:
            data = json.loads(e.body)
        except ValueError:
            data = None
        message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str) and message:
        return message
    if e.reason:
        return str(e.reason)
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _lines(response: Any, *, status: int) -> Iterator[bytes]:
    """The non-blank lines of a streamed answer, however the network cuts its chunks; bounded."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=True):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield from (line for line in lines if line.strip())
        if len(buffer) > MAX_LINE:
            raise ApiException(status=status, reason=f"a watch event longer than {MAX_LINE} bytes")
    if buffer.strip():
        yield buffer


def _object(raw: str | bytes, *, status: int) -> Json:
    """The JSON object an answer (or a watch's line) holds; anything else (a proxy's HTML page, a list) is the
    ApiException a caller already handles, not a ValueError that would end its thread."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ApiException(status=status, reason=f"the answer is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ApiException(status=status, reason=f"the answer is a JSON {type(data).__name__}, not an object")
    return data
