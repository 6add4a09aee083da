"""Push webhooks of every common forge: a verified push to the watched branch triggers a fetch.

The request is checked in an order that spends nothing on strangers: size from
``Content-Length`` before reading a byte, then the read (bounded by the request's total
deadline, see ``reconciler.ops.http_server.ServerLimits``), then the forge's own proof of the
secret (``reconciler.trust.forges``: GitHub, Gitea/Forgejo, GitLab, Bitbucket Server, Gitee,
each compared in constant time), and only then JSON, parsed with a bound on its nesting. These
limits come before the forge is known, so they hold for every forge alike. The webhook is a
hint, never a source of truth: the fetch that follows reads the branch from Git itself, so a
forged payload could at worst cause an extra fetch, and an unauthenticated one cannot even do
that. A delivery id acted on once is not acted on again (a forge's retry, a replay).
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
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from reconciler.clock import monotonic, wall
from reconciler.ops.http_server import (
    BackgroundHTTPServer,
    QuietHandler,
    RefusalLog,
    ServerLimits,
)
from reconciler.ops.metrics import Metrics
from reconciler.trust.forges import Forge, Push, RefChange, forge_of

log = logging.getLogger(__name__)

DEFAULT_SECRET_ENV = "RECONCILER_WEBHOOK_SECRET"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # GitHub caps payloads at 25 MB; pushes are far smaller
DEFAULT_PATH = "/webhook"
#: a push payload nests about 4 deep; far deeper is an attack on the parser's recursion
DEFAULT_MAX_JSON_DEPTH = 64
#: delivery ids remembered against repeats: a forge retries within minutes, and a few
#: thousand cover far more pushes than a policy repository sees in that time
DEFAULT_REMEMBERED_DELIVERIES = 4096


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

    def mac(self, message: bytes) -> bytes:
        return hmac.new(self._value, message, hashlib.sha256).digest()

    def mac_of_secret(self, prefix: bytes) -> bytes:
        return self.mac(prefix + self._value)

    def same_as(self, candidate: bytes) -> bool:
        return hmac.compare_digest(self._value, candidate)

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


_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>(?!//).+)\Z")


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
            # a GitLab project in a subgroup is named by its whole path ("group/sub/repo")
            return full_name.strip().lower() in (path, _owner_name(path))
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
    forge: str = "github"


@dataclass(frozen=True)
class Outcome:
    status: int
    outcome: str  # metrics label, see reconciler.ops.metrics.WEBHOOK_OUTCOMES
    message: str
    close: bool = False  # the body was not read: the connection cannot be reused


Trigger = Callable[[PushEvent], None]


class Deliveries:
    """The last ``capacity`` delivery ids acted on, per forge: a repeat is not acted on again.

    An id is taken before the trigger runs, so two copies arriving at once trigger once, and
    given back when the trigger fails, so the forge's retry is acted on. Only authenticated
    deliveries get here: a stranger cannot fill the memory or block an id in advance.
    """

    def __init__(self, capacity: int = DEFAULT_REMEMBERED_DELIVERIES) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, forge: str, delivery: str) -> bool:
        """True when this id is new (and now remembered); an empty id is always new."""
        if not delivery:
            return True
        key = (forge, delivery)
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
            return True

    def give_back(self, forge: str, delivery: str) -> None:
        with self._lock:
            self._seen.pop((forge, delivery), None)


@dataclass
class WebhookReceiver:
    """Decides what a request means; ``WebhookServer`` puts it on a socket."""

    secret: WebhookSecret
    watched: WatchedBranch
    trigger: Trigger
    metrics: Metrics | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    path: str = DEFAULT_PATH
    clock: Callable[[], float] = field(default=monotonic)
    wall_clock: Callable[[], float] = field(default=wall)
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    #: seconds between two refusal warnings for one reason and client (read at construction)
    warn_interval: float = 10.0
    refusals: RefusalLog = field(init=False, repr=False)
    deliveries: Deliveries = field(default_factory=Deliveries, repr=False)

    def __post_init__(self) -> None:
        self.refusals = RefusalLog(log, interval=self.warn_interval, clock=self.clock)

    def check_headers(self, method: str, path: str, headers: dict[str, str]) -> Outcome | None:
        """Refusals decided before the body is read (None: read the body).

        ``headers`` keys are lowercase; a field sent more than once holds its values joined
        with ", " (so two ``Content-Length`` fields are not one decimal number).
        """
        # origin-form "/webhook?x", or the absolute form "http://host/webhook" (RFC 9112 3.2.2)
        target = urlsplit(path).path if "://" in path else path.split("?", 1)[0]
        if target != self.path:
            return Outcome(404, "not_found", f"not found: the webhook is at {self.path}", True)
        if method != "POST":
            return Outcome(405, "method_not_allowed", "only POST is accepted", True)
        length_text = headers.get("content-length")
        if "transfer-encoding" in headers or length_text is None:
            return Outcome(
                411,
                "length_required",
                "a Content-Length header is required (Transfer-Encoding is not supported)",
                True,
            )
        length = content_length(length_text)
        if length is None:
            return Outcome(
                400,
                "bad_request",
                f"Content-Length {_shown(length_text)!r} is not one decimal number",
                True,
            )
        if length > self.max_body_bytes:
            return Outcome(
                413,
                "too_large",
                f"body of {_shown(length_text)} bytes exceeds the limit of {self.max_body_bytes}",
                True,
            )
        return None

    def handle(self, headers: dict[str, str], body: bytes, received: float) -> Outcome:
        """Verify and act on a request whose body was read. ``headers`` keys are lowercase."""
        forge = forge_of(headers)
        refusal = forge.refusal(self.secret, headers, body, self.wall_clock())
        if refusal is not None:
            return Outcome(401, "unauthorized", refusal)
        event = forge.event(headers)
        if not event:
            return Outcome(400, "bad_request", f"missing {_header_name(forge.event_headers[0])} "
                           "header")  # fmt: skip
        try:
            payload = decode_payload(headers.get("content-type", ""), body, self.max_json_depth)
        except ValueError as e:
            return Outcome(400, "bad_request", f"malformed payload: {e}")
        if event in forge.ping_events:
            return Outcome(200, "ping", "pong")
        if event not in forge.push_events:
            return Outcome(202, "ignored", f"event {_shown(event)!r} ignored: only push events "
                           "trigger")  # fmt: skip
        push = forge.push(payload)
        if isinstance(push, str):
            return Outcome(400, "bad_request", push)
        return self._push(forge, push, headers, received)

    def _push(self, forge: Forge, push: Push, headers: dict[str, str], received: float) -> Outcome:
        name = _shown(push.name)
        if not self.watched.matches_repository(push.repository):
            return Outcome(202, "ignored", f"repository {name} is not the watched repository")
        wanted_ref = f"refs/heads/{self.watched.branch}"
        change = next((c for c in push.changes if c.ref == wanted_ref), None)
        if change is None:
            refs = ", ".join(_shown(c.ref) for c in push.changes[:5]) or "none"
            return Outcome(202, "ignored", f"ref {refs} ignored: watching {wanted_ref}")
        ref = change.ref
        if change.deleted:
            return Outcome(202, "ignored", f"{ref} was deleted; nothing to fetch")
        if _is_test(change):
            # Gitea's "Test Delivery" reports the branch head moving to itself
            return Outcome(200, "ping", f"test delivery: {ref} did not move; nothing to fetch")
        delivery = _shown(forge.delivery(headers))
        if not self.deliveries.take(forge.name, delivery):
            return Outcome(200, "ignored", f"delivery {delivery} was acted on already; not again")
        event = PushEvent(
            repository=name,
            ref=ref,
            after=_shown(change.after),
            pusher=_shown(push.pusher),
            delivery=delivery,
            received_monotonic=received,
            received_unix=self.wall_clock(),
            forge=forge.name,
        )
        try:
            self.trigger(event)
        except Exception:
            self.deliveries.give_back(forge.name, delivery)
            log.exception("webhook trigger failed for %s %s", name, ref)
            return Outcome(500, "error", "the fetch could not be triggered; see the logs")
        log.info(
            "webhook push (%s) to %s %s (%s) by %s: fetch triggered",
            forge.name,
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
        line = f"webhook {outcome.status} {outcome.outcome}{source}: {outcome.message}"
        # The message never contains the secret or the received signature.
        if outcome.status < 400:
            level = logging.INFO if outcome.outcome in ("triggered", "ping") else logging.DEBUG
            log.log(level, "%s", line)
            return
        # A refusal is a warning, but a flood of them must not flood the logs.
        self.refusals.report(outcome.outcome, client, line)


def content_length(text: str) -> int | None:
    """``Content-Length`` as a number, or None unless it is one decimal number (RFC 9110 8.6).

    Only ASCII digits: ``int()`` alone would take ``+5``, ``5_0`` and other scripts' digits,
    and raise on ``²`` (a digit to ``str.isdigit``) and on more than 4300 digits.
    """
    value = text.strip(" \t")
    if not _DECIMAL.fullmatch(value):
        return None
    digits = value.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


_DECIMAL = re.compile(r"[0-9]+")
# a string token, unterminated ones included (to the end of the text, so no quote is scanned
# from twice: linear time whatever the text), or a bracket
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``limit``.

    ``json.loads`` recurses once per level and fails with RecursionError near 1000 levels, so
    the depth is counted first, in one scan that skips strings (a bracket in a string is no
    nesting). Only the part before the first syntax error matters, since the parser stops
    there, and up to that point this scan reads the text as the parser does.
    """
    depth = 0
    for m in _STRUCTURE.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return True
        elif c in "]}":
            depth -= 1
    return False


def decode_payload(
    content_type: str, body: bytes, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> dict[str, Any]:
    """The JSON object a push delivers (as JSON, or form-encoded ``payload=<json>``).

    Raises ValueError, with a message for the sender, for anything else.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    text: str
    try:
        if media == "application/x-www-form-urlencoded":
            # GitHub's "Content type: application/x-www-form-urlencoded" sends payload=<json>
            form = parse_qs(body.decode("utf-8"), max_num_fields=64)
            if "payload" not in form:
                raise ValueError("form body without a payload field")
            text = form["payload"][0]
        else:
            text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError("body is not UTF-8") from e
    if json_depth_exceeds(text, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
    except (ValueError, RecursionError) as e:  # e.g. an integer of more than 4300 digits
        raise ValueError(f"invalid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return data


def _is_test(change: RefChange) -> bool:
    """A ref "moving" to where it was: no real push says that, a forge's test delivery does."""
    return bool(change.after) and change.before == change.after


def _header_name(lowercase: str) -> str:
    return "-".join(p.capitalize() for p in lowercase.split("-")).replace("Github", "GitHub")


def _shown(text: str, limit: int = 200) -> str:
    """Client-supplied text fit for a log line: control characters escaped, length bounded."""
    shown = text if text.isprintable() else repr(text)[1:-1]
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _fields(message: Any) -> dict[str, str]:
    """Header fields by lowercase name; a repeated field's values joined with ", "."""
    fields: dict[str, str] = {}
    for name, value in message.items():
        key = name.lower()
        fields[key] = f"{fields[key]}, {value}" if key in fields else value
    return fields


class _WebhookHandler(QuietHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: GitHub and the benchmark reuse connections

    def handle_expect_100(self) -> bool:
        # curl sends "Expect: 100-continue" for larger bodies: refuse before inviting the body
        receiver: WebhookReceiver = self.server.app  # type: ignore[attr-defined]
        outcome = receiver.check_headers(self.command, self.path, _fields(self.headers))
        if outcome is not None:
            self._answer(receiver, outcome)
            return False
        return super().handle_expect_100()

    def _serve(self) -> None:
        receiver: WebhookReceiver = self.server.app  # type: ignore[attr-defined]
        received = receiver.clock()
        headers = _fields(self.headers)
        outcome = receiver.check_headers(self.command, self.path, headers)
        if outcome is None:
            length = content_length(headers["content-length"]) or 0
            # the read ends at the request's deadline (TimeoutError: QuietHandler answers 408)
            body = self.rfile.read(length)
            if len(body) != length:
                outcome = Outcome(400, "bad_request", "body shorter than Content-Length", True)
            else:
                outcome = receiver.handle(headers, body, received)
        self._answer(receiver, outcome)

    def refuse(self, status: int, detail: str) -> None:
        # requests refused by the HTTP layer (malformed, too slow) are counted like the others
        receiver: WebhookReceiver = self.server.app  # type: ignore[attr-defined]
        kind = "method_not_allowed" if status in (405, 501) else "bad_request"
        self._answer(receiver, Outcome(status, kind, detail, close=True))

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
    """The receiver on ``host:port``, one thread per connection within ``limits``.

    The request deadline runs on the receiver's clock; refusals of every kind share the
    receiver's rate-limited log.
    """

    def __init__(
        self,
        host: str,
        port: int,
        receiver: WebhookReceiver,
        *,
        limits: ServerLimits | None = None,
    ) -> None:
        super().__init__(
            host,
            port,
            _WebhookHandler,
            receiver,
            name="webhook",
            limits=limits,
            clock=receiver.clock,
            refusals=receiver.refusals,
        )
        self.receiver = receiver
