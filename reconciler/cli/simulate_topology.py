"""``reconciler simulate --nodes-file``: the fleet's node names and labels, and what a topology
(docs/rollout.md#topology-aware-waves) makes of the rollout: per domain its nodes, how many
upgraded, in how many waves and when; and the same for the other order, so that both are shown side
by side.

The nodes file (YAML or JSON) is either

    nodes:
      - name: gpu-a-01
        labels: {topology.kubernetes.io/zone: zone-a, gpu.metax-tech.com/canary: "true"}

or what ``kubectl get nodes -o yaml`` (or ``-o json``) prints: a list whose ``items`` carry
``metadata.name`` and ``metadata.labels``; everything else in it is ignored.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from reconciler.files import FileRefused, read_bounded
from reconciler.policy.findings import join_pointer
from reconciler.policy.label_selector import label_key_error, label_value_error
from reconciler.policy.rollout_settings import TopologySettings
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.simulator import SimConfig, SimResult
from reconciler.rollout.topology import Topology, domain_name

Fleet = tuple[tuple[str, Mapping[str, str]], ...]
#: a node's name as the API server stores it: a DNS subdomain of at most 253 characters
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def read_located(path: Path, what: str, fail: Callable[[str], NoReturn]
                 ) -> tuple[object, Callable[[str], str]]:
    """A small input file of ``simulate`` (``what``: its name in messages), read and parsed with
    the policy files' bounds (no link, a regular file of at most 1 MiB, 100 levels of nesting):
    its data and ``at(pointer)``, the place of a value as file:line:col (``fail`` exits 2)."""
    from reconciler.policy.document import parse_document

    try:
        raw = read_bounded(path)
    except FileRefused as refused:
        fail(f"cannot read {what} {path}: {refused.reason}")
    doc = parse_document(raw, str(path))
    errors = [f for f in doc.findings if f.is_error]
    if errors:
        fail(f"cannot read {what}: " + "\n".join(
            f"{f.file}:{f.line}:{f.column}: {f.message}" for f in errors))

    def at(pointer: str) -> str:
        loc = doc.locate(pointer)
        return f"{path}:{loc.line}:{loc.column}"

    return doc.obj, at


def load_nodes_file(path: Path, limit: int, fail: Callable[[str], NoReturn]) -> Fleet:
    """The nodes of ``--nodes-file``, in the file's order; every problem located at
    file:line:col (``fail`` exits 2)."""
    data, at = read_located(path, "nodes file", fail)

    kubectl = isinstance(data, Mapping) and "items" in data
    entries = data.get("items" if kubectl else "nodes") if isinstance(data, Mapping) else None
    if not isinstance(entries, list) or not entries:
        fail(f"{at('')}: expected a mapping with a non-empty list 'nodes' of {{name, labels}} "
             "entries (or the output of kubectl get nodes -o yaml)")
    if len(entries) > limit:
        fail(f"{at('')}: {len(entries)} nodes, at most {limit:,} can be simulated")
    fleet: list[tuple[str, Mapping[str, str]]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        item = f"/{'items' if kubectl else 'nodes'}/{index}"
        if kubectl:
            meta = entry.get("metadata") if isinstance(entry, Mapping) else None
            if not isinstance(meta, Mapping):
                fail(f"{at(item)}: items[{index}]: expected metadata with a name")
            entry, item = meta, item + "/metadata"
        elif not isinstance(entry, Mapping) or set(entry) - {"name", "labels"}:
            shown = sorted(map(str, entry)) if isinstance(entry, Mapping) else \
                type(entry).__name__
            fail(f"{at(item)}: expected the keys 'name' and 'labels', got {shown}")
        name = entry.get("name")
        if not isinstance(name, str) or len(name) > 253 or not _NODE_NAME.fullmatch(name):
            shown = repr(name) if len(repr(name)) <= 80 else f"{repr(name)[:60]}..."
            fail(f"{at(item)}: expected a node name (lowercase letters, digits, '-' and '.', "
                 f"at most 253 characters), got {shown}")
        if name in seen:
            fail(f"{at(item + '/name')}: node {name} is listed twice")
        seen.add(name)
        labels = entry.get("labels") or {}
        if not isinstance(labels, Mapping):
            fail(f"{at(item + '/labels')}: expected a mapping of label keys to values")
        for key, value in labels.items():
            if not isinstance(value, str):
                fail(f"{at(f'{item}/labels/{key}')}: label {key}: expected a string, got "
                     f"{value!r} (quote it)")
            error = label_key_error(str(key)) or label_value_error(value)
            if error is not None:
                where = at(join_pointer(f"{item}/labels", str(key)))
                fail(f"{where}: {error if len(error) < 300 else error[:200] + '...'}")
        fleet.append((name, {str(k): v for k, v in labels.items()}))
    return tuple(fleet)


def _domains(result: SimResult, config: SimConfig, topology: TopologySettings,
             new_version: str) -> list[dict[str, Any]]:
    """Per domain, in the topology's domain order: nodes, upgraded, waves (distinct instants
    its nodes started at), first start and last Ready on the new version."""
    labels = dict(config.fleet)
    nodes = [RolloutNode(name, labels=labels.get(name, {})) for name in
             (entry["name"] for entry in result.nodes)]
    layout = Topology.of(topology, nodes)
    rows: dict[str | None, dict[str, Any]] = {}
    starts: dict[str | None, set[float]] = {}
    for domain in sorted(layout.rank, key=layout.rank.__getitem__):
        rows[domain] = {"domain": domain, "nodes": 0, "upgraded": 0, "waves": 0,
                        "first_start": None, "last_ready": None}
        starts[domain] = set()
    domain_of = {name: layout.domain(node) for name, node in
                 ((node.name, node) for node in nodes)}
    for entry in result.nodes:
        row = rows[domain_of[entry["name"]]]
        row["nodes"] += 1
        if entry["ready"] and entry["version"] == new_version:
            row["upgraded"] += 1
    for event in result.events:
        if event.node is None or event.node not in domain_of:
            continue
        domain = domain_of[event.node]
        row = rows[domain]
        if event.type == "NodeUpgradeStarted":
            starts[domain].add(event.t)
            if row["first_start"] is None:
                row["first_start"] = event.t
        elif event.type == "NodeReady" and event.message.endswith(f" on {new_version}"):
            row["last_ready"] = event.t
    for domain, row in rows.items():
        row["waves"] = len(starts[domain])
    return list(rows.values())


def topology_report(result: SimResult, config: SimConfig, new_version: str,
                    run: Callable[[SimConfig], SimResult]) -> dict[str, Any] | None:
    """The ``topology`` part of the output (None without a topology): the run's domains, and
    the other order run on the same fleet (``run``) for comparison."""
    topology = config.settings.topology
    if topology is None:
        return None
    other = dataclasses.replace(
        topology, order="spread" if topology.order == "sequential" else "sequential")
    other_config = dataclasses.replace(
        config, settings=dataclasses.replace(config.settings, topology=other))
    other_result = run(other_config)
    limit = topology.max_unavailable_per_domain
    return {
        "key": topology.key,
        "order": topology.order,
        "maxUnavailablePerDomain": None if limit is None else (
            str(limit) if limit.percent else limit.value),
        "domains": _domains(result, config, topology, new_version),
        "other_order": {
            "order": other.order,
            "completed": other_result.completed,
            "stop_reason": other_result.stop_reason,
            "duration_seconds": other_result.duration_seconds,
            "domains": _domains(other_result, other_config, other, new_version),
        },
    }


def render_topology(report: Mapping[str, Any], clock: Callable[[float], str]) -> list[str]:
    """The text lines of a ``topology_report``."""
    limit = report["maxUnavailablePerDomain"]
    lines = ["", f"topology {report['key']}, order {report['order']}, maxUnavailablePerDomain "
             f"{'none' if limit is None else limit}:"]

    def table(domains: list[Mapping[str, Any]]) -> list[str]:
        width = max([6, *(len(domain_name(d["domain"])) for d in domains)])
        rows = [f"  {'domain':<{width}} {'nodes':>6} {'upgraded':>8} {'waves':>5} "
                f"{'first start':>11} {'last ready':>11}"]
        for d in domains:
            first = clock(d["first_start"]) if d["first_start"] is not None else "-"
            last = clock(d["last_ready"]) if d["last_ready"] is not None else "-"
            rows.append(f"  {domain_name(d['domain']):<{width}} {d['nodes']:>6} "
                        f"{d['upgraded']:>8} {d['waves']:>5} {first:>11} {last:>11}")
        return rows

    lines += table(report["domains"])
    other = report["other_order"]
    outcome = "completes" if other["completed"] else f"stops ({other['stop_reason']})"
    lines += ["", f"the same fleet with order {other['order']}: {outcome} after "
              f"{clock(other['duration_seconds'])} ({other['duration_seconds']:g} s)"]
    lines += table(other["domains"])
    return lines
