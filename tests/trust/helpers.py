"""Shared by the webhook tests: a trigger that records, and each forge's documented push
payload (``pushes/<forge>.json``) with the repository an operator would configure to watch it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from reconciler.trust.forges import FORGES
from reconciler.trust.webhook import PushEvent

PUSHES = Path(__file__).parent / "pushes"
#: the watched repository as an operator would configure it for each forge's push payload
WATCHED = {
    "github": "git@github.com:example-org/gpu-fleet.git",
    "gitea": "https://gitea.example.org/example-org/gpu-fleet.git",
    "gitlab": "https://gitlab.example.org/platform/gpu-fleet.git",
    "bitbucket-server": "https://bitbucket.example.org/scm/plat/gpu-fleet.git",
    "gitee": "example-org/gpu-fleet",
}
NAMES = [f.name for f in FORGES]


class Recorder:
    """A trigger that records each push event and signals the first."""

    def __init__(self) -> None:
        self.events: list[PushEvent] = []
        self.fired = threading.Event()

    def __call__(self, event: PushEvent) -> None:
        self.events.append(event)
        self.fired.set()


def push_body(forge: str, *, ref: str = "refs/heads/main", before: str = "1" * 40,
              after: str = "a" * 40, pad: int = 0) -> bytes:  # fmt: skip
    """The forge's documented push payload with these values (``pad``: extra bytes)."""
    text = (PUSHES / f"{forge}.json").read_text()
    for key, value in (("REF", ref), ("BEFORE", before), ("AFTER", after)):
        text = text.replace("{{" + key + "}}", value)
    data = json.loads(text)
    if pad:
        data["padding"] = "x" * pad
    return json.dumps(data).encode()
