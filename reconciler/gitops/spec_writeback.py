"""The rollout's own changes to the policy, committed to Git (docs/gitops.md#git-stays-the-truth).

Each write-back is its own commit on the policy branch with a message that says why, pushed
through the ``Publisher`` like status snapshots. Each edit names the value it replaces, so if a
person changed the same field in the meantime their commit wins and ours is dropped (visible
through ``Publisher.on_skipped``).
"""

from __future__ import annotations

import hashlib

from reconciler.clock import Clock, wall
from reconciler.config.sync import SyncSettings
from reconciler.gitops.commits import (
    PROMOTION_TRAILER,
    ROLLOUT_STEP_TRAILER,
    SOURCE_COMMIT_TRAILER,
    WINDOW_TRAILER,
)
from reconciler.gitops.edits import (
    ANY,
    FW_UPGRADE_POLICY_FIELD,
    PAUSE_FIELD,
    PAYLOAD_VERSION_FIELD,
    FieldEdit,
)
from reconciler.gitops.publisher import ChangeKind, PendingChange, Publisher


class SpecWriteBack:
    def __init__(
        self,
        publisher: Publisher,
        *,
        config: SyncSettings | None = None,
        clock: Clock = wall,
    ) -> None:
        self.publisher = publisher
        self.config = config or SyncSettings()
        self._clock = clock

    def pause(
        self, cluster: str, *, reason: str, step: str | None = None,
        source_commit: str | None = None,
    ) -> PendingChange:
        """``pause: true``: the rollout stopped at a manual gate or on a failure fallback."""
        return self._submit(
            cluster,
            subject=_pause_subject(cluster, step, reason),
            body=f"The rollout controller paused the rollout ({reason}) and set "
            "spec.driver.upgradePolicy.pause: true in the cluster. Merge a change to "
            "`pause: false` to release the next batch.",
            edits=(FieldEdit(PAUSE_FIELD, True, ANY),),
            step=step,
            source_commit=source_commit,
        )

    def health_pause(
        self, cluster: str, *, reason: str, step: str | None = None,
        source_commit: str | None = None,
    ) -> PendingChange:
        """Operator mode (docs/health.md#operator-mode): ``pause: true`` because a node check failed
        on a node the vendor upgraded, or the ``health`` section does not validate. The sync role
        decided it, not the cluster: applied like a person's commit (``kind: health``), so a sync of
        a commit that raced it cannot leave the cluster unpaused once it landed."""
        return self._submit(
            cluster,
            subject=_pause_subject(cluster, step, reason),
            body=f"The vendor operator runs the rollout; the sync role paused it ({reason}) "
            "and set spec.driver.upgradePolicy.pause: true in the cluster. Merge a change to "
            "`pause: false` to let the vendor go on.",
            edits=(FieldEdit(PAUSE_FIELD, True, ANY),),
            step=step,
            source_commit=source_commit,
            kind="health",
        )

    def restore_payload_version(
        self, cluster: str, *, version: str, rolled_back: str, reason: str,
        step: str | None = None, source_commit: str | None = None,
    ) -> PendingChange:
        """``payload.version`` back to ``version`` after ``rolled_back`` was rolled back.

        Dropped if a person already changed the version away from ``rolled_back``.
        """
        return self._submit(
            cluster,
            subject=f"policy({cluster}): restore driver {version} after rolling back "
            f"{rolled_back}",
            body=f"{rolled_back} was rolled back ({reason}); the cluster runs {version} again, "
            "so Git says so too and nothing asks for the failed version any more.",
            edits=(FieldEdit(PAYLOAD_VERSION_FIELD, version, rolled_back),),
            step=step,
            source_commit=source_commit,
        )

    def firmware_never(
        self, cluster: str, *, reason: str = "firmware upgrade finished",
        source_commit: str | None = None, expected: str = "PreferCloud",
    ) -> PendingChange:
        """``fwUpgradePolicy: Never`` once the firmware upgrade flow is done."""
        return self._submit(
            cluster,
            subject=f"policy({cluster}): set fwUpgradePolicy: Never: {reason}",
            body=f"The firmware orchestrator set fwUpgradePolicy back to Never in the cluster "
            f"({reason}), so a later merge does not start another firmware upgrade.",
            edits=(FieldEdit(FW_UPGRADE_POLICY_FIELD, "Never", expected),),
            step=None,
            source_commit=source_commit,
        )

    def promote(
        self, cluster: str, *, version: str, replaces: str | None, upstream: str,
        finished_at: str, soak: str,
    ) -> PendingChange:
        """``mode: auto`` (docs/configuration.md#promotion): ``payload.version`` to ``version`` once
        it passed the gate.

        A policy change like a person's (``kind: promotion``): the sync applies it. Its change
        id is derived from the cluster, the version and the upstream's completion, so a restart
        never commits the same promotion twice; dropped if a person changed the version away
        from ``replaces`` in the meantime.
        """
        change_id = hashlib.sha256(
            f"promotion\0{cluster}\0{version}\0{upstream}\0{finished_at}".encode()).hexdigest()[:32]
        change = PendingChange(
            kind="promotion",
            cluster=cluster,
            path=self.config.cluster_dir(cluster),
            subject=f"policy({cluster}): promote the driver to {version} after {upstream}",
            body=f"{upstream} completed {version} at {finished_at} and the promotion gate "
            f"passed (soak {soak}); promotion mode auto commits the change, and it is applied "
            "like a person's.",
            trailers=((PROMOTION_TRAILER, cluster),),
            created_at=self._clock(),
            edits=(FieldEdit(PAYLOAD_VERSION_FIELD, version,
                             replaces if replaces is not None else ANY),),
            change_id=change_id,
        )
        self.publisher.enqueue(change)
        return change

    def window_pause(self, cluster: str, *, pause: bool, reason: str, edge: str
                     ) -> PendingChange:
        """Operator mode (docs/configuration.md#maintenance-windows): ``pause: true`` when a
        maintenance window closed, ``pause: false`` when the next opened (``edge``: the instant, RFC
        3339). Applied like a person's commit (``kind: window``), marked ``Reconciler-Window:
        pause|resume`` so a restarted sync knows its own pause; one change id per edge (never
        committed twice); the edit names the value it replaces, so a person's change in between
        wins."""
        action = "pause" if pause else "resume"
        change_id = hashlib.sha256(
            f"window\0{cluster}\0{action}\0{edge}".encode()).hexdigest()[:32]
        change = PendingChange(
            kind="window",
            cluster=cluster,
            path=self.config.cluster_dir(cluster),
            subject=(f"policy({cluster}): {'pause' if pause else 'resume'} the rollout: "
                     f"{reason}"),
            body=("The vendor operator runs the rollout and knows no maintenance windows, so "
                  f"the sync role sets spec.driver.upgradePolicy.pause: {str(pause).lower()} "
                  "at the window's edge (docs/configuration.md#maintenance-windows). "
                  + ("It sets pause: false itself when the next window opens; a person's "
                     "pause is never undone." if pause else
                     "Only the window's own pause is undone.")),
            trailers=((WINDOW_TRAILER, action),),
            created_at=self._clock(),
            edits=(FieldEdit(PAUSE_FIELD, pause, not pause),),
            change_id=change_id,
        )
        self.publisher.enqueue(change)
        return change

    def _submit(
        self, cluster: str, *, subject: str, body: str, edits: tuple[FieldEdit, ...],
        step: str | None, source_commit: str | None, kind: ChangeKind = "spec",
    ) -> PendingChange:
        trailers: list[tuple[str, str]] = []
        if source_commit:
            trailers.append((SOURCE_COMMIT_TRAILER, source_commit))
        if step:
            trailers.append((ROLLOUT_STEP_TRAILER, step))
        change = PendingChange(
            kind=kind,
            cluster=cluster,
            path=self.config.cluster_dir(cluster),
            subject=subject,
            body=body,
            trailers=tuple(trailers),
            created_at=self._clock(),
            edits=edits,
        )
        self.publisher.enqueue(change)
        return change


def _pause_subject(cluster: str, step: str | None, reason: str) -> str:
    """One subject for every ``pause: true`` commit, whoever paused (tests and people grep it)."""
    return f"policy({cluster}): pause the rollout" + (f" at step {step}" if step else "") \
        + f": {reason}"
