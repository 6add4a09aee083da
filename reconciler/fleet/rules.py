"""Semantic rules of the fleet sections of ``reconciler.yaml``
(docs/configuration.md#maintenance-windows): ``windows`` (at the top level and in
``clusters.<name>``) and ``clusters.<name>.promotion``. What the schema cannot say: a cron
expression, a time zone, a deny range's times and order, a window's length, the upstream cluster of
``after`` and cycles in ``after`` chains.

Like the other rules they judge only values whose type the schema accepted.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from typing import Any
from zoneinfo import ZoneInfo

from reconciler.durations import parse_duration
from reconciler.fleet.windows import MAX_WINDOW, parse_instant, schedule_problem, zone_problem
from reconciler.policy.document import ParsedDocument
from reconciler.policy.findings import Finding, join_pointer

#: a soak longer than 30 days is a mistake
MAX_SOAK = 30 * 24 * 3600.0


def fleet_rules(doc: ParsedDocument, known_clusters: Collection[str] | None = None
                ) -> Iterator[Finding]:
    """``known_clusters``: the cluster folders of the repository (None: not known, so only
    ``clusters.<name>`` entries are known and an unknown upstream is not reported)."""
    obj = doc.obj
    if not isinstance(obj, dict):
        return
    clusters = obj.get("clusters")
    clusters = clusters if isinstance(clusters, dict) else {}
    sections: list[tuple[str, str, Any]] = [("/windows", "windows", obj.get("windows"))]
    for name, settings in clusters.items():
        if isinstance(settings, dict):
            sections.append((join_pointer(join_pointer("/clusters", name), "windows"),
                             f"clusters.{name}.windows", settings.get("windows")))
    for pointer, label, section in sections:
        if isinstance(section, dict):
            yield from _windows(doc, pointer, label, section)
    yield from _promotion(doc, clusters, known_clusters)
    if known_clusters is not None:
        yield from _no_folder(doc, clusters, known_clusters)


def _no_folder(doc: ParsedDocument, clusters: Mapping[str, Any],
               known_clusters: Collection[str]) -> Iterator[Finding]:
    """A ``clusters.<name>`` with no cluster folder applies to nothing: most likely a typo,
    which would leave the real cluster without its windows or rollout settings. A name another
    cluster's ``promotion.after`` waits for is meant (a cluster this repository does not hold)."""
    upstreams = {s["promotion"].get("after") for s in clusters.values()
                 if isinstance(s, dict) and isinstance(s.get("promotion"), dict)}
    for name in clusters:
        if name in known_clusters or name in upstreams:
            continue
        close = difflib.get_close_matches(name, list(known_clusters), n=1)
        folders = ", ".join(sorted(known_clusters)[:10]) or "none"
        yield doc.finding(
            join_pointer("/clusters", name), "clusters-unknown-cluster",
            f"clusters.{_shown(name)}: no cluster folder of that name, so these settings apply "
            "to no cluster" + (f"; did you mean '{close[0]}'?" if close else
                               f"; the folders: {folders}"),
            key=True, warning=True)


def _windows(doc: ParsedDocument, pointer: str, label: str,
             section: Mapping[str, Any]) -> Iterator[Finding]:
    zone = ZoneInfo("UTC")
    name = section.get("timezone")
    if isinstance(name, str):
        problem = zone_problem(name)
        if problem:
            yield doc.finding(f"{pointer}/timezone", "windows-timezone",
                              f"{label}.timezone: {problem}")
        else:
            zone = ZoneInfo(name)
    allow = section.get("allow")
    for index, entry in enumerate(allow if isinstance(allow, list) else ()):
        if not isinstance(entry, dict):
            continue
        where, shown = f"{pointer}/allow/{index}", f"{label}.allow[{index}]"
        schedule = entry.get("schedule")
        if isinstance(schedule, str):
            problem = schedule_problem(schedule)
            if problem:
                yield doc.finding(f"{where}/schedule", "windows-schedule",
                                  f"{shown}.schedule: {problem}, got '{_shown(schedule)}'")
        duration = entry.get("duration")
        if isinstance(duration, str):
            try:
                seconds = parse_duration(duration)
            except ValueError:
                seconds = None  # the schema's pattern reported it
            if seconds is not None and not 0 < seconds <= MAX_WINDOW:
                yield doc.finding(f"{where}/duration", "windows-duration",
                                  f"{shown}.duration: must be longer than 0 and at most 168h, "
                                  f"got '{_shown(duration)}'")
    deny = section.get("deny")
    for index, entry in enumerate(deny if isinstance(deny, list) else ()):
        if not isinstance(entry, dict):
            continue
        where, shown = f"{pointer}/deny/{index}", f"{label}.deny[{index}]"
        bounds: dict[str, float] = {}
        for key in ("from", "until"):
            value = entry.get(key)
            if not isinstance(value, str):
                continue
            try:
                bounds[key] = parse_instant(value, zone)
            except (ValueError, OverflowError):
                yield doc.finding(f"{where}/{key}", "windows-time",
                                  f"{shown}.{key}: expected an RFC 3339 time like "
                                  f"'2026-12-24T00:00:00+08:00', got '{_shown(value)}'")
        if len(bounds) == 2 and bounds["until"] <= bounds["from"]:
            yield doc.finding(f"{where}/until", "windows-deny-order",
                              f"{shown}.until: must be after from ('{entry['from']}'), got "
                              f"'{_shown(str(entry['until']))}'")


def _promotion(doc: ParsedDocument, clusters: Mapping[str, Any],
               known_clusters: Collection[str] | None) -> Iterator[Finding]:
    known = set(clusters) | set(known_clusters or ())
    upstream: dict[str, str] = {}
    for name, settings in clusters.items():
        promotion = settings.get("promotion") if isinstance(settings, dict) else None
        if not isinstance(promotion, dict):
            continue
        pointer = join_pointer(join_pointer("/clusters", name), "promotion")
        after = promotion.get("after")
        if isinstance(after, str):
            upstream[name] = after
            if known_clusters is not None and after not in known:
                yield doc.finding(
                    f"{pointer}/after", "promotion-unknown-cluster",
                    f"clusters.{name}.promotion.after: no cluster '{_shown(after)}' (neither a "
                    f"folder under the clusters folder nor a clusters.<name> entry); known: "
                    f"{', '.join(sorted(known)[:10]) or 'none'}")
        soak = promotion.get("soak")
        if isinstance(soak, str):
            try:
                seconds = parse_duration(soak)
            except ValueError:
                seconds = None
            if seconds is not None and seconds > MAX_SOAK:
                yield doc.finding(f"{pointer}/soak", "promotion-soak",
                                  f"clusters.{name}.promotion.soak: at most 720h, got "
                                  f"'{_shown(soak)}'")
    reported: set[str] = set()
    for start in upstream:
        chain = [start]
        current = start
        while current in upstream:
            current = upstream[current]
            if current in chain:
                cycle = chain[chain.index(current):]
                if not reported & set(cycle):
                    reported.update(cycle)
                    first = min(cycle)  # report once, at the cycle's first name
                    ring = cycle[cycle.index(first):] + cycle[:cycle.index(first)] + [first]
                    yield doc.finding(
                        join_pointer(join_pointer(join_pointer("/clusters", first),
                                                  "promotion"), "after"),
                        "promotion-cycle",
                        f"clusters.{first}.promotion.after: the promotion chain is a cycle "
                        f"({' after '.join(ring)}), so no payload could ever reach these "
                        "clusters: one of them must promote first")
                break
            chain.append(current)


def _shown(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= 60 else f"{text[:40]}...{text[-10:]} ({len(text)} characters)"
