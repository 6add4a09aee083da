"""Operator mode's maintenance windows (docs/configuration.md#maintenance-windows) as a pure
decision: the vendor operator runs the rollout and knows no windows, so the sync role commits
``pause: true`` when a window closes and ``pause: false`` when the next opens, each with its reason,
and undoes only its own window pause: never a person's ``pause: true``, a gate or a fallback (their
commits are not the window's). Inputs are what Git says at the watched head; no clock, Git or
Kubernetes here."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.fleet.windows import WindowCalendar
from reconciler.timefmt import format_time

#: a closed calendar with no known next edge is looked at again this often (seconds)
IDLE_LOOK = 60.0


@dataclass(frozen=True, slots=True)
class WindowEdge:
    """A commit to make: ``pause`` true (a window closed) or false (the next one opened)."""

    pause: bool
    reason: str
    #: the edge this commit is for (RFC 3339): one commit per edge, also across restarts
    edge: str


@dataclass(frozen=True, slots=True)
class WindowLook:
    #: what to commit now (None: nothing)
    edge: WindowEdge | None
    #: when to look again (wall-clock seconds): the next edge, at the latest ``IDLE_LOOK``
    again: float


def window_edge(calendar: WindowCalendar | None, now: float, *, paused_in_git: bool | None,
                window_pause: bool) -> WindowLook:
    """The decision at ``now``. ``paused_in_git``: ``pause`` of the policy at the watched head
    (None: no policy file); ``window_pause``: that ``pause: true`` is the window's own (the
    newest commit that changed the policy file is our window pause)."""
    if paused_in_git is None:
        return WindowLook(None, now + IDLE_LOOK)
    if calendar is None or (not calendar.allow and not calendar.deny and calendar.error is None):
        # no windows (any more): our pause is undone, nothing else happens
        if paused_in_git and window_pause:
            return WindowLook(WindowEdge(False, "maintenance windows removed",
                                         format_time(now)), now + IDLE_LOOK)
        return WindowLook(None, now + IDLE_LOOK)
    verdict = calendar.verdict(now)
    until = verdict.until
    again = min(until, now + IDLE_LOOK) if until is not None and until > now else now + IDLE_LOOK
    # the period's end names it: every look inside one period agrees, also after a restart
    period = format_time(until) if until is not None else "never"
    if not verdict.open:
        if paused_in_git:
            return WindowLook(None, again)  # ours already, or a person's, a gate's: kept
        opens = (f"the next window opens at {format_time(until)}" if until is not None
                 else "no window opens within 5 years")
        return WindowLook(WindowEdge(True, f"{verdict.reason}; {opens}", period), again)
    if paused_in_git and window_pause:
        closes = (f"until {format_time(until)}" if until is not None
                  else "for the foreseeable future")
        return WindowLook(WindowEdge(False, f"a maintenance window is open {closes}", period),
                          again)
    return WindowLook(None, again)


def window_holds(calendar: WindowCalendar | None, now: float) -> list[dict[str, str]]:
    """Operator mode's record of the window for the status snapshot (``holds``): one hold while
    the calendar is closed (why, and when the next window opens), none while it is open or
    there is no calendar."""
    if calendar is None or calendar.is_open(now):
        return []
    return [calendar.verdict(now).hold()]
