"""Each sink's request (docs/notifications.md): the body in the vendor's shape and its signature, as
the vendor documents it. Pure: the event, the URL, the secret and the time in, a request out.

- Slack incoming webhook: ``{"text": ...}``.
- Feishu/Lark custom robot: ``{"msg_type": "text", "content": {"text": ...}}``; with a secret,
  ``timestamp`` (seconds) and ``sign`` = base64(HMAC-SHA256(key = "<timestamp>\\n<secret>",
  message = empty)) in the body.
- DingTalk custom robot: ``{"msgtype": "text", "text": {"content": ...}}``; with a secret,
  ``timestamp`` (milliseconds) and ``sign`` = urlencode(base64(HMAC-SHA256(key = secret,
  message = "<timestamp>\\n<secret>"))) as query parameters.
- WeCom robot: ``{"msgtype": "text", "text": {"content": ...}}``; no signature (the key is in
  the URL).
- Generic webhook, Standard Webhooks: the event as JSON; ``webhook-id`` (stable per event and
  sink, so a receiver drops a repeat), ``webhook-timestamp`` (seconds) and ``webhook-signature``
  ``v1,<base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))>``, the key being the secret's
  base64 after ``whsec_``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.notify.events import Event
from reconciler.policy.notify_config import NotifySink

WEBHOOK_SECRET_PREFIX = "whsec_"


class SecretRefused(ValueError):
    """A secret that cannot be used (the message never holds the secret)."""


@dataclass(frozen=True, slots=True)
class Request:
    """What goes on the wire; ``repr`` leaves out the URL and headers (they carry secrets)."""

    url: str = field(repr=False)
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


def message_id(sink: str, event: Event) -> str:
    """The event's id at ``sink``: the same at every attempt and after a restart."""
    digest = hashlib.sha256(f"{sink}\0{event.key}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


def _hmac(key: bytes, message: bytes) -> str:
    return base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()


def _json(data: object) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def _text(event: Event) -> str:
    lines = [event.text]
    if event.change:
        where = event.change.get("path")
        if event.change.get("line"):
            where = f"{where}:{event.change['line']}"
        lines.append(f"the change to merge: {where}: `{event.change.get('before')}` -> "
                     f"`{event.change.get('after')}`")
    return "\n".join(lines)


def build_request(sink: NotifySink, event: Event, *, url: str, secret: str | None,
                  now: float) -> Request:
    """The request for ``event`` at ``sink`` (``now``: wall seconds, for the signatures)."""
    text = _text(event)
    headers = {"Content-Type": "application/json"}
    if sink.type == "slack":
        return Request(url, _json({"text": text}), headers)
    if sink.type == "wecom":
        return Request(url, _json({"msgtype": "text", "text": {"content": text}}), headers)
    if sink.type == "feishu":
        body: dict[str, object] = {"msg_type": "text", "content": {"text": text}}
        if secret is not None:
            timestamp = str(int(now))
            body = {"timestamp": timestamp,
                    "sign": _hmac(f"{timestamp}\n{secret}".encode(), b""), **body}
        return Request(url, _json(body), headers)
    if sink.type == "dingtalk":
        if secret is not None:
            timestamp = str(int(now * 1000))
            sign = _hmac(secret.encode(), f"{timestamp}\n{secret}".encode())
            query = urllib.parse.urlencode({"timestamp": timestamp, "sign": sign})
            url = f"{url}{'&' if urllib.parse.urlsplit(url).query else '?'}{query}"
        return Request(url, _json({"msgtype": "text", "text": {"content": text}}), headers)
    if sink.type == "webhook":
        if secret is None:
            raise SecretRefused(f"sink {sink.name}: the webhook sink needs its secret")
        ident = message_id(sink.name, event)
        timestamp = str(int(now))
        body_bytes = _json({"type": f"rollout.{event.kind}", "timestamp": int(now),
                            "data": {**event.to_json(), "message": text}})
        key = webhook_key(secret, sink.name)
        signed = f"{ident}.{timestamp}.".encode() + body_bytes
        headers |= {"webhook-id": ident, "webhook-timestamp": timestamp,
                    "webhook-signature": f"v1,{_hmac(key, signed)}"}
        return Request(url, body_bytes, headers)
    raise SecretRefused(f"sink {sink.name}: unknown type {sink.type!r}")


def webhook_key(secret: str, sink: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: the base64 after ``whsec_``."""
    if not secret.startswith(WEBHOOK_SECRET_PREFIX):
        raise SecretRefused(f"sink {sink}: the secret file must hold a whsec_ secret")
    try:
        return base64.b64decode(secret[len(WEBHOOK_SECRET_PREFIX):], validate=True)
    except ValueError:
        raise SecretRefused(f"sink {sink}: the whsec_ secret is not base64") from None
