"""constraints.txt pins every Python package scripts/install and the Dockerfile install, and
`scripts/lock --check` catches a dependency added to pyproject.toml without a pin."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.test_dockerfile import stages

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT = "gpu-gitops-reconciler"


def pinned() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not name==version"
            found[canonicalize_name(name)] = version
    return found


def pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(text) for text in (
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["test"],
    )]


def test_every_pyproject_requirement_is_pinned_to_a_version_it_allows() -> None:
    pins = pinned()
    for requirement in pyproject_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} has no pin in constraints.txt: run scripts/lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {requirement}: run scripts/lock")


def test_every_package_the_install_pulls_in_is_pinned_and_installed_at_its_pin() -> None:
    """The installed project's dependency closure (markers evaluated here), from the .venv
    scripts/install made: nothing unpinned, and each at the version constraints.txt says."""
    pins = pinned()
    environment = {key: str(value) for key, value in default_environment().items()}
    seen: set[str] = set()
    todo = [(PROJECT, {"test"})]
    while todo:
        name, extras = todo.pop()
        for text in metadata.requires(name) or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({**environment, "extra": extra})
                for extra in (extras or {""})
            ):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency in seen:
                continue
            seen.add(dependency)
            assert dependency in pins, (
                f"{dependency} (needed by {name}) has no pin in constraints.txt: run scripts/lock")
            assert metadata.version(dependency) == pins[dependency], (
                f"{dependency} {metadata.version(dependency)} is installed, constraints.txt "
                f"pins {pins[dependency]}: run scripts/install")
            todo.append((dependency, set(requirement.extras)))
    assert {"kubernetes", "pytest", "prometheus-client"} <= seen


def test_lock_check_names_a_dependency_added_without_a_pin(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "lock", tmp_path / "scripts" / "lock")
    shutil.copy2(CONSTRAINTS, tmp_path / "constraints.txt")
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dependencies = [\n' in text
    (tmp_path / "pyproject.toml").write_text(
        text.replace('dependencies = [\n', 'dependencies = [\n  "Fresh_Package>=1",\n', 1))
    check = [sys.executable, str(tmp_path / "scripts" / "lock"), "--check"]
    done = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "Fresh_Package>=1 (project.dependencies)" in done.stderr
    assert "scripts/lock" in done.stderr

    (tmp_path / "pyproject.toml").write_text(text)
    done = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")


def test_install_and_the_image_build_install_through_the_constraints() -> None:
    install = (ROOT / "scripts" / "install").read_text()
    assert "scripts/lock --check" in install
    assert 'PIP_CONSTRAINT="$PWD/constraints.txt" .venv/bin/python -m pip install' in install
    assert "cat pyproject.toml constraints.txt | sha256sum" in install  # a new pin reinstalls
    build = stages()[0]
    copied = " ".join(rest for keyword, rest in build if keyword == "COPY")
    assert "constraints.txt" in copied.split()
    [run] = [rest for keyword, rest in build if keyword == "RUN"]
    assert re.match(r'export PIP_CONSTRAINT="\$PWD/constraints.txt"\s+&& ', run), run
