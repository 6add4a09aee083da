"""Push deliveries as each forge sends them, for the webhook benchmarks (a helper module, not a
benchmark: bench/webhook.py and bench/sync_latency.py import it).

The headers come from ``Forge.sign`` (tested in tests/trust/test_forges.py against each forge's
vector); the payloads carry the fields the receiver reads, in each forge's own shape.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.clock import wall
from reconciler.trust.forges import Forge


def push_payload(forge: Forge, full_name: str, after: str, before: str = "") -> dict[str, Any]:
    """A push of ``main`` in ``full_name`` (``owner/name``) to ``after``, as ``forge`` says it."""
    ref = "refs/heads/main"
    if forge.name == "gitlab":
        return {
            "object_kind": "push",
            "ref": ref,
            "before": before,
            "after": after,
            "user_username": "bench",
            "project": {"path_with_namespace": full_name},
        }
    if forge.name == "bitbucket-server":
        key, slug = full_name.split("/")
        return {
            "eventKey": "repo:refs_changed",
            "actor": {"name": "bench"},
            "repository": {"slug": slug, "project": {"key": key}},
            "changes": [{"refId": ref, "fromHash": before, "toHash": after, "type": "UPDATE"}],
        }
    # GitHub's shape, which Gitea, Forgejo and Gitee share
    return {
        "ref": ref,
        "before": before,
        "after": after,
        "repository": {"full_name": full_name},
        "pusher": {"name": "bench"},
    }


def delivery(
    forge: Forge, secret: bytes, full_name: str, after: str, delivery_id: str
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one push delivery (a fresh id each, so none is a repeat)."""
    body = json.dumps(push_payload(forge, full_name, after)).encode()
    headers = forge.sign(secret, body, delivery=delivery_id, now=wall())
    return body, {"Content-Type": "application/json", **headers}
