"""``notify:`` of ``reconciler.yaml`` (docs/notifications.md): the sinks events go to, typed. Pure:
the section as parsed in, frozen sinks (or a ``RepoConfigError`` naming the key) out.

A sink names where its URL and secret live, never the secret: Slack and WeCom URLs carry
their key (``urlFile`` only); Feishu/Lark, DingTalk and the generic webhook sign with the
secret in ``secretFile`` (the generic webhook must). The files are read at each send."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from reconciler.files import unsafe

#: every event kind, in the order the docs list them; a sink without ``events`` gets all
EVENT_KINDS: Final = ("gate", "fallback", "health", "rollback", "completed", "rejected",
                      "promotion", "window")
SINK_TYPES: Final = ("slack", "feishu", "dingtalk", "wecom", "webhook")
#: the sinks whose URL holds their key: only ``urlFile``, never ``url``
URL_IS_SECRET: Final = frozenset({"slack", "wecom"})
#: the sinks that sign with ``secretFile`` (``webhook``: required)
SIGNING: Final = frozenset({"feishu", "dingtalk", "webhook"})


class NotifyConfigError(ValueError):
    """The section does not validate; the message names the key."""


@dataclass(frozen=True, slots=True)
class NotifySink:
    name: str
    type: str  # one of SINK_TYPES
    url: str | None = None
    url_file: str | None = None
    secret_file: str | None = None
    events: frozenset[str] = frozenset(EVENT_KINDS)

    def wants(self, kind: str) -> bool:
        return kind in self.events


def read_notify(value: Any, *, label: str = "notify") -> tuple[NotifySink, ...]:
    """The sinks of a ``notify`` section (None: none). Raises ``NotifyConfigError``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise NotifyConfigError(f"{label}: expected a list of sinks")
    sinks: list[NotifySink] = []
    for index, raw in enumerate(value):
        sink = _sink(raw, f"{label}[{index}]")
        if any(s.name == sink.name for s in sinks):
            raise NotifyConfigError(f"{label}[{index}].name: {sink.name!r} is used twice (the "
                                    "name keys what was sent)")
        sinks.append(sink)
    return tuple(sinks)


def _sink(raw: Any, label: str) -> NotifySink:
    if not isinstance(raw, Mapping):
        raise NotifyConfigError(f"{label}: expected a mapping")
    unknown = sorted(set(raw) - {"name", "type", "url", "urlFile", "secretFile", "events"})
    if unknown:
        raise NotifyConfigError(f"{label}: unknown key {unknown[0]!r}")
    name, kind = raw.get("name"), raw.get("type")
    if not isinstance(name, str) or not name:
        raise NotifyConfigError(f"{label}.name: expected a non-empty string")
    if kind not in SINK_TYPES:
        raise NotifyConfigError(f"{label}.type: expected one of {', '.join(SINK_TYPES)}, got "
                                f"{kind!r}")
    url, url_file, secret_file = (_optional(raw, key, label)
                                  for key in ("url", "urlFile", "secretFile"))
    if (url is None) == (url_file is None):
        raise NotifyConfigError(f"{label}: expected exactly one of url, urlFile")
    if kind in URL_IS_SECRET and url is not None:
        raise NotifyConfigError(f"{label}.url: a {kind} URL holds its key: put it in a file "
                                "named by urlFile")
    problem = None if url is None else sink_url_problem(url)
    if problem is not None:
        raise NotifyConfigError(f"{label}.url: {problem}")
    if secret_file is not None and kind not in SIGNING:
        raise NotifyConfigError(f"{label}.secretFile: a {kind} sink does not sign")
    if kind == "webhook" and secret_file is None:
        raise NotifyConfigError(f"{label}.secretFile: the webhook sink signs (Standard "
                                "Webhooks): name the file with its whsec_ secret")
    events = raw.get("events")
    if events is None:
        chosen = frozenset(EVENT_KINDS)
    elif isinstance(events, list) and events and all(e in EVENT_KINDS for e in events):
        chosen = frozenset(events)
    else:
        raise NotifyConfigError(f"{label}.events: expected a list of {', '.join(EVENT_KINDS)}")
    return NotifySink(name=name, type=str(kind), url=url, url_file=url_file,
                      secret_file=secret_file, events=chosen)


def sink_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be posted to (None: it can): an http(s) URL with a host and a port
    in range, without spaces or control characters (a line break would forge a header)."""
    if any(unsafe(char) or char.isspace() for char in url):
        return "a URL cannot hold spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a bracket that is not an IPv6 address, a port that is no number
        return "not a valid URL (its host or port)"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "expected an http(s) URL with a host"
    if port == 0:
        return "port 0 cannot be posted to"
    return None


def _optional(raw: Mapping[str, Any], key: str, label: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise NotifyConfigError(f"{label}.{key}: expected a non-empty string")
    return value
