"""Rules of the ``notify:`` sections of ``reconciler.yaml`` (docs/notifications.md#keys), at the
top level and in ``clusters.<name>.notify``: what the JSON Schema cannot explain with its fix.
Which of ``url`` and ``urlFile`` a sink type takes (a Slack or WeCom URL holds its key: ``urlFile``
only), which types sign with ``secretFile`` (the generic webhook must), a sink without a type, two
sinks with one name. The rules themselves are ``reconciler.policy.notify_config``'s, which the
daemon applies to the same section: one wording in ``validate`` and in a refused commit.

Like the other rules they judge only values whose type the schema accepted. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator

from reconciler.policy.document import ParsedDocument
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.notify_config import duplicate_name, sink_problems


def notify_rules(doc: ParsedDocument) -> Iterator[Finding]:
    obj = doc.obj
    if not isinstance(obj, dict):
        return
    yield from _sinks(doc, "/notify", obj.get("notify"))
    clusters = obj.get("clusters")
    if isinstance(clusters, dict):
        for name, settings in clusters.items():
            if isinstance(settings, dict):
                yield from _sinks(doc, join_pointer(join_pointer("/clusters", name), "notify"),
                                  settings.get("notify"))


def _sinks(doc: ParsedDocument, pointer: str, sinks: object) -> Iterator[Finding]:
    if not isinstance(sinks, list):
        return
    names: set[str] = set()
    for index, sink in enumerate(sinks):
        if not isinstance(sink, dict):
            continue
        at = f"{pointer}/{index}"
        label = f"notify[{index}]"
        for problem in sink_problems(sink):
            if problem.key is None:
                yield doc.finding(at, problem.rule, f"{label}: {problem.message}")
            else:
                yield doc.finding(join_pointer(at, problem.key), problem.rule,
                                  f"{label}.{problem.key}: {problem.message}", key=True)
        name = sink.get("name")
        if isinstance(name, str):
            if name in names:
                yield doc.finding(f"{at}/name", "notify-name-twice",
                                  f"{label}.name: {duplicate_name(name)}")
            names.add(name)
