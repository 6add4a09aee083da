"""The firmware request annotation on the ClusterOperator (contract with the sync role)."""

from __future__ import annotations

import json
from typing import Any

from reconciler.firmware.model import FirmwareRequest
from reconciler.names import REQUEST_ANNOTATION


class RequestError(ValueError):
    pass


def firmware_request_annotation(
    *, enable_virt: bool, source_commit: str | None, expected_version: str | None = None,
) -> tuple[str, str]:
    """``(annotation key, value)`` the sync role sets instead of applying ``PreferCloud``."""
    request = FirmwareRequest("PreferCloud", enable_virt, source_commit, expected_version)
    return REQUEST_ANNOTATION, json.dumps(request.to_json(), sort_keys=True)


def parse_request(value: str) -> FirmwareRequest:
    """The request in an annotation value; RequestError says what is wrong with it."""
    try:
        raw: Any = json.loads(value)
    except json.JSONDecodeError as exc:
        raise RequestError(f"{REQUEST_ANNOTATION} is not JSON: {exc.msg} at column "
                           f"{exc.colno}") from exc
    if not isinstance(raw, dict):
        raise RequestError(f"{REQUEST_ANNOTATION}: expected a JSON object")
    unknown = sorted(set(raw) - {"fwUpgradePolicy", "fwEnableVirt", "sourceCommit",
                                 "expectedVersion"})
    if unknown:
        raise RequestError(f"{REQUEST_ANNOTATION}: unknown key(s) {', '.join(unknown)}")
    policy = raw.get("fwUpgradePolicy")
    if policy != "PreferCloud":
        raise RequestError(f"{REQUEST_ANNOTATION}: fwUpgradePolicy must be PreferCloud, "
                           f"got {policy!r}")
    virt = raw.get("fwEnableVirt", False)
    if not isinstance(virt, bool):
        raise RequestError(f"{REQUEST_ANNOTATION}: fwEnableVirt: expected boolean, got "
                           f"{type(virt).__name__} {virt!r}")
    commit = raw.get("sourceCommit")
    if commit is not None and not isinstance(commit, str):
        raise RequestError(f"{REQUEST_ANNOTATION}: sourceCommit: expected a string")
    expected = raw.get("expectedVersion")
    if expected is not None and not isinstance(expected, str):
        raise RequestError(f"{REQUEST_ANNOTATION}: expectedVersion: expected a string "
                           "(quote it)")
    return FirmwareRequest(policy, virt, commit, expected)
