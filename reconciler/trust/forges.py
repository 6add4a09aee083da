"""Which forge sent a push webhook, how it proves it knows the shared secret, what its push says.

A forge is told by headers only it sends; each proves the secret its own way, and every
comparison is constant-time (``hmac.compare_digest``):

- GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``;
- Gitea, Forgejo (and Gogs): ``X-Forgejo-Signature`` / ``X-Gitea-Signature`` /
  ``X-Gogs-Signature``: the bare hex HMAC-SHA256 of the body. They send GitHub's headers too,
  so they are told apart first;
- GitLab: ``X-Gitlab-Token``: the secret itself (it authenticates the sender, not the body);
- Bitbucket Server: ``X-Hub-Signature: sha256=<hex>`` beside ``X-Event-Key``;
- Gitee: ``X-Gitee-Token``: the secret itself, or base64(HMAC-SHA256(secret,
  "<X-Gitee-Timestamp>\\n<secret>")); the timestamp (milliseconds) must lie within an hour of
  now. The signature covers the timestamp, not the body.

A request with no forge's headers is taken for GitHub's, so it is refused for lacking
``X-Hub-Signature-256``. What a push says (ref, before and after, repository, pusher) comes out
in one shape, ``Push``, whichever forge sent it. The receiver (``reconciler.trust.webhook``)
does the rest: limits, parsing, repository and branch matching, repeated deliveries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

#: request header fields by lowercase name
Headers = Mapping[str, str]

#: Gitee: "the timestamp must not be more than one hour from the time of the request"
GITEE_WINDOW_SECONDS = 3600.0


class Secret(Protocol):
    """The shared secret as the checks use it (``reconciler.trust.webhook.WebhookSecret``)."""

    def mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` keyed with the secret."""
        ...

    def mac_of_secret(self, prefix: bytes) -> bytes:
        """HMAC-SHA256 of ``prefix`` followed by the secret itself, keyed with the secret."""
        ...

    def same_as(self, candidate: bytes) -> bool:
        """Whether ``candidate`` is the secret (constant time)."""
        ...


@dataclass(frozen=True)
class RefChange:
    ref: str
    before: str
    after: str
    deleted: bool


@dataclass(frozen=True)
class Push:
    """A push, whichever forge reported it."""

    #: keys ``WatchedBranch.matches_repository`` reads: ``full_name`` and URLs
    repository: dict[str, Any]
    name: str
    pusher: str
    changes: tuple[RefChange, ...]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _first(headers: Headers, names: tuple[str, ...]) -> str:
    return next((headers[n] for n in names if headers.get(n)), "")


def _zeros(sha: str) -> bool:
    return bool(sha) and set(sha) == {"0"}


class Forge:
    """One forge's headers and checks. Header names are lowercase, as ``Headers`` keys are."""

    name = ""
    #: any of these present: the request is this forge's
    markers: tuple[str, ...] = ()
    event_headers: tuple[str, ...] = ()
    delivery_headers: tuple[str, ...] = ()
    push_events: frozenset[str] = frozenset()
    ping_events: frozenset[str] = frozenset()

    def claims(self, headers: Headers) -> bool:
        return any(h in headers for h in self.markers)

    def event(self, headers: Headers) -> str:
        return _first(headers, self.event_headers)

    def delivery(self, headers: Headers) -> str:
        return _first(headers, self.delivery_headers)

    def refusal(self, secret: Secret, headers: Headers, body: bytes, now: float) -> str | None:
        """Why the request does not prove the secret (None: it does). ``now``: wall seconds."""
        raise NotImplementedError

    def push(self, payload: dict[str, Any]) -> Push | str:
        """The push a verified payload reports, or why it is not one."""
        # a branch deletion: GitHub says "deleted"; the others may only say so by an
        # all-zero "after"
        return _github_push(payload, zeros_deleted=self.name != "github")

    def sign(self, secret: bytes, body: bytes, *, delivery: str, now: float) -> dict[str, str]:
        """The headers this forge sends with a push of ``body`` (for tests and benchmarks)."""
        raise NotImplementedError


def _hex_mac(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def _hex_refusal(secret: Secret, header: str, value: str, body: bytes, prefix: str) -> str | None:
    """``value`` must be ``prefix`` + the hex HMAC-SHA256 of ``body``."""
    if not value:
        return f"missing {header} header"
    expected = (prefix + secret.mac(body).hex()).encode()
    if not hmac.compare_digest(expected, value.strip().encode()):
        return f"{header} does not match the body"
    return None


def _github_push(payload: dict[str, Any], *, zeros_deleted: bool) -> Push | str:
    """GitHub's push payload; Gitea, Forgejo, Gogs and Gitee send the same fields."""
    repo = payload.get("repository")
    ref = payload.get("ref")
    if not isinstance(repo, dict) or not isinstance(ref, str):
        return "push payload lacks repository or ref"
    pusher = payload.get("pusher")
    who = next(
        (v for k in ("name", "login", "username") if (v := _text(pusher.get(k)))), ""
    ) if isinstance(pusher, dict) else ""  # fmt: skip
    after = _text(payload.get("after"))
    change = RefChange(
        ref,
        _text(payload.get("before")),
        after,
        payload.get("deleted") is True or (zeros_deleted and _zeros(after)),
    )
    name = str(repo.get("full_name") or repo.get("clone_url") or "?")
    return Push(repo, name, who, (change,))


class GitHub(Forge):
    name = "github"
    markers: tuple[str, ...] = ("x-github-event", "x-hub-signature-256", "x-github-delivery")
    event_headers = ("x-github-event",)
    delivery_headers = ("x-github-delivery",)
    push_events = frozenset({"push"})
    ping_events = frozenset({"ping"})
    signature_header = "X-Hub-Signature-256"

    def refusal(self, secret: Secret, headers: Headers, body: bytes, now: float) -> str | None:
        value = headers.get(self.signature_header.lower(), "")
        return _hex_refusal(secret, self.signature_header, value, body, "sha256=")

    def sign(self, secret: bytes, body: bytes, *, delivery: str, now: float) -> dict[str, str]:
        return {
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": "sha256=" + _hex_mac(secret, body),
        }


class Gitea(Forge):
    """Gitea and its fork Forgejo; Gogs, their ancestor, signs the same way."""

    name = "gitea"
    _signatures = ("X-Forgejo-Signature", "X-Gitea-Signature", "X-Gogs-Signature")
    event_headers = ("x-forgejo-event", "x-gitea-event", "x-gogs-event")
    markers = event_headers + tuple(h.lower() for h in _signatures)
    delivery_headers = ("x-forgejo-delivery", "x-gitea-delivery", "x-gogs-delivery")
    push_events = frozenset({"push"})

    def refusal(self, secret: Secret, headers: Headers, body: bytes, now: float) -> str | None:
        # the first one sent is the one checked: a bad Forgejo signature is not rescued by
        # a good Gitea one
        header = next((h for h in self._signatures if h.lower() in headers), "X-Gitea-Signature")
        return _hex_refusal(secret, header, headers.get(header.lower(), ""), body, "")

    def sign(self, secret: bytes, body: bytes, *, delivery: str, now: float) -> dict[str, str]:
        signature = _hex_mac(secret, body)
        # what Forgejo sends (it adds its own names to Gitea's, which carry GitHub's too)
        return {
            "X-Forgejo-Event": "push",
            "X-Forgejo-Delivery": delivery,
            "X-Forgejo-Signature": signature,
            "X-Gitea-Event": "push",
            "X-Gitea-Delivery": delivery,
            "X-Gitea-Signature": signature,
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": "sha256=" + signature,
        }


class _TokenForge(Forge):
    """A forge that sends a token in one header instead of signing the body (GitLab and Gitee,
    which also name their push event alike)."""

    token_header = ""
    push_events = frozenset({"Push Hook"})

    def claims(self, headers: Headers) -> bool:
        return super().claims(headers) or self.token_header.lower() in headers

    def refusal(self, secret: Secret, headers: Headers, body: bytes, now: float) -> str | None:
        token = headers.get(self.token_header.lower(), "")
        if not token:
            return f"missing {self.token_header} header"
        return self.token_refusal(secret, token, headers, now)

    def token_refusal(self, secret: Secret, token: str, headers: Headers, now: float) -> str | None:
        if not secret.same_as(token.encode()):
            return f"{self.token_header} does not match the secret"
        return None


class GitLab(_TokenForge):
    name = "gitlab"
    markers = event_headers = ("x-gitlab-event",)
    token_header = "X-Gitlab-Token"
    # Idempotency-Key stays the same when GitLab retries a delivery (GitLab 17.4 and later)
    delivery_headers = ("idempotency-key", "x-gitlab-event-uuid")

    def push(self, payload: dict[str, Any]) -> Push | str:
        project = payload.get("project")
        ref = payload.get("ref")
        if not isinstance(project, dict) or not isinstance(ref, str):
            return "push payload lacks project or ref"
        full_name = _text(project.get("path_with_namespace"))
        repo = {
            "full_name": full_name,
            "clone_url": _text(project.get("git_http_url")),
            "ssh_url": _text(project.get("git_ssh_url")),
            "html_url": _text(project.get("web_url")),
        }
        after = _text(payload.get("after"))
        change = RefChange(ref, _text(payload.get("before")), after, _zeros(after))
        pusher = _text(payload.get("user_username")) or _text(payload.get("user_name"))
        return Push(repo, full_name or "?", pusher, (change,))

    def sign(self, secret: bytes, body: bytes, *, delivery: str, now: float) -> dict[str, str]:
        return {
            "X-Gitlab-Event": "Push Hook",
            "X-Gitlab-Token": secret.decode(),
            "X-Gitlab-Event-UUID": delivery,
            "Idempotency-Key": delivery,
        }


class BitbucketServer(GitHub):
    """Bitbucket Server and Data Center (not Bitbucket Cloud, whose payload differs). It signs
    as GitHub does, under GitHub's older header name."""

    name = "bitbucket-server"
    markers = event_headers = ("x-event-key",)
    signature_header = "X-Hub-Signature"
    delivery_headers = ("x-request-id",)
    push_events, ping_events = frozenset({"repo:refs_changed"}), frozenset({"diagnostics:ping"})

    def push(self, payload: dict[str, Any]) -> Push | str:
        repo = payload.get("repository")
        changes = payload.get("changes")
        if not isinstance(repo, dict) or not isinstance(changes, list):
            return "push payload lacks repository or changes"
        project = repo.get("project")
        key = _text(project.get("key")) if isinstance(project, dict) else ""
        full_name = f"{key}/{_text(repo.get('slug'))}"
        links = repo.get("links")
        clone = links.get("clone") if isinstance(links, dict) else None
        urls = {
            _text(link.get("name")): _text(link.get("href"))
            for link in (clone if isinstance(clone, list) else [])
            if isinstance(link, dict)
        }
        repository = {"full_name": full_name, "clone_url": urls.get("http", ""),
                      "ssh_url": urls.get("ssh", "")}  # fmt: skip
        refs = tuple(
            RefChange(
                _text(c.get("refId")),
                _text(c.get("fromHash")),
                _text(c.get("toHash")),
                c.get("type") == "DELETE",
            )
            for c in changes
            if isinstance(c, dict)
        )
        actor = payload.get("actor")
        pusher = _text(actor.get("name")) if isinstance(actor, dict) else ""
        return Push(repository, full_name, pusher, refs)

    def sign(self, secret: bytes, body: bytes, *, delivery: str, now: float) -> dict[str, str]:
        return {
            "X-Event-Key": "repo:refs_changed",
            "X-Request-Id": delivery,
            "X-Hub-Signature": "sha256=" + _hex_mac(secret, body),
        }


def gitee_signature(secret: bytes, timestamp: str) -> str:
    """Gitee's signature token: base64(HMAC-SHA256(secret, "<timestamp>\\n<secret>"))."""
    digest = hmac.new(secret, timestamp.encode() + b"\n" + secret, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class Gitee(_TokenForge):
    name = "gitee"
    markers = event_headers = ("x-gitee-event",)
    token_header = "X-Gitee-Token"
    # Gitee documents no delivery id: its millisecond timestamp stands for one where no
    # X-Gitee-Delivery comes
    delivery_headers = ("x-gitee-delivery", "x-gitee-timestamp")

    def token_refusal(self, secret: Secret, token: str, headers: Headers, now: float) -> str | None:
        stamp = headers.get("x-gitee-timestamp", "").strip()
        if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 15:
            return "missing or malformed X-Gitee-Timestamp header (milliseconds since the epoch)"
        signed = base64.b64encode(secret.mac_of_secret(stamp.encode() + b"\n")).decode()
        # either form is checked in full, so the time taken does not tell which one matched
        as_password = secret.same_as(token.encode())
        as_signature = hmac.compare_digest(signed.encode(), unquote(token).strip().encode())
        if not (as_password | as_signature):
            return "X-Gitee-Token does not match the secret"
        skew = int(stamp) / 1000 - now
        if abs(skew) > GITEE_WINDOW_SECONDS:
            where = "ahead of" if skew > 0 else "behind"
            return (f"X-Gitee-Timestamp is {abs(skew) / 60:.0f} min {where} this clock; "
                    "a delivery is accepted within an hour")  # fmt: skip
        return None

    def sign(self, secret: bytes, body: bytes, *, delivery: str, now: float) -> dict[str, str]:
        stamp = str(round(now * 1000))
        headers = {
            "X-Gitee-Event": "Push Hook",
            "X-Gitee-Timestamp": stamp,
            "X-Gitee-Token": gitee_signature(secret, stamp),
        }
        if delivery:
            headers["X-Gitee-Delivery"] = delivery
        return headers


#: in the order they are told apart: Gitea before GitHub (it sends GitHub's headers too);
#: GitHub last, as the forge of a request that names none
FORGES: tuple[Forge, ...] = (Gitea(), GitLab(), Gitee(), BitbucketServer(), GitHub())
BY_NAME: dict[str, Forge] = {f.name: f for f in FORGES}


def forge_of(headers: Headers) -> Forge:
    """The forge whose headers the request carries (GitHub's when it carries none)."""
    return next((f for f in FORGES if f.claims(headers)), FORGES[-1])
