"""Operator mode's window pauses (docs/configuration.md#maintenance-windows) as a pure decision on a
virtual clock: ``pause: true`` when a window closes, ``pause: false`` when the next opens, each with
its reason, and only the window's own pause is ever undone."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from reconciler.fleet.window_pause import IDLE_LOOK, window_edge
from reconciler.fleet.windows import WindowCalendar

BERLIN = ZoneInfo("Europe/Berlin")
NIGHTS = WindowCalendar.from_config({
    "timezone": "Europe/Berlin",
    "allow": [{"schedule": "0 22 * * *", "duration": "8h"}],
    "deny": [{"from": "2026-06-12T00:00:00+02:00", "until": "2026-06-13T00:00:00+02:00",
              "reason": "release freeze"}],
})


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN).timestamp()


def test_a_closed_window_asks_for_pause_naming_when_the_next_one_opens() -> None:
    look = window_edge(NIGHTS, at("2026-06-10T12:00:00"), paused_in_git=False,
                       window_pause=False)
    assert look.edge is not None and look.edge.pause is True
    assert look.edge.reason == ("outside the maintenance windows; the next window opens at "
                                "2026-06-10T20:00:00Z")
    assert look.again <= at("2026-06-10T22:00:00")


def test_two_looks_inside_one_closed_period_name_the_same_edge() -> None:
    first = window_edge(NIGHTS, at("2026-06-10T07:00:00"), paused_in_git=False,
                        window_pause=False)
    later = window_edge(NIGHTS, at("2026-06-10T21:00:00"), paused_in_git=False,
                        window_pause=False)
    assert first.edge is not None and later.edge is not None
    assert first.edge.edge == later.edge.edge  # one commit per edge, also after a restart
    tomorrow = window_edge(NIGHTS, at("2026-06-11T12:00:00"), paused_in_git=False,
                           window_pause=False)
    assert tomorrow.edge is not None and tomorrow.edge.edge != first.edge.edge


def test_the_next_window_undoes_only_the_windows_own_pause() -> None:
    inside = at("2026-06-10T23:00:00")
    ours = window_edge(NIGHTS, inside, paused_in_git=True, window_pause=True)
    assert ours.edge is not None and ours.edge.pause is False
    assert ours.edge.reason == "a maintenance window is open until 2026-06-11T04:00:00Z"
    # a person's pause, a gate's or a fallback's (their commits are not the window's): kept
    assert window_edge(NIGHTS, inside, paused_in_git=True, window_pause=False).edge is None
    # already running inside a window: nothing to commit
    assert window_edge(NIGHTS, inside, paused_in_git=False, window_pause=False).edge is None


def test_a_pause_already_in_git_is_never_committed_again_while_closed() -> None:
    for ours in (True, False):
        look = window_edge(NIGHTS, at("2026-06-10T12:00:00"), paused_in_git=True,
                           window_pause=ours)
        assert look.edge is None


def test_a_deny_range_inside_an_allow_window_pauses_with_its_reason() -> None:
    look = window_edge(NIGHTS, at("2026-06-12T01:00:00"), paused_in_git=False,
                       window_pause=False)
    assert look.edge is not None and look.edge.pause is True
    assert look.edge.reason.startswith("deny window: release freeze; the next window opens at ")


def test_a_windows_section_that_does_not_validate_pauses_naming_the_error() -> None:
    failed = WindowCalendar.failed("windows.timezone: unknown time zone 'Mars/Olympus'")
    look = window_edge(failed, at("2026-06-10T23:00:00"), paused_in_git=False,
                       window_pause=False)
    assert look.edge is not None and look.edge.pause is True
    assert "Mars/Olympus" in look.edge.reason


def test_removed_windows_undo_the_windows_own_pause_and_nothing_else() -> None:
    now = at("2026-06-10T12:00:00")
    removed = window_edge(None, now, paused_in_git=True, window_pause=True)
    assert removed.edge is not None and removed.edge.pause is False
    assert window_edge(None, now, paused_in_git=True, window_pause=False).edge is None
    assert window_edge(None, now, paused_in_git=False, window_pause=False).edge is None
    assert window_edge(None, now, paused_in_git=None, window_pause=False).again == now + IDLE_LOOK


def test_three_days_on_a_virtual_clock_commit_once_per_edge_and_keep_a_persons_pause() -> None:
    """Git as a dict: the watch's commits and one person's pause on the second day."""
    git = {"pause": False, "ours": False}
    commits: list[tuple[float, bool]] = []
    edges: set[str] = set()
    now = at("2026-06-09T12:00:00")
    end = at("2026-06-11T23:00:00")
    person_pauses_at = at("2026-06-10T23:30:00")
    while now < end:
        if person_pauses_at <= now < person_pauses_at + 60 and not git["pause"]:
            git.update(pause=True, ours=False)
        elif person_pauses_at <= now < person_pauses_at + 60:
            git.update(ours=False)  # the person's commit is the newest on the file: theirs
        look = window_edge(NIGHTS, now, paused_in_git=git["pause"], window_pause=git["ours"])
        if look.edge is not None and look.edge.edge + str(look.edge.pause) not in edges:
            edges.add(look.edge.edge + str(look.edge.pause))
            commits.append((now, look.edge.pause))
            git.update(pause=look.edge.pause, ours=look.edge.pause)
        assert look.again > now
        now = min(look.again, now + 600)
    # day 1 closed (pause), night 1 opens (resume), morning closes (pause), night 2 opens
    # (resume), the person pauses inside night 2; nothing undoes it afterwards
    assert [p for _, p in commits] == [True, False, True, False]
    assert commits[1][0] == at("2026-06-09T22:00:00")  # at the edge, not later
    assert commits[2][0] == at("2026-06-10T06:00:00")
    assert git == {"pause": True, "ours": False}
