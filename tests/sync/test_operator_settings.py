"""Operator mode ignores the rollout keys of our own rollout (docs/live-clusters.md, last bullet):
said once per set of keys in the log and in an Event, which waits for the leader."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from reconciler.policy.label_selector import LabelSelector
from reconciler.policy.rollout_settings import DrainSettings, RolloutSettings, WaitForSettings
from reconciler.sync.operator_settings import IgnoredSettingsWarning, ignored_in_operator_mode


def test_only_the_keys_set_are_named_in_the_files_spelling() -> None:
    plain = RolloutSettings()
    assert ignored_in_operator_mode(plain) == ()
    drained = dataclasses.replace(
        plain, drain=DrainSettings(pod_selector=LabelSelector.parse("")),
        wait_for=WaitForSettings(pod_selector=LabelSelector.parse("a=b")),
        unavailable_nodes="skip")
    assert ignored_in_operator_mode(drained) == ("drain", "waitFor", "unavailableNodes")


def test_the_warning_is_logged_once_per_set_and_the_event_waits_for_the_leader(
    caplog: pytest.LogCaptureFixture,
) -> None:
    current = [RolloutSettings()]
    leader = [False]
    events: list[str] = []

    def record(message: str) -> bool:
        if leader[0]:
            events.append(message)
        return leader[0]

    warning = IgnoredSettingsWarning(lambda: (current[0], "commit abc"), record)
    caplog.set_level(logging.WARNING)
    warning()
    assert not caplog.records and not events
    current[0] = dataclasses.replace(current[0], unavailable_nodes="skip")
    warning()
    warning()
    assert [r.getMessage() for r in caplog.records] == [
        "rollout.unavailableNodes in reconciler.yaml (commit abc) ignored: operator mode, the "
        "vendor's operator runs the rollout (they apply in builtin mode only)"]
    assert events == [], "not the leader yet"
    leader[0] = True
    warning()
    warning()
    assert len(events) == 1 and "rollout.unavailableNodes" in events[0]
    assert len(caplog.records) == 1
    current[0] = RolloutSettings()
    warning()
    current[0] = dataclasses.replace(current[0], unavailable_nodes="skip")
    warning()
    assert len(events) == 2 and len(caplog.records) == 2, "set again after a commit removed it"
