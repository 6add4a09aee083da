"""``reconciler simulate``: a what-if run of a policy file's rollout on a virtual fleet.

The policy file is validated exactly as ``reconciler validate`` would (full ClusterOperator
object), or, for a bare ``driver:`` / ``upgradePolicy:`` fragment as in the vendor manual,
after wrapping it into one; findings point at the fragment's own lines.

Exit codes: 0 the rollout completed; 1 it ran but did not complete (stopped at a gate, paused by
the fallback, rolled back, stalled or out of time); 2 bad input.
"""

from __future__ import annotations

import contextlib
import difflib
import gc
from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn, cast

import click

from reconciler.cli.json_out import write_json
from reconciler.cli.numbers import BoundedInt, FiniteFloat
from reconciler.cli.simulate_topology import (
    load_nodes_file,
    read_located,
    render_topology,
    topology_report,
)
from reconciler.config.document import ConfigDocument, load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.files import FileRefused, printable, read_bounded
from reconciler.policy.findings import Finding
from reconciler.policy.payload import Payload
from reconciler.policy.rollout_settings import DrainSettings, RolloutSettings
from reconciler.policy.schema import matches_definition
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.policy.validation import parse_only, validate_document
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.sim_workloads import ServingModel, drain_summary
from reconciler.rollout.simulator import (
    DEFAULT_UNTIL,
    EPOCH,
    FAULTS,
    MODEL_MAX_NODES,
    Fault,
    SimConfig,
    SimResult,
    node_name,
)
from reconciler.rollout.simulator import (
    simulate as run_simulation,
)
from reconciler.sim.faults import GPU_FAULTS
from reconciler.timefmt import EARLIEST_TIME, LATEST_TIME, format_time

_HEADER = (
    "apiVersion: gpu.metax-tech.com/v1alpha1\nkind: ClusterOperator\n"
    "metadata:\n  name: cluster-operator\n"
)


#: 10 times the largest rollout docs/rollout.md#scale asks for (10,000 nodes); the run is linear in
#: the fleet.
MAX_NODES = MODEL_MAX_NODES


class InputError(click.ClickException):
    exit_code = 2


#: virtual time runs from the simulator's EPOCH up to the last instant RFC 3339 can write
LAST_VIRTUAL_SECOND = LATEST_TIME - EPOCH


def _fail(message: str) -> NoReturn:
    """Exit 2 with ``message``; control characters from the files it quotes are escaped."""
    raise InputError("\n".join(printable(line) for line in message.split("\n")))


def _short(value: object) -> str:
    """``repr(value)``, cut to 80 characters: a file's value quoted in a message."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...{text[-10:]} ({len(text)} characters)"


def _wrap(text: str, obj: Any) -> tuple[str, int, int, str]:
    """Text of a full object for a bare fragment: (text, line shift, indent, pointer prefix)."""
    if not isinstance(obj, Mapping) or "apiVersion" in obj or "kind" in obj:
        return text, 0, 0, ""
    if set(obj) <= {"spec", "metadata"}:
        return _HEADER + text, 4, 0, ""
    if "driver" in obj:
        header, indent, prefix = _HEADER + "spec:\n", 2, "/spec"
    elif "upgradePolicy" in obj or "payload" in obj:
        header, indent, prefix = _HEADER + "spec:\n  driver:\n", 4, "/spec/driver"
    else:
        return text, 0, 0, ""
    pad = " " * indent
    body = "".join(pad + line if line.strip() else line for line in text.splitlines(True))
    return header + body, header.count("\n"), indent, prefix


def _unwrap(finding: Finding, shift: int, indent: int, prefix: str, file: str) -> str:
    line = max(finding.line - shift, 1)
    column = max(finding.column - indent, 1)
    pointer = finding.pointer
    if prefix and pointer.startswith(prefix):
        pointer = pointer[len(prefix) :]
    return f"{file}:{line}:{column}: {finding.severity}: {finding.message} [{pointer or '/'}]"


def load_driver_spec(path: Path) -> dict[str, Any]:
    """``spec.driver`` of a policy file (full object or bare fragment), validated."""
    try:
        data = read_bounded(path)
    except FileRefused as refused:
        _fail(f"cannot read policy file {path}: {refused.reason}")
    parsed = parse_only(data, str(path))
    if parsed.obj is None or any(f.is_error for f in parsed.findings):
        _fail("\n".join(_unwrap(f, 0, 0, "", str(path)) for f in parsed.findings)
              or f"{path}: empty policy file")
    text = data.decode("utf-8").removeprefix("\ufeff")
    wrapped, shift, indent, prefix = _wrap(text, parsed.obj)
    result = validate_document(wrapped, str(path))
    if not result.ok:
        _fail("policy file is not valid:\n" + "\n".join(
            _unwrap(f, shift, indent, prefix, str(path)) for f in result.errors
        ))
    spec = (result.obj or {}).get("spec") or {}
    driver = spec.get("driver") or {}
    if not isinstance(driver, Mapping):
        _fail(f"{path}: spec.driver must be a mapping")
    version = (driver.get("payload") or {}).get("version")
    if not version:
        _fail(f"{path}: no spec.driver.payload.version: simulate needs the version to roll out")
    return dict(driver)


def load_faults(path: Path | None, nodes: int,
                gpu: dict[str, str] | None = None,
                names: Collection[str] | None = None) -> dict[str, Fault]:
    """The ``--faults`` file: read and parsed with the policy files' bounds (no link, a regular
    file of at most 1 MiB, 100 levels of nesting); every problem is located at file:line:col.
    ``names``: the fleet's node names (``--nodes-file``; else ``node-0001`` ..)."""
    if path is None:
        return {}
    data, at = read_located(path, "faults file", _fail)

    entries = data.get("faults") if isinstance(data, Mapping) else None
    if not isinstance(data, Mapping) or set(data) - {"faults"} or not isinstance(entries, list):
        _fail(f"{at('/faults' if isinstance(data, Mapping) else '')}: expected a mapping with "
              "one key 'faults' holding a list of {node, fault} entries")
    width = max(4, len(str(nodes)))

    def known(name: object) -> bool:
        if names is not None:
            return isinstance(name, str) and name in names
        if not isinstance(name, str) or not name.startswith("node-"):
            return False
        digits = name[5:]
        return len(digits) == width and digits.isdigit() and 1 <= int(digits) <= nodes

    faults: dict[str, Fault] = {}
    gpu_faults: dict[str, str] = {}
    for index, entry in enumerate(entries):
        item = f"/faults/{index}"
        where = f"{at(item)}: faults[{index}]"
        if not isinstance(entry, Mapping) or set(entry) != {"node", "fault"}:
            shown = sorted(map(str, entry)) if isinstance(entry, Mapping) else type(entry).__name__
            _fail(f"{where}: expected exactly the keys 'node' and 'fault', got {shown}")
        node, fault = entry["node"], entry["fault"]
        if not known(node):
            _fail(f"{at(item + '/node')}: faults[{index}].node: no node named {_short(node)} in a "
                  f"fleet of {nodes} nodes " + ("(--nodes-file)" if names is not None else
                  f"(names run {node_name(1, width)} .. {node_name(nodes, width)})"))
        if not isinstance(fault, str) or (fault not in FAULTS and fault not in GPU_FAULTS):
            _fail(f"{at(item + '/fault')}: faults[{index}].fault: unknown fault {_short(fault)}; "
                  f"expected one of {', '.join((*FAULTS, *sorted(GPU_FAULTS)))}")
        if node in faults or node in gpu_faults:
            _fail(f"{at(item + '/node')}: faults[{index}].node: {node} already has a fault "
                  f"({faults.get(node) or gpu_faults.get(node)})")
        if fault in GPU_FAULTS:
            gpu_faults[node] = str(fault)
            continue
        faults[node] = cast(Fault, fault)
    if gpu is not None:  # health checks read them
        gpu.update(gpu_faults)
    elif gpu_faults:
        # Without health checks (not read by simulate yet) a rollout never looks at GPU
        # telemetry, so a node with a GPU fault upgrades like any other, as in a real cluster.
        click.echo(f"note: {len(gpu_faults)} GPU fault(s) ({', '.join(sorted(gpu_faults))}) do "
                   "not change this rollout: no health checks read GPU telemetry", err=True)
    return faults


def _start(text: str | None) -> float:
    if text is None:
        return EPOCH
    from datetime import UTC

    from reconciler.fleet.windows import parse_instant

    try:
        start = parse_instant(text.strip(), UTC)
    except (ValueError, OverflowError):
        _fail(f"--start: expected an RFC 3339 time like '2026-12-01T18:00:00+08:00', got "
              f"{text[:80]!r}")
    if not EARLIEST_TIME < start < LATEST_TIME:
        _fail(f"--start: {text[:80]!r} is outside the years 1 to 9999")
    return start


def load_repo_config(path: Path | None) -> ConfigDocument | None:
    """``--repo-config``, validated like ``reconciler validate reconciler.yaml``: a link, an
    oversized file or a located error exits 2."""
    if path is None:
        return None
    try:
        data = read_bounded(path)
    except FileRefused as refused:
        _fail(f"cannot read --repo-config {path}: {refused.reason}")
    doc = load(data, str(path))
    if doc.errors:
        _fail("--repo-config is not valid:\n" + "\n".join(
            f"{f.file}:{f.line}:{f.column}: {f.severity}: {f.message} [{f.rule}]"
            for f in doc.errors))
    return doc


def cluster_settings(doc: ConfigDocument | None, cluster: str | None,
                     repo_config: Path | None) -> ClusterSettings:
    """``--repo-config`` resolved for ``--cluster`` as the daemon resolves it (none: the
    defaults); a section it refuses, or a ``health`` section that does not validate, exits
    2, located."""
    if doc is None:
        return ClusterSettings()
    try:
        settings = resolve(doc, cluster, source=str(repo_config))
    except SettingsRefused as exc:
        _fail(f"--repo-config: {exc}")
    if settings.health.error is not None:
        _fail(f"--repo-config: the health section is not valid: {settings.health.error}")
    return settings


def _check_from_version(version: str) -> None:
    """An image tag, as ``driver.payload.version`` must be (the CRD schema's ImageTag)."""
    if not version.strip():
        _fail("--from-version must not be empty")
    if not matches_definition("clusteroperator", "ImageTag", version):
        _fail(f"--from-version: expected an image tag like '2.33.0.9' (letters, digits, '_', "
              f"'.' and '-', at most 128, as driver.payload.version), got {_short(version)}")


def _check_cluster(settings: ConfigDocument | None, cluster: str,
                   repo_config: Path | None) -> None:
    """``--cluster`` only picks a ``clusters.<NAME>`` section: a name with none changes
    nothing, and is most likely a typo."""
    if settings is None:
        _fail("--cluster picks the clusters.<NAME> section of --repo-config: give --repo-config "
              "too")
    names = list(settings.cluster_names())
    if cluster in names:
        return
    close = difflib.get_close_matches(cluster, names, n=1)
    _fail(f"--cluster {_short(cluster)}: {repo_config} has no clusters.{cluster} section "
          f"(it has: {', '.join(names) or 'none'}), so --cluster would change nothing"
          + (f"; did you mean {close[0]}?" if close else ""))


def _clock(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:d}:{minutes:02d}:{secs:02d}"
    if seconds != whole:
        text += f".{round((seconds - whole) * 1000):03d}"
    return f"{days}d {text}" if days else text


_STEP_START = ("RolloutStarted", "StepStarted")
_STEP_DONE = ("StepCompleted", "GateOpened")
_STEP_LEAVE = ("StepStarted", "RolloutCompleted", "RollbackStarted")
_QUIET = ("NodeUpgradeStarted", "NodeReady", "NodeRollbackStarted")


def render_text(result: SimResult, driver: Mapping[str, Any], config: SimConfig) -> str:
    policy = UpgradePolicy.from_spec(driver.get("upgradePolicy"))
    new_version = (driver.get("payload") or {}).get("version")
    n = config.nodes
    targets = policy.step_targets(n)
    lines = [
        f"Simulated rollout {config.from_version} -> {new_version} on {n} nodes "
        f"(install {config.install_seconds:g} s, "
        + (f"gates confirmed after {config.auto_confirm:g} s)" if config.auto_confirm is not None
           else "gates wait for a person)"),
        f"policy: {len(policy.steps)} steps, maxParallel {policy.max_parallel}, maxUnavailable "
        f"{policy.max_unavailable} ({policy.resolved_max_unavailable(n)} nodes), "
        f"maxFailureThreshold {policy.max_failure_threshold}, fallback {policy.fallback}",
    ]
    if config.start != EPOCH or config.windows is not None:
        windows = config.windows
        lines.append(f"start {format_time(config.start)}; " + (
            "no maintenance windows" if windows is None else
            f"maintenance windows in {windows.timezone}: {len(windows.allow)} allow, "
            f"{len(windows.deny)} deny" + (f" (unusable: {windows.error})"
                                            if windows.error else "")))
    drain = config.settings.drain
    if drain is not None or config.serving is not None:
        lines.append(
            ("drain: off" if drain is None else
             f"drain: timeout {drain.timeout:g} s, onTimeout {drain.on_timeout}")
            + ("" if config.serving is None else
               f"; {config.serving.pods} serving pods, {config.serving.pods_per_budget} per "
               f"budget of maxUnavailable {config.serving.max_unavailable}, "
               f"{config.serving.grace_seconds:g} s to stop, replaced in "
               f"{config.serving.reschedule_seconds:g} s"))
    lines.append("")
    started: dict[int, float] = {}
    done: dict[int, float] = {}
    left: dict[int, float] = {}
    current = 0
    for event in result.events:
        if event.type in _STEP_LEAVE and current and current not in left:
            left[current] = event.t
        if event.type in _STEP_START and event.step:
            current = event.step
            started.setdefault(current, event.t)
        if event.type in _STEP_DONE and event.step:
            done.setdefault(event.step, event.t)
    # the toleration column only when a step has one (the report is as it was otherwise)
    tolerations = (policy.step_tolerations(n)
                   if any(s.toleration is not None for s in policy.steps) else None)
    header = f"{'step':>4} {'target':>7} {'batch':>6} {'parallel':>8} " + (
        f"{'tolerate':>8} " if tolerations is not None else "") + \
        f"{'started':>10} {'upgraded':>10} {'wait':>22} {'step time':>10}"
    lines.append(header)
    for index, step in enumerate(policy.steps, start=1):
        target = targets[index - 1]
        batch = max(target - (targets[index - 2] if index > 1 else 0), 0)
        tolerate = "" if tolerations is None else f"{tolerations[index - 1]:>8} "
        wait = "gate" if step.pause_ms is None else f"pause {step.pause_ms / 1000:g} s"
        if index in done and index in left:
            wait += f" ({_clock(left[index] - done[index])})"
        t0 = started.get(index)
        t1 = done.get(index)
        t2 = left.get(index)
        lines.append(
            f"{index:>4} {target:>7} {batch:>6} {policy.batch_max_parallel(batch):>8} "
            f"{tolerate}{_clock(t0) if t0 is not None else '-':>10} "
            f"{_clock(t1 - t0) if t0 is not None and t1 is not None else '-':>10} "
            f"{wait:>22} "
            f"{_clock(t2 - t0) if t0 is not None and t2 is not None else '-':>10}"
        )
    lines += ["", "timeline:"]
    quiet = 0
    for event in result.events:
        if event.type in _QUIET:
            quiet += 1
            continue
        where = f" [{event.node}]" if event.node and event.node not in event.message else ""
        lines.append(f"  {_clock(event.t):>10}  {event.type:<18} {event.message}{where}")
    lines.append(f"  ({quiet} per-node pod events not shown; --format json lists them)")
    status = result.final.get("status") or {}
    outcome = {
        "completed": "rollout completed",
        "rolled-back": "rolled back",
        "manual-gate": "stopped at a manual gate (use --auto-confirm to go on)",
        "fallback-pause": "paused by the failure fallback (never auto-confirmed)",
        "until": f"stopped at --until {config.until:g} s",
        "stalled": "stalled: nothing more can happen",
        "idle": "nothing to roll out",
    }.get(result.stop_reason, result.stop_reason)
    lines += [
        "",
        f"result: {outcome}; "
        + ("predicted total" if result.completed else "elapsed")
        + f" {_clock(result.duration_seconds)} ({result.duration_seconds:g} s)"
        + (f", ending {format_time(config.start + result.duration_seconds)}"
           if config.start != EPOCH or config.windows is not None else ""),
        f"phase {result.final.get('phase')}, step {status.get('currentStepIndex')} "
        f"{status.get('currentStepState')}, {status.get('totalUpgradeReadyReplicas')}/"
        f"{status.get('totalUpgradeReplicas')} nodes on the new version, max in flight "
        f"{result.max_in_flight}, max unavailable {result.max_unavailable_seen}",
    ]
    if status.get("message"):
        lines.append(f"message: {status['message']}")
    if result.tolerated:
        lines.append("tolerated (left behind on the failed driver): " + ", ".join(
            f"{e['node']} (step {e['step']})" for e in result.tolerated))
    if result.drain is not None:
        lines += drain_summary(result.drain)
    return "\n".join(lines)


@click.command("simulate")
@click.argument("policy_file", type=click.Path(path_type=Path))
@click.option("--nodes", type=BoundedInt(1, MAX_NODES), default=None,
              help=f"Fleet size, at most {MAX_NODES:,} (about 20 s and 0.5 GB at the most): "
                   "nodes node-0001 .. without labels. Or --nodes-file.")
@click.option("--nodes-file", "nodes_file", type=click.Path(path_type=Path), default=None,
              help="YAML or JSON: nodes: [{name: gpu-a-01, labels: {topology.kubernetes.io/"
                   "zone: zone-a}}], or kubectl get nodes -o yaml: the fleet's node names and "
                   "labels (canary, the rollout.topology key of --repo-config).")
@click.option("--from-version", required=True, help="Driver version every node runs at start.")
@click.option("--faults", "faults_file", type=click.Path(path_type=Path),
              help="YAML: faults: [{node: node-0003, fault: imagepull|crashloop|never-ready|"
                   "node-notready|gpu-unavailable|gpu-throttling}]")
@click.option("--install-seconds", type=FiniteFloat(0), default=60.0, show_default=True,
              help="Time from deleting a node's driver pod to the new pod being Ready.")
@click.option("--auto-confirm", type=FiniteFloat(0), default=None,
              help="Confirm each manual gate this many seconds after it opens "
                   "(default: stop at the first gate).")
@click.option("--until", type=FiniteFloat(0, LAST_VIRTUAL_SECOND), default=DEFAULT_UNTIL,
              show_default=True,
              help="Bound on virtual time, seconds (at most the end of year 9999, the last "
                   "instant a status can record).")
@click.option("--ready-timeout", type=FiniteFloat(0, min_open=True), default=None,
              help="readyTimeout of the reconciler, seconds [rollout.readyTimeout of "
                   "--repo-config; 600].")
@click.option("--start", "start_text", default=None, metavar="TIME",
              help="The wall-clock time the rollout starts (RFC 3339, e.g. "
                   "2026-12-01T18:00:00+08:00) [2026-01-01T00:00:00Z]; maintenance windows "
                   "are read from there.")
@click.option("--repo-config", "repo_config", type=click.Path(path_type=Path), default=None,
              help="A reconciler.yaml whose rollout, windows and health sections the simulated "
                   "cluster uses (clusters.<--cluster> where it has its own).")
@click.option("--cluster", default=None, metavar="NAME",
              help="The simulated cluster's name, for the clusters.<NAME> sections of "
                   "--repo-config.")
@click.option("--scrape-delay", type=FiniteFloat(0), default=15.0, show_default=True,
              help="With health checks: seconds from a new pod turning Ready until its GPU "
                   "telemetry is in Prometheus (the checks read no sample until then).")
@click.option("--cordon-ahead/--no-cordon-ahead", "cordon_ahead", default=True,
              show_default=True,
              help="Cordon the nodes next in line ahead of their start, as `reconciler run` "
                   "does.")
@click.option("--drain", "drain_on", is_flag=True, default=False,
              help="Drain nodes before their driver pod goes (rollout.drain with its defaults, "
                   "when --repo-config gives none).")
@click.option("--serving-pods", type=BoundedInt(0, MAX_NODES * 10), default=0,
              show_default=True,
              help="Serving pods spread over the fleet behind PodDisruptionBudgets (without "
                   "drain, a node holding one waits for it for ever, as on a live cluster).")
@click.option("--pods-per-budget", type=BoundedInt(1, MAX_NODES * 10), default=10,
              show_default=True, help="Serving pods per Deployment and its budget.")
@click.option("--budget-max-unavailable", type=BoundedInt(0, MAX_NODES * 10), default=1,
              show_default=True, help="maxUnavailable of each budget.")
@click.option("--drain-seconds", type=FiniteFloat(0), default=30.0, show_default=True,
              help="Seconds an evicted serving pod takes to stop (its grace period).")
@click.option("--reschedule-seconds", type=FiniteFloat(0), default=30.0, show_default=True,
              help="Seconds from a serving pod gone until its replacement elsewhere is Ready "
                   "(its budget allows again).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--html", "html_file", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write the predicted rollout as a self-contained page.")
def simulate(
    policy_file: Path,
    nodes: int | None,
    nodes_file: Path | None,
    from_version: str,
    faults_file: Path | None,
    install_seconds: float,
    auto_confirm: float | None,
    until: float,
    ready_timeout: float | None,
    start_text: str | None,
    repo_config: Path | None,
    cluster: str | None,
    scrape_delay: float,
    cordon_ahead: bool,
    drain_on: bool,
    serving_pods: int,
    pods_per_budget: int,
    budget_max_unavailable: int,
    drain_seconds: float,
    reschedule_seconds: float,
    fmt: str,
    html_file: Path | None,
) -> None:
    """Simulate the rollout POLICY_FILE asks for on a virtual fleet (no cluster)."""
    if (nodes is None) == (nodes_file is None):
        _fail("give the fleet as --nodes N or as --nodes-file F (one of them)")
    fleet = load_nodes_file(nodes_file, MAX_NODES, _fail) if nodes_file is not None else ()
    nodes = len(fleet) if fleet else int(nodes or 0)
    driver = load_driver_spec(policy_file)
    config = load_repo_config(repo_config)  # the whole file first: then its sections
    settings = cluster_settings(config, cluster, repo_config)
    health = settings.health.config
    gpu_faults: dict[str, str] = {}
    faults = load_faults(faults_file, nodes, gpu_faults if health is not None else None,
                         [name for name, _ in fleet] if fleet else None)
    _check_from_version(from_version)
    if cluster is not None:
        _check_cluster(config, cluster, repo_config)
    payload = driver.get("payload") or {}
    if Payload.from_spec(dict(payload, version=from_version)).image == Payload.from_spec(
        payload
    ).image:
        click.echo(printable(f"note: {from_version} and {payload.get('version')} name the "
                             "same image; no rollout starts"), err=True)
    start = _start(start_text)
    rollout = _with_flags(settings.rollout, ready_timeout=ready_timeout, drain=drain_on)
    serving = None
    if serving_pods:
        serving = ServingModel(serving_pods, pods_per_budget, budget_max_unavailable,
                               drain_seconds, reschedule_seconds)
    sim = SimConfig(
        nodes=nodes,
        from_version=from_version,
        install_seconds=install_seconds,
        auto_confirm=auto_confirm,
        until=min(until, LATEST_TIME - start),
        faults=faults,
        settings=PlannerSettings(cordon_ahead=cordon_ahead).for_pass(rollout),
        serving=serving,
        health=health,
        gpu_faults=gpu_faults,
        scrape_delay=scrape_delay,
        start=start,
        windows=settings.windows,
        fleet=fleet,
    )
    with _collector_off():
        result = run_simulation(driver, sim)
        report = topology_report(result, sim, str(payload.get("version")),
                                 lambda other: run_simulation(driver, other))
        _write(result, driver, sim, fmt, html_file, report)
    raise SystemExit(0 if result.completed else 1)


def _with_flags(rollout: RolloutSettings, *, ready_timeout: float | None,
                drain: bool) -> RolloutSettings:
    """The cluster's ``rollout`` section with the command line's over it: ``--ready-timeout``
    pins its setting (as ``reconciler run``'s does), ``--drain`` drains with the defaults
    where the section has no ``drain``."""
    if ready_timeout is not None:
        rollout = replace(rollout, ready_timeout=ready_timeout)
    if drain and rollout.drain is None:
        rollout = replace(rollout, drain=DrainSettings())
    return rollout


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    """The cycle collector off for the run: a fleet's millions of objects live to the end and
    form no cycles, and every full collection walked all of them (a third of a 100,000-node
    run's time); reference counting frees the rest as before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _write(result: SimResult, driver: Mapping[str, Any], config: SimConfig, fmt: str,
           html_file: Path | None, topology: Mapping[str, Any] | None = None) -> None:
    if html_file is not None:
        from reconciler.dashboard.simulate_page import write_simulation_page

        try:
            size = write_simulation_page(html_file, result, driver, config)
        except OSError as exc:
            _fail(f"cannot write {html_file}: {exc}")
        click.echo(f"wrote {html_file} ({size} bytes)", err=True)
    if fmt == "json":
        # json.dumps(..., indent=2) to the byte, written as it is made (100,000 nodes)
        output = result.to_json()
        if topology is not None:  # (only then: the output without topology is as it was)
            output["topology"] = topology
        write_json(output, lambda text: click.echo(text, nl=False))
        click.echo()
    else:
        # names and versions come from the policy file and the command line
        lines = render_text(result, driver, config).split("\n")
        if topology is not None:
            lines += render_topology(topology, _clock)
        click.echo("\n".join(printable(line) for line in lines))
