"""Raw JSON access to the Kubernetes API over the official client's configuration and pool.

The generated typed client validates and (de)serialises every object through pydantic models,
which costs milliseconds per call; simulating thousands of nodes, or caching them in a
controller, needs plain dicts. This module keeps the official client for what it is good at
(kubeconfig loading, TLS, auth, connection pooling) and exchanges JSON directly. HTTP errors are
mapped once, here, to the project's own exception types.
"""

from __future__ import annotations

import collections
import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

JSON = dict[str, Any]
PatchType = Literal["merge", "strategic", "json", "apply"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


_RETRIES = urllib3.Retry(total=2, connect=2, read=2, status=0, redirect=0, other=0)


class KubeError(Exception):
    """The API server refused a request, or could not be reached (status 0)."""

    def __init__(self, status: int, reason: str, message: str, *, method: str, path: str,
                 causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path
        #: the messages of the Status's ``details.causes`` (e.g. the budget that refused an
        #: eviction: "The disruption budget web-pdb needs 3 healthy pods ...")
        self.causes = causes


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: an optimistic-concurrency conflict, or the object already exists (reason)."""


class Gone(KubeError):
    """410: a watch's resourceVersion is too old; list again."""


class Forbidden(KubeError):
    pass


class Unavailable(KubeError):
    """The server could not be reached, timed out or answered 5xx: worth retrying."""


def _error(status: int, reason: str, message: str, method: str, path: str,
           causes: tuple[str, ...] = ()) -> KubeError:
    kinds: dict[int, type[KubeError]] = {404: NotFound, 409: Conflict, 410: Gone, 403: Forbidden}
    kind = kinds.get(status, Unavailable if status == 0 or status >= 500 else KubeError)
    return kind(status, reason, message, method=method, path=path, causes=causes)


def _causes(status: Mapping[str, Any]) -> tuple[str, ...]:
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ()
    return tuple(str(c.get("message")) for c in causes
                 if isinstance(c, dict) and c.get("message"))


def resource_path(
    api_version: str,
    plural: str,
    name: str | None = None,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/namespaces/ns/pods/name/status`` and friends."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


class KubeApi:
    """A thread-safe JSON client for one API server identity."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api_client = api_client
        #: requests sent, by HTTP method ("WATCH" for watch streams); for benchmarks and metrics
        self.request_counts: collections.Counter[str] = collections.Counter()

    @classmethod
    def from_kubeconfig(
        cls, path: str | Path, *, context: str | None = None, pool_size: int = 32
    ) -> KubeApi:
        """A client for the kubeconfig at ``path``; ``pool_size`` bounds concurrent connections
        (size it to the number of threads that issue requests)."""
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path), context=context, client_configuration=configuration
        )
        configuration.connection_pool_maxsize = pool_size
        configuration.retries = False
        return cls(k8s_client.ApiClient(configuration))

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def typed(self) -> k8s_client.ApiClient:
        """The official client, for code that prefers typed models."""
        return self.api_client

    def close(self) -> None:
        self.api_client.rest_client.pool_manager.clear()

    # -- requests ---------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str | None,
        timeout: float | tuple[float, float] | None,
        counted_as: str | None = None,
    ) -> urllib3.BaseHTTPResponse:
        self.request_counts[counted_as or method] += 1
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        params = [(k, _query_value(v)) for k, v in (query or {}).items()]
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params or None,
            header_params=headers,
            body=None,
            auth_settings=["BearerToken"],
        )
        _, url, sent_headers, _, _ = request
        # JSON is also YAML, so server-side apply bodies go out the same way.
        encoded = None if body is None else json.dumps(body, separators=(",", ":"))
        pool = self.api_client.rest_client.pool_manager
        try:
            response: urllib3.BaseHTTPResponse = pool.request(
                method,
                url,
                body=encoded,
                headers=sent_headers,
                timeout=_timeout(timeout),
                preload_content=False,
                # Connection failures are retried; read failures only for idempotent methods.
                retries=_RETRIES,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise Unavailable(0, type(exc).__name__, str(exc), method=method, path=path) from exc
        return response

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = 30.0,
    ) -> Any:
        """One request; returns the decoded JSON body (None when empty)."""
        response = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        try:
            data = response.read()
        except urllib3.exceptions.HTTPError as exc:
            raise Unavailable(0, type(exc).__name__, str(exc), method=method, path=path) from exc
        finally:
            response.release_conn()
        decoded: Any = None
        if data:
            try:
                decoded = json.loads(data)
            except ValueError:
                decoded = {"message": data.decode("utf-8", "replace")}
        if not 200 <= response.status <= 299:
            status = decoded if isinstance(decoded, dict) else {}
            raise _error(
                response.status,
                str(status.get("reason") or response.reason or ""),
                str(status.get("message") or ""),
                method,
                path,
                _causes(status),
            )
        return decoded

    def get(self, path: str, *, query: Mapping[str, str | int | bool] | None = None) -> JSON:
        result: JSON = self.request("GET", path, query=query)
        return result

    def create(self, path: str, body: JSON) -> JSON:
        result: JSON = self.request("POST", path, body=body)
        return result

    def replace(self, path: str, body: JSON) -> JSON:
        result: JSON = self.request("PUT", path, body=body)
        return result

    def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: PatchType = "merge",
        field_manager: str | None = None,
        force: bool = False,
    ) -> JSON:
        query: dict[str, str | int | bool] = {}
        if field_manager is not None:
            query["fieldManager"] = field_manager
        if force:
            query["force"] = True
        result: JSON = self.request(
            "PATCH", path, query=query, body=body, content_type=_PATCH_CONTENT_TYPES[patch_type]
        )
        return result

    def apply(self, path: str, body: JSON, *, field_manager: str, force: bool = True) -> JSON:
        """Server-side apply of ``body`` (which names the object) under ``field_manager``."""
        return self.patch(path, body, patch_type="apply", field_manager=field_manager, force=force)

    def delete(
        self,
        path: str,
        *,
        grace_period_seconds: int | None = None,
        propagation: Literal["Orphan", "Background", "Foreground"] | None = None,
        uid: str | None = None,
        query: Mapping[str, str | int | bool] | None = None,
        missing_ok: bool = True,
    ) -> JSON | None:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation is not None:
            options["propagationPolicy"] = propagation
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        try:
            result: JSON | None = self.request("DELETE", path, body=options, query=query)
        except NotFound:
            if missing_ok:
                return None
            raise
        return result

    def list(self, path: str, *, query: Mapping[str, str | int | bool] | None = None) -> JSON:
        """A full list, following ``continue`` tokens; returns the last page's metadata with
        every item."""
        items: list[JSON] = []
        params: dict[str, str | int | bool] = {"limit": 500, **(query or {})}
        while True:
            page = self.get(path, query=params)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                page["items"] = items
                return page
            params["continue"] = token

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        query: Mapping[str, str | int | bool] | None = None,
        timeout_seconds: int = 60,
        on_open: Any = None,
    ) -> Iterator[JSON]:
        """Watch events (``{"type": ..., "object": {...}}``) from ``resource_version`` until the
        server ends the watch. ``on_open`` receives the response so another thread can
        ``shutdown()`` it to stop a blocked read."""
        params: dict[str, str | int | bool] = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
            **(query or {}),
        }
        response = self._send(
            "GET",
            path,
            query=params,
            body=None,
            content_type=None,
            timeout=(10.0, timeout_seconds + 30.0),
            counted_as="WATCH",
        )
        if on_open is not None:
            on_open(response)
        try:
            if not 200 <= response.status <= 299:
                data = response.read()
                status: JSON = {}
                with contextlib.suppress(ValueError):
                    status = json.loads(data)
                raise _error(
                    response.status,
                    str(status.get("reason") or response.reason or ""),
                    str(status.get("message") or ""),
                    "WATCH",
                    path,
                )
            buffer = b""
            try:
                for chunk in response.stream(65536, decode_content=True):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            yield json.loads(line)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                raise Unavailable(
                    0, type(exc).__name__, str(exc), method="WATCH", path=path
                ) from exc
        finally:
            response.release_conn()


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _timeout(timeout: float | tuple[float, float] | None) -> urllib3.Timeout | None:
    if timeout is None:
        return None
    if isinstance(timeout, tuple):
        return urllib3.Timeout(connect=timeout[0], read=timeout[1])
    return urllib3.Timeout(total=timeout)
