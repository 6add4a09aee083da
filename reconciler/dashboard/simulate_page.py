"""``reconciler simulate --html FILE``: the predicted rollout as one self-contained page (no
script, no external resource), small enough to attach to a pull request: nodes on the new
version over time as an inline SVG, with each step's pause and gate marked, and the per-step
table. Every number on it is the one ``--format json`` prints. Every text is escaped."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from reconciler.dashboard.model import step_times
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.simulator import SimConfig, SimResult

#: most points of the curve (a 100,000-node run has thousands of planning calls)
MAX_POINTS = 600
_W, _H, _PAD_L, _PAD_B, _PAD_T = 900, 300, 56, 36, 14


def _clock(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}"


def _points(result: SimResult) -> list[tuple[float, int]]:
    points: list[tuple[float, int]] = [(0.0, 0)]
    for t, _, _, upgraded, _, _ in result.ticks:
        if points[-1][1] != upgraded:  # a step curve: nodes turn Ready at an instant
            points += [(t, points[-1][1]), (t, upgraded)]
    points.append((result.duration_seconds, points[-1][1]))
    if len(points) > MAX_POINTS:
        step = len(points) / MAX_POINTS
        points = [points[int(i * step)] for i in range(MAX_POINTS)] + [points[-1]]
    return points


def _svg(result: SimResult, steps: list[dict[str, Any]], nodes: int) -> str:
    end = max(result.duration_seconds, 1.0)
    plot_w, plot_h = _W - _PAD_L - 10, _H - _PAD_B - _PAD_T

    def x(t: float) -> float:
        return round(_PAD_L + plot_w * t / end, 1)

    def y(n: float) -> float:
        return round(_PAD_T + plot_h * (1 - n / max(nodes, 1)), 1)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
             f'role="img" aria-label="nodes on the new version over time">']
    for row in steps:  # pauses and gates as bands
        if row["upgraded_t"] is not None and row["ended_t"] is not None and (
                row["ended_t"] > row["upgraded_t"] or row["gate"]):
            x0, x1 = x(row["upgraded_t"]), x(row["ended_t"])
            cls = "gate" if row["gate"] else "pause"
            parts.append(f'<rect class="{cls}" x="{x0}" y="{_PAD_T}" '
                         f'width="{max(x1 - x0, 1.5)}" height="{plot_h}"><title>step '
                         f'{row["step"]}: {escape(row["wait"])}</title></rect>')
    for fraction in (0, 0.25, 0.5, 0.75, 1):
        n = round(nodes * fraction)
        parts.append(f'<line class="grid" x1="{_PAD_L}" x2="{_W - 10}" y1="{y(n)}" '
                     f'y2="{y(n)}"/><text class="axis" x="{_PAD_L - 6}" y="{y(n) + 4}" '
                     f'text-anchor="end">{n}</text>')
    for fraction, anchor in ((0, "start"), (0.5, "middle"), (1, "end")):
        t = end * fraction
        parts.append(f'<text class="axis" x="{x(t)}" y="{_H - 12}" text-anchor="{anchor}">'
                     f'{_clock(t)}</text>')
    path = " ".join(f"{x(t)},{y(n)}" for t, n in _points(result))
    parts.append(f'<polyline class="curve" points="{path}"/>')
    for row in steps:
        if row["started_t"] is not None:
            parts.append(f'<text class="step" x="{x(row["started_t"]) + 3}" y="{_PAD_T + 12}">'
                         f'{row["step"]}</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#1b1f24}"
    "h1{font-size:19px}table{border-collapse:collapse}"
    "th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    "svg{width:100%;max-width:900px;height:auto;background:#fff;border:1px solid #ddd}"
    ".curve{fill:none;stroke:#2e9e5b;stroke-width:2}.grid{stroke:#eee}"
    ".axis,.step{font-size:11px;fill:#666}.pause{fill:#f3e6b3}.gate{fill:#f5c6c6}"
    "dl{display:flex;flex-wrap:wrap;gap:4px 24px}dt{font-size:12px;color:#666}"
    "dd{margin:0;font-weight:600}.legend span{padding:0 6px;margin-right:8px}"
)


def render_simulation_html(result: SimResult, driver: Mapping[str, Any],
                           config: SimConfig) -> str:
    policy = UpgradePolicy.from_spec(driver.get("upgradePolicy"))
    new_version = str((driver.get("payload") or {}).get("version") or "")
    n = config.nodes
    targets = policy.step_targets(n) if policy.steps else []
    times = step_times([(e.t, e.type, e.step) for e in result.events])
    rows: list[dict[str, Any]] = []
    before = 0
    tolerations = policy.step_tolerations(n) if policy.steps else []
    for index, step in enumerate(policy.steps, start=1):
        target = targets[index - 1]
        at = times.get(index, {})
        gate = step.pause_ms is None
        rows.append({
            "step": index, "target": target, "batch": max(target - before, 0),
            "parallel": policy.batch_max_parallel(max(target - before, 0)),
            "tolerates": tolerations[index - 1],
            "gate": gate,
            "wait": "gate (a person)" if step.pause_ms is None
            else f"pause {step.pause_ms / 1000:g} s",
            "started_t": at.get("started"), "upgraded_t": at.get("upgraded"),
            "ended_t": at.get("ended"),
        })
        before = max(before, target)
    final = result.final.get("status") or {}
    ready = final.get("totalUpgradeReadyReplicas")
    title = f"Predicted rollout {config.from_version} -> {new_version} on {n} nodes"
    gates = ("gates confirmed after " + f"{config.auto_confirm:g} s"
             if config.auto_confirm is not None else "gates wait for a person")
    out = [
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<p>install {config.install_seconds:g} s per node; {escape(gates)}; policy: "
        f"{len(policy.steps)} steps, maxParallel {escape(str(policy.max_parallel))}, "
        f"maxUnavailable {escape(str(policy.max_unavailable))}, fallback "
        f"{escape(policy.fallback)}</p>",
        "<dl>",
        f'<div><dt>result</dt><dd id="stop-reason">{escape(result.stop_reason)}</dd></div>',
        f'<div><dt>duration</dt><dd id="duration" data-seconds="{result.duration_seconds:g}">'
        f"{_clock(result.duration_seconds)} ({result.duration_seconds:g} s)</dd></div>",
        f'<div><dt>nodes on the new version</dt><dd id="upgraded" data-nodes="{ready}">'
        f"{ready}/{final.get('totalUpgradeReplicas')}</dd></div>",
        f'<div><dt>max in flight</dt><dd id="max-in-flight">{result.max_in_flight}</dd></div>',
        f'<div><dt>max unavailable</dt><dd id="max-unavailable">'
        f"{result.max_unavailable_seen}</dd></div>",
        f'<div><dt>phase</dt><dd id="phase">{escape(str(result.final.get("phase")))}</dd>'
        "</div></dl>",
        '<p class="legend"><span style="background:#f3e6b3">pause</span>'
        '<span style="background:#f5c6c6">gate</span> nodes on the new version over time</p>',
        _svg(result, rows, n),
        "<h2>Steps</h2><table id=\"steps\"><thead><tr><th>step</th><th>target</th>"
        "<th>batch</th><th>parallel</th><th>failures tolerated</th><th>started</th>"
        "<th>upgraded after</th><th>wait</th><th>step time</th></tr></thead><tbody>",
    ]
    for row in rows:
        s, u, e = row["started_t"], row["upgraded_t"], row["ended_t"]
        out.append(
            f'<tr data-step="{row["step"]}" data-started="{"" if s is None else f"{s:g}"}" '
            f'data-ended="{"" if e is None else f"{e:g}"}"><td>{row["step"]}</td>'
            f'<td>{row["target"]}</td><td>{row["batch"]}</td><td>{row["parallel"]}</td>'
            f'<td>{row["tolerates"]}</td>'
            f"<td>{_clock(s) if s is not None else '-'}</td>"
            f"<td>{_clock(u - s) if s is not None and u is not None else '-'}</td>"
            f"<td>{escape(row['wait'])}</td>"
            f"<td>{_clock(e - s) if s is not None and e is not None else '-'}</td></tr>")
    out.append("</tbody></table>")
    if result.tolerated:
        left = ", ".join(f"{e['node']} (step {e['step']})" for e in result.tolerated)
        out.append(f'<p id="tolerated">left behind within their step\'s toleration: '
                   f"{escape(left)}</p>")
    message = final.get("message")
    if message:
        out.append(f"<p>message: {escape(str(message))}</p>")
    out.append("</body></html>\n")
    return "".join(out)


def write_simulation_page(path: Path, result: SimResult, driver: Mapping[str, Any],
                          config: SimConfig) -> int:
    """Writes the page; returns its size in bytes."""
    data = render_simulation_html(result, driver, config).encode()
    path.write_bytes(data)
    return len(data)
