"""The layers the README draws, enforced: import-linter's contracts (``.importlinter``) and the
one clock seam (``reconciler/clock.py``)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: code that keeps a virtual or display clock of its own (issue 16)
OWN_CLOCKS = ("reconciler/sim/", "reconciler/demo/")
CLOCK_SEAM = "reconciler/clock.py"
CLOCK_READS = {("time", "time"), ("time", "monotonic"), ("time", "time_ns"),
               ("time", "monotonic_ns"), ("datetime", "now"), ("datetime", "utcnow"),
               ("datetime", "today")}


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(cwd / ".importlinter"), "--no-cache"],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(cwd)})


def _lint_with(tmp_path: Path, module: str, added: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over a copy of the package with ``added`` appended to ``module``."""
    shutil.copytree(ROOT / "reconciler", tmp_path / "reconciler",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    path = tmp_path / "reconciler" / module
    path.write_text(path.read_text() + added)
    return _lint_imports(tmp_path)


def _hidden_import(imported: str) -> str:
    """An import of ``imported`` hidden inside a function."""
    package, _, name = imported.rpartition(".")
    return f"\n\ndef _other() -> object:\n    from {package} import {name}\n\n    return {name}\n"


def test_the_tree_keeps_every_layer_contract() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_a_planner_that_imports_kubernetes_breaks_the_pure_contract(tmp_path: Path) -> None:
    done = _lint_with(tmp_path, "rollout/planner.py", "\nimport kubernetes  # noqa\n")
    assert done.returncode == 1, done.stdout[-4000:]
    assert "reconciler.rollout.planner -> kubernetes" in done.stdout
    assert "BROKEN" in done.stdout


def test_an_import_circle_breaks_the_layers_contract(tmp_path: Path) -> None:
    """The circle issue 35 removed (the window calendar reading the repository config, which
    validates windows with the calendar) comes back: the layers contract fails, even for an
    import hidden in a function."""
    done = _lint_with(tmp_path, "fleet/windows.py", _hidden_import("reconciler.config.settings"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "reconciler.fleet.windows is not allowed to import reconciler.config" in done.stdout
    assert "BROKEN" in done.stdout


def test_an_import_circle_inside_a_package_breaks_the_acyclic_contract(tmp_path: Path) -> None:
    """A circle inside the config package (the document validates with ``validation.py``;
    validation reading the document back) comes back: the layers contract names packages, so
    the ``acyclic_siblings`` contract refuses it, even hidden in a function."""
    done = _lint_with(tmp_path, "config/validation.py",
                      _hidden_import("reconciler.config.document"))
    assert done.returncode == 1, done.stdout[-4000:]
    assert "No cycles are allowed in reconciler.config." in done.stdout
    assert "- .validation -> .document (1 import)" in done.stdout
    assert "BROKEN" in done.stdout


#: an import that closes a circle among the domain packages (issue 42) though each module stays
#: in its own layer: (the module that gets it, the module it imports, the line lint-imports
#: prints)
PACKAGE_CIRCLES = [
    pytest.param("policy/rollout_rules.py", "reconciler.fleet.windows",
                 "reconciler.policy is not allowed to import reconciler.fleet",
                 id="policy checks windows with the calendar again"),
    pytest.param("policy/validation.py", "reconciler.health.checks",
                 "reconciler.policy is not allowed to import reconciler.health",
                 id="policy checks health sections again"),
    pytest.param("fleet/window_pause.py", "reconciler.rollout.model",
                 "reconciler.fleet is not allowed to import reconciler.rollout",
                 id="fleet predicts with the rollout planner again"),
]


@pytest.mark.parametrize(("module", "imported", "refusal"), PACKAGE_CIRCLES)
def test_a_circle_among_the_domain_packages_breaks_the_domain_contract(
        tmp_path: Path, module: str, imported: str, refusal: str) -> None:
    """policy, health, fleet and rollout import each other one way as whole packages: an
    import the module layers allow (the calendar and the health checks sit below the policy
    package, the window pauses above the planner) but that makes a package circle (the fleet's
    promotion gate and the health rules import the policy package; the planner imports the
    calendar) fails the domain contract, and only that one."""
    done = _lint_with(tmp_path, module, _hidden_import(imported))
    assert done.returncode == 1, done.stdout[-4000:]
    assert f"{refusal}:" in done.stdout
    assert "Contracts: 10 kept, 1 broken." in done.stdout
    assert "(rollout over fleet over health over policy): a circle among them fails BROKEN" in (
        " ".join(done.stdout.split()))


#: an import each independence contract refuses, hidden in a function: (the module that gets
#: it, the module it imports, the line lint-imports prints)
INDEPENDENT_IMPORTS = [
    pytest.param("sync/fleet_measures.py", "reconciler.controller.index",
                 "reconciler.sync is not allowed to import reconciler.controller",
                 id="a role imports another"),
    pytest.param("firmware/controller.py", "reconciler.sim.fleet",
                 "reconciler.firmware.controller is not allowed to import reconciler.sim",
                 id="a role imports the simulator"),
    pytest.param("dashboard/model.py", "reconciler.notify.events",
                 "reconciler.dashboard is not allowed to import reconciler.notify",
                 id="the dashboard imports the notifications"),
    pytest.param("demo/runner.py", "reconciler.daemon.assembly",
                 "reconciler.demo is not allowed to import reconciler.daemon",
                 id="the demo imports the daemon's assembly"),
]


@pytest.mark.parametrize(("module", "imported", "refusal"), INDEPENDENT_IMPORTS)
def test_an_import_between_independent_parts_breaks_a_contract(
        tmp_path: Path, module: str, imported: str, refusal: str) -> None:
    """Parts that must not know each other (the roles, the simulator; the dashboard and the
    notifications; the demo and the daemon it starts as a process): one import between them,
    even inside a function, fails ``lint-imports`` (the simulator, the notifications and the
    daemon sit below the parts that import them here: only the independence contracts refuse
    those three)."""
    done = _lint_with(tmp_path, module, _hidden_import(imported))
    assert done.returncode == 1, done.stdout[-4000:]
    assert f"{refusal}:" in done.stdout
    assert "BROKEN" in done.stdout


def _clock_reads(path: Path, root: Path = ROOT) -> list[str]:
    """``module.attr`` reads of a machine clock in ``path``: calls, references (a default of
    ``time.monotonic`` reads the clock later) and ``from time import monotonic``."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in CLOCK_READS):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                if (node.module, alias.name) in CLOCK_READS:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: from {node.module} "
                                 f"import {alias.name}")
    return found


def test_only_the_clock_seam_reads_the_machines_clocks() -> None:
    reads = [read for path in sorted((ROOT / "reconciler").rglob("*.py"))
             if not str(path.relative_to(ROOT)).startswith(OWN_CLOCKS)
             and str(path.relative_to(ROOT)) != CLOCK_SEAM
             for read in _clock_reads(path)]
    assert reads == []


def test_the_clock_check_sees_calls_references_and_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import time\nfrom datetime import datetime\nfrom time import monotonic\n"
                      "a = time.time()\nb = datetime.now()\ndef f(clock=time.monotonic): ...\n"
                      "time.sleep(1)\n")
    assert [r.split(": ", 1)[1] for r in _clock_reads(sample, tmp_path)] == [
        "from time import monotonic", "time.time", "datetime.now", "time.monotonic"]


def test_every_package_is_bound_by_the_contracts_that_name_all_others() -> None:
    """A new top-level package or module is covered: each 'only X' contract and the CLI's
    lists every part of ``reconciler`` but the one it allows."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    parts = {f"reconciler.{p.stem if p.is_file() else p.name}"
             for p in (ROOT / "reconciler").iterdir()
             if (p.is_dir() and (p / "__init__.py").exists())
             or (p.suffix == ".py" and p.name != "__init__.py")}
    allowed = {"kube-only": "reconciler.kube", "gitops-only": "reconciler.gitops",
               "cli-on-top": "reconciler.cli"}
    for contract, exempt in allowed.items():
        listed = set(config[f"importlinter:contract:{contract}"]["source_modules"].split())
        assert listed == parts - {exempt}, (contract, sorted(parts - {exempt} - listed))
    # and each has its place in the layers (as a whole, or module by module)
    layered = {name for line in config["importlinter:contract:layers"]["layers"].split("\n")
               for name in line.replace(":", "|").split("|") if name.strip()}
    placed = {".".join(name.strip().split(".")[:2]) for name in layered}
    assert placed == parts, sorted(parts - placed)
