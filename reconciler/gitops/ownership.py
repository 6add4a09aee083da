"""Who owns a field the rollout controller changed: Git or the cluster
(docs/gitops.md#git-stays-the-truth).

Pure. The controller changes a few fields itself (``pause`` at a gate or on failure, the payload
version on rollback, ``fwUpgradePolicy`` after firmware). For such a field, Git's value is applied
again only when the new commit changes that field compared with the last commit applied (a
person's decision: releasing a gate, asking for a version again); otherwise the cluster's value is
kept and, if Git says otherwise, written back to Git. So neither an old commit, nor an unrelated
newer one, nor one made before the write-back landed can release a gate or re-request a reverted
version. Every other field is Git's: a change made directly in the cluster is drift and Git wins.

"The last commit applied" includes the reconciler's own write-back commits once they have landed
(``record_write_back``): after ``pause: true`` is in Git, a person's ``pause: false`` is a change.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from reconciler.fieldpath import MISSING, FieldPath, ensure, resolve, section
from reconciler.gitops.edits import same_value

#: fields the rollout controller (field manager ``gpu-rollout-controller``) may change
CONTROLLER_FIELDS: tuple[FieldPath, ...] = (
    ("spec", "driver", "upgradePolicy", "pause"),
    ("spec", "driver", "payload", "version"),
    ("spec", "driver", "fwUpgradePolicy"),
)
CONTROLLER_FIELD_MANAGER = "gpu-rollout-controller"


@dataclass(frozen=True, slots=True)
class FieldDecision:
    field: FieldPath
    source: Literal["git", "cluster"]
    git_value: Any
    cluster_value: Any
    #: Git says something else than the cluster keeps: commit the cluster's value to Git
    write_back: bool
    reason: str


@dataclass(frozen=True, slots=True)
class OwnershipPlan:
    decisions: tuple[FieldDecision, ...]
    #: the spec to apply: the new commit's, with the kept cluster values in place
    spec: Mapping[str, Any]

    @property
    def kept(self) -> tuple[FieldPath, ...]:
        """Fields the sync leaves to the controller (left out of its server-side apply)."""
        return tuple(d.field for d in self.decisions if d.source == "cluster")

    @property
    def write_backs(self) -> tuple[FieldDecision, ...]:
        return tuple(d for d in self.decisions if d.write_back)


def decide_ownership(
    *,
    last_applied: Mapping[str, Any] | None,
    proposed: Mapping[str, Any],
    cluster: Mapping[str, Any],
    controller_changed: Iterable[FieldPath],
) -> OwnershipPlan:
    """Per field the controller changed, whether Git's value or the cluster's is applied.

    ``last_applied``/``proposed``/``cluster`` are whole objects (``{"spec": ...}``) at the last
    applied commit, the new commit, and in the cluster. ``last_applied`` None (nothing known, e.g.
    a first start without a status snapshot) counts as "the commit did not change the field": the
    cluster's value is kept, so no gate is ever released without a person's change to prove it.
    """
    decisions = []
    spec = copy.deepcopy(dict(proposed))
    for field in dict.fromkeys(tuple(f) for f in controller_changed):
        git_value = resolve(proposed, field)
        cluster_value = resolve(cluster, field)
        last_value = resolve(last_applied, field) if last_applied is not None else MISSING
        changed_by_commit = last_applied is not None and not same_value(
            field, git_value, last_value
        )
        if changed_by_commit:
            decisions.append(FieldDecision(
                field, "git", git_value, cluster_value, write_back=False,
                reason=f"the new commit changes it ({last_value!r} -> {git_value!r})",
            ))
            continue
        differs = not same_value(field, git_value, cluster_value)
        decisions.append(FieldDecision(
            field, "cluster", git_value, cluster_value, write_back=differs,
            reason="the controller changed it and no new commit changed it since"
            + ("; Git is behind" if differs else ""),
        ))
        ensure(spec, field, cluster_value)
    return OwnershipPlan(tuple(decisions), spec)


def record_write_back(
    last_applied: Mapping[str, Any], field: Sequence[str], value: Any
) -> dict[str, Any]:
    """The baseline after our write-back of ``field = value`` landed in Git."""
    result = copy.deepcopy(dict(last_applied))
    ensure(result, tuple(field), value)
    return result


def controller_changed_fields(
    managed_fields: Iterable[Mapping[str, Any]],
    *,
    manager: str = CONTROLLER_FIELD_MANAGER,
    candidates: Iterable[FieldPath] = CONTROLLER_FIELDS,
) -> set[FieldPath]:
    """Which of ``candidates`` ``manager`` owns, from ``metadata.managedFields`` (FieldsV1)."""
    owned: set[FieldPath] = set()
    for entry in managed_fields:
        if entry.get("manager") != manager or entry.get("fieldsType", "FieldsV1") != "FieldsV1":
            continue
        fields = section(entry, ("fieldsV1",))
        for candidate in candidates:
            node: Any = fields
            for name in candidate:
                node = node.get(f"f:{name}") if isinstance(node, Mapping) else None
                if node is None:
                    break
            if node is not None:
                owned.add(tuple(candidate))
    return owned
