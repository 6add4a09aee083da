"""Semantic rules of ``rollout`` in ``reconciler.yaml`` (docs/live-clusters.md and
docs/rollout.md#topology-aware-waves), at the top level and in ``clusters.<name>``: what the schema
cannot say. A label selector that does not parse, a label key that is not one (there and in
``firmware.nodeLabels``), and a
``waitFor.timeout`` without ``drain`` in the settings a cluster ends up with (its own keys over the
repository-wide ones, key by key), each located in the file.

Like the other rules they judge only values whose type the schema accepted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from reconciler.durations import parse_duration
from reconciler.policy.document import ParsedDocument
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.label_selector import LabelSelector, LabelSelectorError, label_key_error


def rollout_rules(doc: ParsedDocument) -> Iterator[Finding]:
    obj = doc.obj
    if not isinstance(obj, dict):
        return
    yield from _firmware_label_keys(doc, obj.get("firmware"))
    wide = obj.get("rollout")
    wide = wide if isinstance(wide, dict) else {}
    yield from _section(doc, "/rollout", wide)
    clusters = obj.get("clusters")
    if isinstance(clusters, dict):
        for name, settings in clusters.items():
            own = settings.get("rollout") if isinstance(settings, dict) else None
            if isinstance(own, dict):
                pointer = join_pointer(join_pointer("/clusters", name), "rollout")
                yield from _section(doc, pointer, own)
                yield from _wait_without_drain(doc, pointer, {**wide, **own}, own)
    yield from _wait_without_drain(doc, "/rollout", wide, wide)


def _section(doc: ParsedDocument, pointer: str, section: Mapping[str, Any]) -> Iterator[Finding]:
    yield from _duration(doc, f"{pointer}/readyTimeout", section.get("readyTimeout"))
    if _seconds(section.get("readyTimeout")) == 0:
        yield doc.finding(f"{pointer}/readyTimeout", "rollout-duration",
                          "readyTimeout: must be longer than 0 (a new driver pod would get no "
                          "time to become Ready and every node would fail)")
    drain = section.get("drain")
    if (isinstance(drain, dict) and _seconds(drain.get("timeout")) == 0
            and drain.get("onTimeout") == "delete"):
        yield doc.finding(f"{pointer}/drain/timeout", "rollout-drain-delete-at-once",
                          "drain.timeout 0 with onTimeout: delete deletes every pod at once, "
                          "past its PodDisruptionBudget: give the evictions time (the "
                          "default is 15m)", warning=True)
    for key in ("drain", "waitFor"):
        part = section.get(key)
        if isinstance(part, dict):
            yield from _duration(doc, f"{pointer}/{key}/timeout", part.get("timeout"))
        selector = part.get("podSelector") if isinstance(part, dict) else None
        if isinstance(selector, str):
            try:
                LabelSelector.parse(selector)
            except LabelSelectorError as exc:
                yield doc.finding(f"{pointer}/{key}/podSelector", "rollout-selector", str(exc))
    topology = section.get("topology")
    label_key = topology.get("key") if isinstance(topology, dict) else None
    if isinstance(label_key, str):
        error = label_key_error(label_key)
        if error is not None:
            yield doc.finding(f"{pointer}/topology/key", "rollout-label-key", error)


def _firmware_label_keys(doc: ParsedDocument, firmware: object) -> Iterator[Finding]:
    """``firmware.nodeLabels``: a key no node can carry would read as "label absent" on every
    node, silently turning a preflight refusal (vfio-pci, virtual machine, multi-host) off."""
    labels = firmware.get("nodeLabels") if isinstance(firmware, dict) else None
    for name, key in (labels or {}).items() if isinstance(labels, dict) else ():
        error = label_key_error(key) if isinstance(key, str) and key else None
        if error is not None:
            yield doc.finding(f"/firmware/nodeLabels/{name}", "firmware-label-key",
                              f"firmware.nodeLabels.{name}: {error}")


def _seconds(value: object) -> float | None:
    """A duration setting's seconds (``0`` is zero); None when it is no duration."""
    if value == 0 and not isinstance(value, bool):
        return 0.0
    if not isinstance(value, str):
        return None
    try:
        return parse_duration(value.strip())
    except ValueError:
        return None


def _duration(doc: ParsedDocument, pointer: str, value: object) -> Iterator[Finding]:
    """A duration the schema's pattern accepts but no clock can count (``99...9h``: infinite
    seconds), which the controller would refuse."""
    if not isinstance(value, str):
        return
    try:
        seconds = parse_duration(value.strip())
    except ValueError:
        return  # the schema's pattern reported it
    if not math.isfinite(seconds):
        shown = value if len(value) <= 40 else f"{value[:20]}...{value[-5:]}"
        yield doc.finding(pointer, "rollout-duration",
                          f"duration {shown!r} is too large to count; write at most a few "
                          "days, such as '72h'")


def _wait_without_drain(doc: ParsedDocument, pointer: str, effective: Mapping[str, Any],
                        own: Mapping[str, Any]) -> Iterator[Finding]:
    """A ``waitFor.timeout`` drains the node after it: it needs ``drain``. Reported where the
    timeout is written (a cluster that only removes nothing inherits it: reported once, at the
    top level)."""
    wait_for = effective.get("waitFor")
    timeout = wait_for.get("timeout") if isinstance(wait_for, dict) else None
    if _seconds(timeout) in (None, 0.0) or effective.get("drain") is not None:
        return
    if "waitFor" not in own and "drain" not in own:
        return  # the section it comes from is judged on its own
    place = pointer if "waitFor" in own else "/rollout"
    yield doc.finding(f"{place}/waitFor/timeout", "rollout-wait-without-drain",
                      "waitFor.timeout drains the node after it, but drain is not set "
                      "(set rollout.drain, or timeout: 0)")
