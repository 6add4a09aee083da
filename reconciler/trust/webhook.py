"""GitHub-style push webhook: a signed push to the watched branch triggers an immediate fetch.

The request is checked in an order that spends nothing on strangers: size from
``Content-Length`` before reading a byte, then the read (bounded, with a socket timeout), then
the ``X-Hub-Signature-256`` HMAC compared in constant time, and only then JSON. The webhook is
a hint, never a source of truth: the fetch that follows reads the branch from Git itself, so a
forged payload could at worst cause an extra fetch, and an unsigned one cannot even do that.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from reconciler.ops.http_server import BackgroundHTTPServer, QuietHandler
from reconciler.ops.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_SECRET_ENV = "RECONCILER_WEBHOOK_SECRET"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # GitHub caps payloads at 25 MB; pushes are far smaller
DEFAULT_PATH = "/webhook"
SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADERS = ("X-GitHub-Event", "X-Gitea-Event", "X-Gogs-Event")


class WebhookConfigError(ValueError):
    """The webhook cannot start as configured (e.g. no secret)."""


class WebhookSecret:
    """The shared secret. Its repr never shows the value, so logging it by mistake is harmless."""

    __slots__ = ("_value",)

    def __init__(self, value: bytes) -> None:
        if not value:
            raise WebhookConfigError("the webhook secret is empty")
        self._value = value

    def signature(self, body: bytes) -> str:
        return "sha256=" + hmac.new(self._value, body, hashlib.sha256).hexdigest()

    def verify(self, body: bytes, header: str) -> bool:
        return hmac.compare_digest(self.signature(body).encode(), header.strip().encode())

    def __repr__(self) -> str:
        return "WebhookSecret(***)"

    __str__ = __repr__


def load_secret(
    file: str | os.PathLike[str] | None = None,
    *,
    env_var: str | None = DEFAULT_SECRET_ENV,
    environ: dict[str, str] | None = None,
) -> WebhookSecret:
    """Read the secret from ``file`` (a mounted Kubernetes Secret) or else from ``env_var``.

    One trailing newline is dropped from a file (``echo secret > file`` adds one). Errors name
    where the secret was looked for, never its value.
    """
    env = os.environ if environ is None else environ
    if file is not None:
        path = Path(file)
        try:
            raw = path.read_bytes()
            mode = path.stat().st_mode
        except OSError as e:
            raise WebhookConfigError(
                f"cannot read the webhook secret file {path}: {e.strerror}"
            ) from e
        if mode & stat.S_IROTH:
            log.warning("webhook secret file %s is readable by every user", path)
        value = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
        if not value:
            raise WebhookConfigError(f"the webhook secret file {path} is empty")
        return WebhookSecret(value)
    if env_var and env.get(env_var):
        return WebhookSecret(env[env_var].encode())
    where = f"environment variable {env_var}" if env_var else "no environment variable"
    raise WebhookConfigError(
        f"no webhook secret: give a secret file or set {where}; the receiver does not run "
        "without one"
    )


_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>(?!//).+)$")


def normalize_repository(value: str) -> tuple[str, str]:
    """A comparable form of a repository URL or ``owner/name``: (host, path), lowercase.

    ``https://github.com/Org/Repo.git``, ``git@github.com:org/repo`` and
    ``ssh://git@github.com/org/repo.git`` all give ``("github.com", "org/repo")``; a bare full
    name ``org/repo`` gives ``("", "org/repo")``.
    """
    text = value.strip()
    if "://" in text:
        parts = urlsplit(text)
        host, path = (parts.hostname or ""), parts.path
    elif m := _SCP_LIKE.match(text):
        host, path = m.group("host"), m.group("path")
    else:
        host, path = "", text
    path = path.strip("/")
    path = path.removesuffix(".git")
    return host.lower(), path.lower()


def _owner_name(path: str) -> str:
    return "/".join(path.split("/")[-2:])


@dataclass(frozen=True)
class WatchedBranch:
    """The repository and branch the reconciler follows.

    ``repository`` is a URL in any form git accepts, or ``owner/name``. A URL must match one of
    the payload's URLs (host and path); ``owner/name`` matches the payload's ``full_name``. When
    the reconciler fetches from a mirror, configure ``owner/name`` of the repository that sends
    the webhook.
    """

    repository: str
    branch: str

    def matches_repository(self, repo: dict[str, Any]) -> bool:
        host, path = normalize_repository(self.repository)
        urls = {
            normalize_repository(v)
            for k in ("clone_url", "ssh_url", "git_url", "html_url", "url", "svn_url")
            if isinstance(v := repo.get(k), str) and v
        }
        if host and urls:
            return (host, path) in urls
        full_name = repo.get("full_name")
        if isinstance(full_name, str) and full_name:
            return _owner_name(path) == full_name.strip().lower()
        return any(_owner_name(path) == _owner_name(p) for _, p in urls)


@dataclass(frozen=True)
class PushEvent:
    """What a verified push says. A hint to fetch; the fetch itself reads Git."""

    repository: str
    ref: str
    after: str
    pusher: str
    delivery: str
    received_monotonic: float
    received_unix: float


@dataclass(frozen=True)
class Outcome:
    status: int
    outcome: str  # metrics label, see reconciler.ops.metrics.WEBHOOK_OUTCOMES
    message: str
    close: bool = False  # the body was not read: the connection cannot be reused


Trigger = Callable[[PushEvent], None]


@dataclass
class WebhookReceiver:
    """Decides what a request means; ``WebhookServer`` puts it on a socket."""

    secret: WebhookSecret
    watched: WatchedBranch
    trigger: Trigger
    metrics: Metrics | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    path: str = DEFAULT_PATH
    clock: Callable[[], float] = field(default=time.monotonic)
    wall_clock: Callable[[], float] = field(default=time.time)
    warn_interval: float = 10.0
    _warned: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)
    _warn_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def check_headers(self, method: str, path: str, headers: dict[str, str]) -> Outcome | None:
        """Refusals decided before the body is read (None: read the body)."""
        if path.split("?", 1)[0] != self.path:
            return Outcome(404, "not_found", f"not found: the webhook is at {self.path}", True)
        if method != "POST":
            return Outcome(405, "method_not_allowed", "only POST is accepted", True)
        length_text = headers.get("content-length")
        if headers.get("transfer-encoding") or length_text is None:
            return Outcome(411, "length_required", "a Content-Length header is required", True)
        if not length_text.isdigit():
            return Outcome(400, "bad_request", "Content-Length is not a number", True)
        if int(length_text) > self.max_body_bytes:
            return Outcome(
                413,
                "too_large",
                f"body of {length_text} bytes exceeds the limit of {self.max_body_bytes}",
                True,
            )
        return None

    def handle(self, headers: dict[str, str], body: bytes, received: float) -> Outcome:
        """Verify and act on a request whose body was read. ``headers`` keys are lowercase."""
        signature = headers.get(SIGNATURE_HEADER.lower())
        if not signature:
            return Outcome(401, "unauthorized", f"missing {SIGNATURE_HEADER} header")
        if not self.secret.verify(body, signature):
            return Outcome(401, "unauthorized", f"{SIGNATURE_HEADER} does not match the body")
        event = next((headers[h.lower()] for h in EVENT_HEADERS if headers.get(h.lower())), "")
        if not event:
            return Outcome(400, "bad_request", "missing X-GitHub-Event header")
        try:
            payload = _decode_payload(headers.get("content-type", ""), body)
        except ValueError as e:
            return Outcome(400, "bad_request", f"malformed payload: {e}")
        if event == "ping":
            return Outcome(200, "ping", "pong")
        if event != "push":
            return Outcome(202, "ignored", f"event {event!r} ignored: only push events trigger")
        return self._push(payload, headers, received)

    def _push(self, payload: dict[str, Any], headers: dict[str, str], received: float) -> Outcome:
        repo = payload.get("repository")
        ref = payload.get("ref")
        if not isinstance(repo, dict) or not isinstance(ref, str):
            return Outcome(400, "bad_request", "push payload lacks repository or ref")
        name = str(repo.get("full_name") or repo.get("clone_url") or "?")
        if not self.watched.matches_repository(repo):
            return Outcome(202, "ignored", f"repository {name} is not the watched repository")
        wanted_ref = f"refs/heads/{self.watched.branch}"
        if ref != wanted_ref:
            return Outcome(202, "ignored", f"ref {ref} ignored: watching {wanted_ref}")
        if payload.get("deleted") is True:
            return Outcome(202, "ignored", f"{ref} was deleted; nothing to fetch")
        pusher = payload.get("pusher")
        event = PushEvent(
            repository=name,
            ref=ref,
            after=str(payload.get("after") or ""),
            pusher=str(pusher.get("name", "")) if isinstance(pusher, dict) else "",
            delivery=headers.get("x-github-delivery", ""),
            received_monotonic=received,
            received_unix=self.wall_clock(),
        )
        try:
            self.trigger(event)
        except Exception:
            log.exception("webhook trigger failed for %s %s", name, ref)
            return Outcome(500, "error", "the fetch could not be triggered; see the logs")
        log.info(
            "webhook push to %s %s (%s) by %s: fetch triggered",
            name,
            ref,
            event.after[:12],
            event.pusher or "?",
        )
        return Outcome(202, "triggered", f"fetch of {ref} triggered")

    def record(self, outcome: Outcome, client: str = "") -> None:
        if self.metrics is not None:
            self.metrics.count_webhook_request(outcome.outcome)
        source = f" from {client}" if client else ""
        # The message never contains the secret or the received signature.
        if outcome.outcome not in ("unauthorized", "too_large", "error"):
            level = logging.INFO if outcome.outcome in ("triggered", "ping") else logging.DEBUG
            log.log(level, "webhook %d %s%s: %s", outcome.status, outcome.outcome, source,
                    outcome.message)  # fmt: skip
            return
        # Refusals are warnings, but a flood of forged requests must not flood the logs:
        # at most one per outcome per warn_interval, with the count of those left out.
        now = self.clock()
        with self._warn_lock:
            last, suppressed = self._warned.get(outcome.outcome, (float("-inf"), 0))
            if now - last < self.warn_interval:
                self._warned[outcome.outcome] = (last, suppressed + 1)
                log.debug("webhook %d %s%s: %s", outcome.status, outcome.outcome, source,
                          outcome.message)  # fmt: skip
                return
            self._warned[outcome.outcome] = (now, 0)
        more = f" ({suppressed} more since the last report)" if suppressed else ""
        log.warning("webhook %d %s%s: %s%s", outcome.status, outcome.outcome, source,
                    outcome.message, more)  # fmt: skip


def _decode_payload(content_type: str, body: bytes) -> dict[str, Any]:
    media = content_type.split(";", 1)[0].strip().lower()
    text: str
    try:
        if media == "application/x-www-form-urlencoded":
            # GitHub's "Content type: application/x-www-form-urlencoded" sends payload=<json>
            form = parse_qs(body.decode("utf-8"), strict_parsing=False)
            if "payload" not in form:
                raise ValueError("form body without a payload field")
            text = form["payload"][0]
        else:
            text = body.decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as e:
        raise ValueError("body is not UTF-8") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return data


class _WebhookHandler(QuietHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: GitHub and the benchmark reuse connections
    timeout = 10  # seconds per socket read: a slow sender cannot hold a thread forever

    def handle_expect_100(self) -> bool:
        # curl sends "Expect: 100-continue" for larger bodies: refuse before inviting the body
        receiver: WebhookReceiver = self.server.app  # type: ignore[attr-defined]
        headers = {k.lower(): v for k, v in self.headers.items()}
        outcome = receiver.check_headers(self.command, self.path, headers)
        if outcome is not None:
            self._answer(receiver, outcome)
            return False
        return super().handle_expect_100()

    def _serve(self) -> None:
        receiver: WebhookReceiver = self.server.app  # type: ignore[attr-defined]
        received = receiver.clock()
        headers = {k.lower(): v for k, v in self.headers.items()}
        outcome = receiver.check_headers(self.command, self.path, headers)
        if outcome is None:
            length = int(headers["content-length"])
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                outcome = Outcome(408, "bad_request", "timed out reading the body", True)
            else:
                if len(body) != length:
                    outcome = Outcome(400, "bad_request", "body shorter than Content-Length", True)
                else:
                    outcome = receiver.handle(headers, body, received)
        self._answer(receiver, outcome)

    def _answer(self, receiver: WebhookReceiver, outcome: Outcome) -> None:
        receiver.record(outcome, self.client_address[0])
        payload = json.dumps(
            {"result": outcome.outcome, "message": outcome.message}, separators=(",", ":")
        ).encode()
        if outcome.close:
            self.close_connection = True
        self.send_body(outcome.status, payload, {"Content-Type": "application/json"})

    do_POST = _serve
    do_GET = _serve
    do_PUT = _serve
    do_HEAD = _serve


class WebhookServer(BackgroundHTTPServer):
    """The receiver on ``host:port``, one thread per connection."""

    def __init__(
        self, host: str, port: int, receiver: WebhookReceiver, *, max_connections: int = 128
    ) -> None:
        super().__init__(
            host, port, _WebhookHandler, receiver, name="webhook", max_connections=max_connections
        )
        self.receiver = receiver
