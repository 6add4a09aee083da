"""The Prometheus adapter of the health gates: one instant query over the HTTP API
(``GET /api/v1/query``), its answer mapped once into a :data:`~reconciler.health.checks.Reading`.

- At most one request per call: no retries, no redirects followed (a redirect is a
  ``QueryError``); the caller's check interval paces the queries.
- Bounded: ``timeout`` covers connecting and the whole answer (also sent to Prometheus as the
  query's own ``timeout``), and an answer over ``MAX_ANSWER`` bytes is refused.
- Nothing raises: a refused connection, a timeout, an HTTP error, or an answer that is not what
  the API documents is a ``QueryError`` (Prometheus's own ``error`` text when it sent one).
- A vector with one sample, or a scalar, is its value, NaN and infinities included (Prometheus
  writes them ``"NaN"``, ``"+Inf"``); :func:`~reconciler.health.checks.evaluate` treats NaN as no
  answer. An empty vector is ``NoSample``, more than one sample ``ManySamples``.
- Proxy variables of the environment are not used: Prometheus is reached directly.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import IO, Any

from reconciler.clock import Clock, monotonic
from reconciler.health.checks import ManySamples, NoSample, QueryError, Reading

MAX_ANSWER = 4 * 1024 * 1024
_CHUNK = 64 * 1024


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


class PrometheusClient:
    """``PrometheusClient("http://prometheus:9090", timeout=5).query(expr)``."""

    def __init__(self, url: str, *, timeout: float = 5.0, clock: Clock = monotonic) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._clock = clock
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                   _NoRedirects())

    def query(self, expr: str) -> Reading:
        params = urllib.parse.urlencode({"query": expr, "timeout": f"{self.timeout:g}s"})
        request = urllib.request.Request(f"{self.url}/api/v1/query?{params}",
                                         headers={"Accept": "application/json"})
        deadline = self._clock() + self.timeout
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                body = self._read(response, deadline)
                status = int(response.status)
        except urllib.error.HTTPError as exc:
            try:
                body = self._read(exc, deadline)
            except (OSError, http.client.HTTPException, _TooSlow, _TooLarge):
                body = b""
            finally:
                exc.close()
            return map_answer(exc.code, body)
        except _TooSlow:
            return QueryError(None, f"no complete answer within {self.timeout:g}s")
        except _TooLarge:
            return QueryError(None, f"answer larger than {MAX_ANSWER} bytes")
        except TimeoutError:
            return QueryError(None, f"no answer within {self.timeout:g}s")
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                return QueryError(None, f"no answer within {self.timeout:g}s")
            return QueryError(None, f"cannot reach {self.url}: {_reason(reason)}")
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # reset or cut connections, a status line that is not HTTP
            return QueryError(None, f"no usable answer from {self.url}: {_reason(exc)}")
        return map_answer(status, body)

    def _read(self, response: IO[bytes], deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            if self._clock() > deadline:
                raise _TooSlow
            chunk = response.read(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_ANSWER:
                raise _TooLarge
            chunks.append(chunk)


class _TooSlow(Exception):
    pass


class _TooLarge(Exception):
    pass


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason) or type(reason).__name__


def map_answer(status: int, body: bytes) -> Reading:
    """An HTTP answer of ``/api/v1/query`` as a reading (pure: the adapter's whole mapping)."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        answer = None
    if not isinstance(answer, Mapping):
        return QueryError(status, f"not a Prometheus API answer: {_excerpt(body)}")
    if answer.get("status") != "success":
        error = answer.get("error")
        kind = answer.get("errorType")
        if isinstance(error, str) and error:
            return QueryError(status, f"{kind}: {error}" if isinstance(kind, str) else error)
        return QueryError(status, f"query failed: {_excerpt(body)}")
    if status != 200:
        return QueryError(status, f"HTTP {status} with a success answer")
    data = answer.get("data")
    kind = data.get("resultType") if isinstance(data, Mapping) else None
    result = data.get("result") if isinstance(data, Mapping) else None
    if kind == "vector" and isinstance(result, list):
        if not result:
            return NoSample()
        if len(result) > 1:
            return ManySamples(len(result))
        sample = result[0]
        return _value(sample.get("value") if isinstance(sample, Mapping) else None, status)
    if kind == "scalar":
        return _value(result, status)
    if kind in ("matrix", "string"):
        return QueryError(status, f"the query returned a {kind}, not one sample")
    return QueryError(status, f"unexpected result: {_excerpt(body)}")


def _value(pair: object, status: int) -> Reading:
    """``[<time>, "<value>"]``; Go's float text ("NaN", "+Inf", "-Inf") is Python's too."""
    if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str):
        try:
            return float(pair[1])
        except ValueError:
            pass
    return QueryError(status, f"unreadable sample value: {_excerpt(json.dumps(pair))}")


def _excerpt(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return repr(text if len(text) <= 200 else text[:200] + "...")
