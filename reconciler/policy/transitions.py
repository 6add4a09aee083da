"""Transition rules (docs/rollout.md#starting-a-rollout and docs/firmware.md): what may change given
the spec the cluster runs.

During an active rollout only ``enableRollout`` and ``pause`` may change. While a firmware
upgrade runs, its parameters may not change and no driver rollout may start. The proposed spec
is compared with the spec the cluster runs, including the rollout controller's own changes, so
the reconciler's write-back commits never trip these rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from reconciler.names import ACTIVE_PHASES, FIRMWARE_IDLE_PHASES
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.payload import normalize_version
from reconciler.policy.rules import RuleContext
from reconciler.policy.schema import describe_value

#: The only fields a person may change during an active rollout
#: (docs/rollout.md#starting-a-rollout).
MUTABLE_DURING_ROLLOUT = frozenset({
    "/spec/driver/upgradePolicy/enableRollout",
    "/spec/driver/upgradePolicy/pause",
})
FIRMWARE_PARAMETERS = ("fwUpgradePolicy", "fwEnableVirt", "fwEffectPolicy")
_PAYLOAD_VERSION = "/spec/driver/payload/version"


def firmware_upgrade_running(firmware_phase: str | None) -> bool:
    return firmware_phase is not None and firmware_phase not in FIRMWARE_IDLE_PHASES


def spec_changes(old: Any, new: Any, pointer: str = "/spec") -> Iterator[tuple[str, Any, Any]]:
    """(pointer, old value, new value) for each changed leaf; a missing side is ``_MISSING``."""
    if isinstance(old, dict) and isinstance(new, dict):
        for name in [*old, *(k for k in new if k not in old)]:
            yield from spec_changes(
                old.get(name, _MISSING), new.get(name, _MISSING), join_pointer(pointer, name))
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from spec_changes(a, b, join_pointer(pointer, index))
        return
    if (pointer == _PAYLOAD_VERSION and isinstance(old, str) and isinstance(new, str)
            and normalize_version(old) == normalize_version(new)):
        # 2.33.0.9 and 2.33.0.9-amd64 name the same image
        # (docs/policy.md#the-objects-in-the-cluster)
        return
    if type(old) is not type(new) or old != new:
        yield pointer, old, new


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def _shown(value: Any) -> str:
    return "not set" if value is _MISSING else describe_value(value)


def _label(pointer: str) -> str:
    return pointer.removeprefix("/spec/").replace("/", ".")


def transition_rules(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.previous_spec is None or not isinstance(ctx.doc.obj, dict):
        return
    new_spec = ctx.doc.obj.get("spec")
    if not isinstance(new_spec, dict):
        return
    changes = list(spec_changes(ctx.previous_spec, new_spec))
    if ctx.phase in ACTIVE_PHASES:
        for pointer, old, new in changes:
            if pointer in MUTABLE_DURING_ROLLOUT:
                continue
            extra = ""
            if pointer == "/spec/driver/fwUpgradePolicy":
                extra = " (a firmware upgrade never runs during a driver rollout)"
            yield _at(ctx, pointer, new, "transition-locked-field",
                      f"{_label(pointer)} cannot change while the rollout is {ctx.phase}"
                      f"{extra}: was {_shown(old)}, now {_shown(new)}. Only "
                      "upgradePolicy.enableRollout and upgradePolicy.pause may change until the "
                      "rollout ends; revert this change (pause: true holds the rollout, "
                      "enableRollout: false rolls it back)")
    if firmware_upgrade_running(ctx.firmware_phase):
        for pointer, old, new in changes:
            name = pointer.removeprefix("/spec/driver/")
            if name in FIRMWARE_PARAMETERS:
                yield _at(ctx, pointer, new, "firmware-locked-field",
                          f"{_label(pointer)} cannot change while a firmware upgrade is running "
                          f"(phase {ctx.firmware_phase}): was {_shown(old)}, now {_shown(new)}; "
                          "the orchestrator sets fwUpgradePolicy: Never itself when every node "
                          "is verified")
            elif pointer.startswith("/spec/driver/payload/"):
                yield _at(ctx, pointer, new, "firmware-rollout-conflict",
                          f"{_label(pointer)} cannot change while a firmware upgrade is running "
                          f"(phase {ctx.firmware_phase}): a driver rollout and a firmware upgrade "
                          "never run at the same time; merge this after the firmware upgrade")


def _at(ctx: RuleContext, pointer: str, new: Any, rule: str, message: str) -> Finding:
    # a removed field is reported at its parent, where a person puts it back; a changed
    # collection at its key
    key = new is _MISSING or isinstance(new, dict | list)
    return ctx.doc.finding(pointer, rule, message, key=key)


def previous_spec_of(previous: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Accepts a whole object (with ``spec``) or a bare spec."""
    if previous is None:
        return None
    spec = previous.get("spec") if "spec" in previous or "apiVersion" in previous else previous
    return spec if isinstance(spec, Mapping) else {}
