"""The URLs of ``reconciler.yaml`` the daemon posts to: ``forge.url`` (and its ``repository``)
and each ``notify`` sink's ``url`` (top level and ``clusters.<name>.notify``). ``validate``
refuses what the daemon would refuse at its start or at each send (a bracket that is not an
IPv6 address, a port out of range, a line break that would forge a header), located in the
file. Pure.

Like the other rules they judge only values whose type the schema accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from reconciler.policy.document import ParsedDocument
from reconciler.policy.findings import Finding, join_pointer
from reconciler.policy.forge_config import (
    ForgeConfigError,
    ForgeOffHostError,
    check_api_url,
    check_on_remote_host,
    repository_problem,
)
from reconciler.policy.notify_config import sink_url_problem

#: the forge URLs the schema's pattern lets through (others are reported by it)
_LOOPBACK_OR_HTTPS = re.compile(r"https://|http://(localhost|127\.|\[::1\])")


def url_rules(doc: ParsedDocument, remote: str | None = None) -> Iterator[Finding]:
    """``remote``: the repository's remote URL when known (validate's ``origin``), for the
    host ``forge.url`` must be on."""
    obj = doc.obj
    if not isinstance(obj, dict):
        return
    forge = obj.get("forge")
    url = forge.get("url") if isinstance(forge, dict) else None
    if isinstance(url, str) and _LOOPBACK_OR_HTTPS.match(url):  # else: the schema says why
        try:
            api = check_api_url(url, key="forge.url")
            if remote is not None:
                check_on_remote_host(api, remote)
        except ForgeOffHostError as exc:  # a warning: the daemon's --repo may be a mirror
            yield doc.finding("/forge/url", "forge-url", f"{exc} (the daemon then posts no "
                              f"commit statuses; origin here is {remote})", warning=True)
        except ForgeConfigError as exc:
            yield doc.finding("/forge/url", "forge-url", str(exc))
    repository = forge.get("repository") if isinstance(forge, dict) else None
    problem = repository_problem(repository) if isinstance(repository, str) else None
    if problem is not None:
        yield doc.finding("/forge/repository", "forge-repository",
                          f"forge.repository: the repository {problem}")
    yield from _sinks(doc, "/notify", obj.get("notify"))
    clusters = obj.get("clusters")
    if isinstance(clusters, dict):
        for name, settings in clusters.items():
            if isinstance(settings, dict):
                pointer = join_pointer(join_pointer("/clusters", name), "notify")
                yield from _sinks(doc, pointer, settings.get("notify"))


def _sinks(doc: ParsedDocument, pointer: str, sinks: object) -> Iterator[Finding]:
    if not isinstance(sinks, list):
        return
    for index, sink in enumerate(sinks):
        url = sink.get("url") if isinstance(sink, dict) else None
        if isinstance(url, str) and url.startswith(("https://", "http://")):  # else: the schema
            problem = sink_url_problem(url)
            if problem is not None:
                yield doc.finding(f"{pointer}/{index}/url", "notify-url", f"url: {problem}")
