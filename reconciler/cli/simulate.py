"""``reconciler simulate``: a what-if run of a policy file's rollout on a virtual fleet.

The policy file is validated exactly as ``reconciler validate`` would (full ClusterOperator
object), or, for a bare ``driver:`` / ``upgradePolicy:`` fragment as in the vendor manual,
after wrapping it into one; findings point at the fragment's own lines.

Exit codes: 0 the rollout completed; 1 it ran but did not complete (stopped at a gate, paused by
the fallback, rolled back, stalled or out of time); 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

import click

from reconciler.policy.findings import Finding
from reconciler.policy.payload import Payload
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.policy.validation import parse_only, validate_document
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.simulator import (
    DEFAULT_UNTIL,
    FAULTS,
    Fault,
    SimConfig,
    SimResult,
    node_name,
)
from reconciler.rollout.simulator import (
    simulate as run_simulation,
)

_HEADER = (
    "apiVersion: gpu.metax-tech.com/v1alpha1\nkind: ClusterOperator\n"
    "metadata:\n  name: cluster-operator\n"
)


class InputError(click.ClickException):
    exit_code = 2


def _fail(message: str) -> NoReturn:
    raise InputError(message)


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
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read policy file {path}: {exc}")
    parsed = parse_only(text, str(path))
    if parsed.obj is None or any(f.is_error for f in parsed.findings):
        _fail("\n".join(_unwrap(f, 0, 0, "", str(path)) for f in parsed.findings)
              or f"{path}: empty policy file")
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


def load_faults(path: Path | None, nodes: int) -> dict[str, Fault]:
    if path is None:
        return {}
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        _fail(f"cannot read faults file {path}: {exc}")
    entries = data.get("faults") if isinstance(data, Mapping) else None
    if not isinstance(data, Mapping) or set(data) - {"faults"} or not isinstance(entries, list):
        _fail(f"{path}: expected a mapping with one key 'faults' holding a list of "
              "{node, fault} entries")
    width = max(4, len(str(nodes)))

    def known(name: object) -> bool:
        if not isinstance(name, str) or not name.startswith("node-"):
            return False
        digits = name[5:]
        return len(digits) == width and digits.isdigit() and 1 <= int(digits) <= nodes

    faults: dict[str, Fault] = {}
    for index, entry in enumerate(entries):
        where = f"{path}: faults[{index}]"
        if not isinstance(entry, Mapping) or set(entry) != {"node", "fault"}:
            _fail(f"{where}: expected exactly the keys 'node' and 'fault', got {entry!r}")
        node, fault = entry["node"], entry["fault"]
        if not known(node):
            _fail(f"{where}.node: no node named {node!r} in a fleet of {nodes} nodes "
                  f"(names run {node_name(1, width)} .. {node_name(nodes, width)})")
        if fault not in FAULTS:
            _fail(f"{where}.fault: unknown fault {fault!r}; expected one of {', '.join(FAULTS)}")
        if node in faults:
            _fail(f"{where}.node: {node} already has a fault ({faults[node]})")
        faults[node] = cast(Fault, fault)
    return faults


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
        "",
    ]
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
    header = f"{'step':>4} {'target':>7} {'batch':>6} {'parallel':>8} {'started':>10} " \
             f"{'upgraded':>10} {'wait':>22} {'step time':>10}"
    lines.append(header)
    for index, step in enumerate(policy.steps, start=1):
        target = targets[index - 1]
        batch = max(target - (targets[index - 2] if index > 1 else 0), 0)
        wait = "gate" if step.pause_ms is None else f"pause {step.pause_ms / 1000:g} s"
        if index in done and index in left:
            wait += f" ({_clock(left[index] - done[index])})"
        t0 = started.get(index)
        t1 = done.get(index)
        t2 = left.get(index)
        lines.append(
            f"{index:>4} {target:>7} {batch:>6} {policy.batch_max_parallel(batch):>8} "
            f"{_clock(t0) if t0 is not None else '-':>10} "
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
        + f" {_clock(result.duration_seconds)} ({result.duration_seconds:g} s)",
        f"phase {result.final.get('phase')}, step {status.get('currentStepIndex')} "
        f"{status.get('currentStepState')}, {status.get('totalUpgradeReadyReplicas')}/"
        f"{status.get('totalUpgradeReplicas')} nodes on the new version, max in flight "
        f"{result.max_in_flight}, max unavailable {result.max_unavailable_seen}",
    ]
    if status.get("message"):
        lines.append(f"message: {status['message']}")
    return "\n".join(lines)


@click.command("simulate")
@click.argument("policy_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Fleet size.")
@click.option("--from-version", required=True, help="Driver version every node runs at start.")
@click.option("--faults", "faults_file", type=click.Path(path_type=Path, dir_okay=False),
              help="YAML: faults: [{node: node-0003, fault: imagepull|crashloop|never-ready|"
                   "node-notready}]")
@click.option("--install-seconds", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Time from deleting a node's driver pod to the new pod being Ready.")
@click.option("--auto-confirm", type=click.FloatRange(min=0), default=None,
              help="Confirm each manual gate this many seconds after it opens "
                   "(default: stop at the first gate).")
@click.option("--until", type=click.FloatRange(min=0), default=DEFAULT_UNTIL, show_default=True,
              help="Bound on virtual time, seconds.")
@click.option("--ready-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0,
              show_default=True, help="readyTimeout of the reconciler, seconds.")
@click.option("--cordon-ahead/--no-cordon-ahead", "cordon_ahead", default=True,
              show_default=True,
              help="Cordon the nodes next in line ahead of their start, as `reconciler run` "
                   "does.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--html", "html_file", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Also write the predicted rollout as a self-contained page.")
def simulate(
    policy_file: Path,
    nodes: int,
    from_version: str,
    faults_file: Path | None,
    install_seconds: float,
    auto_confirm: float | None,
    until: float,
    ready_timeout: float,
    cordon_ahead: bool,
    fmt: str,
    html_file: Path | None,
) -> None:
    """Simulate the rollout POLICY_FILE asks for on a virtual fleet (no cluster)."""
    driver = load_driver_spec(policy_file)
    faults = load_faults(faults_file, nodes)
    if not from_version.strip():
        _fail("--from-version must not be empty")
    payload = driver.get("payload") or {}
    if Payload.from_spec(dict(payload, version=from_version)).image == Payload.from_spec(
        payload
    ).image:
        click.echo(f"note: {from_version} and {payload.get('version')} name the same image; "
                   "no rollout starts", err=True)
    config = SimConfig(
        nodes=nodes,
        from_version=from_version,
        install_seconds=install_seconds,
        auto_confirm=auto_confirm,
        until=until,
        faults=faults,
        settings=PlannerSettings(ready_timeout=ready_timeout, cordon_ahead=cordon_ahead),
    )
    result = run_simulation(driver, config)
    if html_file is not None:
        from reconciler.dashboard.simulate_page import write_simulation_page

        try:
            size = write_simulation_page(html_file, result, driver, config)
        except OSError as exc:
            _fail(f"cannot write {html_file}: {exc}")
        click.echo(f"wrote {html_file} ({size} bytes)", err=True)
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(render_text(result, driver, config))
    raise SystemExit(0 if result.completed else 1)
