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


#: how each sink type is named in messages
_SHOWN: Final = {"slack": "a Slack incoming-webhook URL", "wecom": "a WeCom group robot URL"}
_SIGNER: Final = {"slack": "Slack incoming webhooks do not sign requests",
                  "wecom": "WeCom group robots do not sign requests"}
#: how to make a generic webhook's secret (docs/notifications.md#setup-per-vendor)
_MAKE_SECRET: Final = 'echo "whsec_$(head -c 32 /dev/urandom | base64)"'


@dataclass(frozen=True, slots=True)
class SinkProblem:
    """Why a sink cannot work, and the fix: ``key`` the key it is about (None: the sink as a
    whole), ``rule`` the finding's rule (``reconciler validate``), ``message`` without the
    sink's label."""

    key: str | None
    rule: str
    message: str


def sink_problems(raw: Mapping[str, Any]) -> list[SinkProblem]:
    """The rules of one sink a JSON Schema cannot explain (docs/notifications.md#keys), each with
    its fix. Judges only the keys whose type is right (the schema says why the others are
    wrong): an unknown ``type`` has no rules to judge."""
    kind = raw.get("type")
    if kind is None:
        return [SinkProblem(None, "notify-type",
                            "no type: say which receiver this is, type: "
                            f"{', '.join(SINK_TYPES[:-1])} or {SINK_TYPES[-1]}")]
    if kind not in SINK_TYPES:
        return []
    problems: list[SinkProblem] = []
    url, url_file = raw.get("url"), raw.get("urlFile")
    if kind in URL_IS_SECRET:
        if url is not None:
            problems.append(SinkProblem(
                "url", "notify-url-is-secret",
                f"{_SHOWN[kind]} holds its key: put it in a file and give urlFile (a mounted "
                f"Secret, e.g. urlFile: /etc/reconciler/notify/{kind}-url); url is refused for "
                f"{kind}, so the key is never in Git"))
        elif url_file is None:
            problems.append(SinkProblem(
                None, "notify-url-or-file",
                f"no urlFile: {_SHOWN[kind]} holds its key: put it in a file and give urlFile "
                f"(a mounted Secret, e.g. urlFile: /etc/reconciler/notify/{kind}-url)"))
        if raw.get("secretFile") is not None:
            problems.append(SinkProblem(
                "secretFile", "notify-secret-file",
                f"{_SIGNER[kind]} (the URL is the secret): remove secretFile"))
        return problems
    if url is not None and url_file is not None:
        problems.append(SinkProblem(
            "urlFile", "notify-url-or-file",
            "url and urlFile both given: keep one (urlFile when the URL holds a token)"))
    elif url is None and url_file is None:
        problems.append(SinkProblem(
            None, "notify-url-or-file",
            "no url or urlFile: give where events are posted, url: https://... or urlFile: a "
            "file that holds it (when the URL holds a token)"))
    if kind == "webhook" and raw.get("secretFile") is None:
        problems.append(SinkProblem(
            None, "notify-secret-file",
            "no secretFile: a webhook sink signs each request (Standard Webhooks): add "
            "secretFile, a file that holds whsec_ and the key in base64 (make one with "
            f"{_MAKE_SECRET} and give it to the receiver too)"))
    return problems


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
            raise NotifyConfigError(f"{label}[{index}].name: {duplicate_name(sink.name)}")
        sinks.append(sink)
    return tuple(sinks)


def duplicate_name(name: str) -> str:
    return (f"{name!r} is used twice: give each sink its own name (the name keys the events "
            "already sent)")


def _sink(raw: Any, label: str) -> NotifySink:
    if not isinstance(raw, Mapping):
        raise NotifyConfigError(f"{label}: expected a mapping")
    unknown = sorted(set(raw) - {"name", "type", "url", "urlFile", "secretFile", "events"})
    if unknown:
        raise NotifyConfigError(f"{label}: unknown key {unknown[0]!r}")
    name, kind = raw.get("name"), raw.get("type")
    if not isinstance(name, str) or not name:
        raise NotifyConfigError(f"{label}.name: expected a non-empty string")
    if kind is not None and kind not in SINK_TYPES:
        raise NotifyConfigError(f"{label}.type: expected one of {', '.join(SINK_TYPES)}, got "
                                f"{kind!r}")
    url, url_file, secret_file = (_optional(raw, key, label)
                                  for key in ("url", "urlFile", "secretFile"))
    problems = sink_problems(raw)
    if problems:
        first = problems[0]
        raise NotifyConfigError(f"{label}.{first.key}: {first.message}" if first.key
                                else f"{label}: {first.message}")
    problem_text = None if url is None else sink_url_problem(url)
    if problem_text is not None:
        raise NotifyConfigError(f"{label}.url: {problem_text}")
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
