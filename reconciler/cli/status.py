"""``reconciler status``: where a cluster's rollout stands and what it waits for.

``--from git`` reads ``status/<cluster>.yaml`` at the head of the status branch (``--repo``);
``--from cluster`` reads the live ``ClusterOperator`` (``--kubeconfig``), and adds the busy and
unavailable nodes and, when the rollout has a topology, the progress per domain. What the rollout
waits for is the read model's (``reconciler.views``, the dashboard's too): ``--format json``
carries each entry typed under ``waits`` (kind, title, detail, action) and as a sentence under
``waitingFor``; the draining nodes with the pods and budgets that hold them under ``draining``,
the skipped nodes under ``skipped``, the domains under ``domains``
(docs/live-clusters.md#a-node-under-repair and docs/rollout.md#topology-aware-waves). Exit status:
0, 1 when the status cannot be read (the message says why), 2 on a usage error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from reconciler import clock
from reconciler.files import printable
from reconciler.stored_status import firmware_status_of, upgrade_status_of
from reconciler.sync.status_view import StatusReport, firmware_lines, report
from reconciler.views.nodes import NodeStates
from reconciler.views.waits import GitContext


@click.command("status")
@click.option("--cluster", default=None, metavar="NAME",
              help="The cluster (default: every cluster with a snapshot in Git; with "
                   "--from cluster, the ClusterOperator's name).")
@click.option("--from", "source", type=click.Choice(["git", "cluster"]), default="git",
              show_default=True, help="Read the status snapshot in Git, or the live object.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--repo", envvar="RECONCILER_REPO", default=".", show_default=True,
              metavar="PATH|URL", help="Policy repository (for --from git).")
@click.option("--branch", envvar="RECONCILER_BRANCH", default="main", show_default=True)
@click.option("--state-dir", envvar="RECONCILER_STATE_DIR", default=None,
              type=click.Path(file_okay=False), help="Where a remote is mirrored.")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None,
              type=click.Path(dir_okay=False), help="Kubeconfig (for --from cluster).")
@click.option("--cluster-operator", "cluster_operator", default="cluster-operator",
              show_default=True, help="Name of the ClusterOperator object (--from cluster).")
def status(cluster: str | None, source: str, output_format: str, repo: str, branch: str,
           state_dir: str | None, kubeconfig: str | None, cluster_operator: str) -> None:
    """Phase, step i/n, per-batch progress, failures, and what the rollout waits for."""
    now = clock.wall()
    if source == "cluster":
        if not kubeconfig:
            raise click.UsageError("--from cluster needs --kubeconfig (or $KUBECONFIG)")
        reports = [_from_cluster(kubeconfig, cluster_operator, cluster, branch, now)]
    else:
        reports = _from_git(repo, cluster, branch, state_dir, now)
    if output_format == "json":
        data: Any = [r.to_json() for r in reports] if cluster is None and source == "git" \
            else reports[0].to_json()
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    for item in reports:
        _render(item)


def _from_git(repo: str, cluster: str | None, branch: str, state_dir: str | None,
              now: float) -> list[StatusReport]:
    from reconciler.gitops.errors import GitOpsError
    from reconciler.gitops.status_reader import read_status_snapshots, status_from_git

    try:
        # the policy lives in Git: a person merges (the file is not looked up here)
        git = GitContext(branch=branch)
        if cluster is not None:
            return [report(status_from_git(repo, cluster, branch=branch, state_dir=state_dir),
                           now=now, git=git)]
        found = read_status_snapshots(repo, branch=branch, state_dir=state_dir)
    except GitOpsError as exc:
        click.echo(printable(f"error: {exc}"), err=True)
        sys.exit(1)
    if not found.snapshots:
        click.echo(f"error: no status snapshots on {found.branch} ({found.commit[:12]})",
                   err=True)
        sys.exit(1)
    where = {"branch": found.branch, "commit": found.commit}
    return [report({**snap, "git": where}, now=now, git=git)
            for _, snap in sorted(found.snapshots.items())]


def _from_cluster(kubeconfig: str, name: str, cluster: str | None, branch: str,
                  now: float) -> StatusReport:
    from reconciler.kube.api import KubeApi, KubeError, NotFound

    try:
        api = KubeApi.from_kubeconfig(kubeconfig)
    except Exception as exc:  # the client raises several kinds for a bad file
        raise click.UsageError(f"cannot use kubeconfig {kubeconfig}: {exc}") from exc
    try:
        snapshot, nodes = cluster_snapshot(api, name)
    except NotFound:
        click.echo(f"error: no ClusterOperator {name!r} at {api.host}", err=True)
        sys.exit(1)
    except (KubeError, OSError) as exc:
        click.echo(f"error: cannot read the cluster at {api.host}: {exc}", err=True)
        sys.exit(1)
    snapshot["cluster"] = cluster or name
    # an object the sync role applied (it names its commit) is released in Git, not patched
    git = GitContext(branch=branch) if snapshot.get("sourceCommit") else None
    return report(snapshot, now=now, nodes=nodes, git=git)


def cluster_snapshot(api: Any, name: str) -> tuple[dict[str, Any], NodeStates]:
    """The live object in a snapshot's shape, and the GPU nodes' states (busy, unavailable,
    failed: ``reconciler.views.nodes``, as the dashboard classifies them)."""
    from reconciler.dashboard.source import facts_from_objects
    from reconciler.kube.api import resource_path
    from reconciler.kube.objects import cluster_operator_path
    from reconciler.names import GPU_NODE_LABEL
    from reconciler.sync.desired import SOURCE_COMMIT_ANNOTATION
    from reconciler.views.nodes import classify_all

    co = api.get(cluster_operator_path(name))
    driver = (co.get("spec") or {}).get("driver") or {}
    snapshot: dict[str, Any] = {
        "sourceCommit": ((co.get("metadata") or {}).get("annotations") or {}).get(
            SOURCE_COMMIT_ANNOTATION),
        "upgradeStatus": upgrade_status_of(co),
        "spec": {"driver": {k: driver[k] for k in ("payload", "upgradePolicy") if k in driver}},
    }
    firmware = firmware_status_of(co)
    if firmware:
        snapshot["firmware"] = firmware
    nodes = api.list(resource_path("v1", "nodes"),
                     query={"labelSelector": f"{GPU_NODE_LABEL}=true"})["items"]
    pods = api.list(resource_path("v1", "pods"))["items"]
    facts = facts_from_objects(name, co, nodes, pods, None, [], [])
    return snapshot, classify_all(facts.nodes, upgrade=snapshot["upgradeStatus"])


def _render(item: StatusReport) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # everything shown comes from Git or the cluster: plain text (no rich markup), control
    # characters escaped
    console = Console(highlight=False)
    summary = Table(title=_t(f"cluster {item.cluster}"), show_header=False, title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("phase", _t(item.phase + (" (upgrading)" if item.upgrading else "")))
    summary.add_row("step", _t(f"{item.step} {item.step_state}".strip()))
    summary.add_row("driver", _t(item.version or "?"))
    summary.add_row("nodes on the new driver", _t(f"{item.nodes_ready}/{item.nodes_total}"))
    summary.add_row("failures", _t(f"{item.failures} (fallback at {item.max_failures})"))
    if item.message:
        summary.add_row("message", _t(item.message))
    summary.add_row("source commit", _t((item.source_commit or "unknown")[:12]))
    if item.observed_at:
        summary.add_row("observed", _t(item.observed_at))
    if item.source:
        summary.add_row("read from", _t(f"Git {item.source.get('branch')} "
                                        f"{str(item.source.get('commit', ''))[:12]}"))
    console.print(summary)
    if item.steps:
        steps = Table(title="batches", title_justify="left")
        tolerating = any(row.toleration for row in item.steps)  # the column only then
        for column in ("step", "nodes at the end", "this batch",
                       *(("failures tolerated",) if tolerating else ()), "pause after",
                       "state"):
            steps.add_column(column)
        for row in item.steps:
            style = "bold" if row.state not in ("done", "pending") else None
            cells = (row.step, row.target, row.nodes,
                     *((row.toleration,) if tolerating else ()), row.pause, row.state)
            steps.add_row(*map(_t, cells), style=style)
        console.print(steps)
    if item.waits:
        console.print("[bold]waiting for[/bold]")
        for wait in item.waits:
            console.print(_t(f"  - {wait.text}"))
            if wait.action and wait.action not in wait.text:
                console.print(_t(f"    action: {wait.action}"), style="dim")
    else:
        console.print("[bold]waiting for[/bold] nothing")
    _render_live(console, item)
    failing = [c for c in item.conditions if c.get("status", "True") == "True"
               and c.get("type") in ("BatchFailed", "RolledBack", "ManualGate",
                                     "HealthCheckFailed", "FailuresTolerated")]
    if failing:
        table = Table(title="conditions", title_justify="left")
        for column in ("type", "reason", "message"):
            table.add_column(column)
        for condition in failing:
            table.add_row(*map(_t, (condition["type"], condition["reason"],
                                    condition["message"])))
        console.print(table)
    if item.health_checks:
        table = Table(title="health checks", title_justify="left")
        for column in ("check", "node", "verdict", "last value", "since"):
            table.add_column(column)
        for check in item.health_checks:
            table.add_row(*map(_t, (check["check"], check["node"] or "(step)", check["state"],
                                    check["value"], check["since"])))
        console.print(table)
    if item.rejection:
        table = Table(title=_t(f"rejected commit {str(item.rejection.get('commit'))[:12]}"),
                      title_justify="left")
        for column in ("file", "line", "reason"):
            table.add_column(column)
        for finding in item.rejection.get("findings") or ():
            table.add_row(*map(_t, (finding.get("file"), finding.get("line"),
                                    finding.get("message"))))
        console.print(table)
    if item.firmware:
        summary_line, node_rows = firmware_lines(item.firmware)
        console.print(Text.assemble(("firmware", "bold"), " ", _t(summary_line)))
        if node_rows:
            table = Table(title_justify="left")
            for column in ("node", "stage", "message"):
                table.add_column(column)
            for node, stage, message in node_rows:
                table.add_row(_t(node), _t(stage), _t(message))
            console.print(table)
    console.print()


def _render_live(console: Any, item: StatusReport) -> None:
    """What a live cluster adds (docs/live-clusters.md#the-drain and
    docs/rollout.md#topology-aware-waves): progress per domain, draining nodes with what holds them,
    skipped nodes."""
    from rich.table import Table

    from reconciler.views.nodes import UNLABELLED

    topology = item.topology or {}
    if item.domains:
        table = Table(title=_t(f"domains of {topology.get('key')} "
                               f"({topology.get('order', 'sequential')})"),
                      title_justify="left")
        columns = ("domain", "nodes", "upgraded", "in flight", "draining", "failed", "skipped",
                   "pending", "unavailable", "")
        for column in columns:
            table.add_column(column)
        for d in item.domains:
            domain = UNLABELLED if d["domain"] is None else d["domain"]
            table.add_row(*map(_t, (domain, d["nodes"], d["upgraded"], d["inFlight"],
                                    d["draining"], d["failed"], d["skipped"], d["pending"],
                                    d["unavailable"], "done" if d["done"] else "")))
        console.print(table)
    elif topology:
        console.print(_t(f"topology: {topology.get('key')} "
                         f"({topology.get('order', 'sequential')}); progress per domain "
                         "with --from cluster"))
    if item.draining:
        table = Table(title="draining nodes", title_justify="left")
        for column in ("node", "since", "evicting", "held by budgets", "waiting for"):
            table.add_column(column)
        for entry in item.draining:
            table.add_row(*map(_t, (
                entry.get("node"), entry.get("since") or "",
                *(", ".join(map(str, entry.get(k) or ()))
                  for k in ("pods", "budgets", "waitingFor")))))
        console.print(table)
    if item.skipped:
        console.print(_t(f"skipped nodes ({len(item.skipped)}): {', '.join(item.skipped)}"))
    if item.tolerated:
        console.print(_t(f"failures tolerated, left behind ({len(item.tolerated)}): "
                         f"{', '.join(item.tolerated)}"))


def _t(value: object) -> Any:
    """``value`` as rich plain text: never read as markup, control characters escaped."""
    from rich.text import Text

    from reconciler.files import printable

    return Text(printable(str(value)))
