"""The official client's Lease API (``coordination.k8s.io/v1``), for leader election
(``reconciler.ops.leader`` keeps the algorithm and speaks to it through these)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s


def coordination_api(api_client: Any) -> Any:
    """``CoordinationV1Api`` over ``api_client`` (an official ``ApiClient``)."""
    return k8s.CoordinationV1Api(api_client)


def lease_spec(lease: Any) -> Any:
    """A Lease's spec, an empty one when the server sent none."""
    return lease.spec or k8s.V1LeaseSpec()
