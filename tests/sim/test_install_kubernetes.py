"""scripts/install-kubernetes: the deb-src entries it derives from the machine's own apt sources
(scripts/deb-src-entries), the releases it accepts, and the Go modules it builds from. Nothing is
built or installed here."""

from __future__ import annotations

import os
import re
import resource
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DERIVE = REPO / "scripts" / "deb-src-entries"
INSTALL = REPO / "scripts" / "install-kubernetes"
MODULES = REPO / "scripts" / "kube-modules"
KEYRING = "/usr/share/keyrings/example-archive-keyring.gpg"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*args], capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory,
        env={**os.environ, **(env or {})}, check=False)


def _apt(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "etc" / "apt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        last = ""
        for line in block.splitlines():
            if line.startswith(" "):
                fields[last] += "\n" + line
            else:
                last, _, value = line.partition(": ")
                fields[last] = value
        stanzas.append(fields)
    return stanzas


def test_one_line_entries_become_deb_src_stanzas_with_their_options(tmp_path: Path) -> None:
    root = _apt(tmp_path, {"sources.list": (
        "# comment\n"
        f"deb [arch=amd64 signed-by={KEYRING}] http://archive.example/debian stable main contrib"
        "  # trailing comment\n"
        "deb http://archive.example/security stable-security main\n"
        "deb http://flat.example/repo ./\n")})
    result = _run(str(DERIVE), "--root", str(root))
    assert result.returncode == 0, result.stderr
    assert _stanzas(result.stdout) == [
        {"Types": "deb-src", "URIs": "http://archive.example/debian", "Suites": "stable",
         "Components": "main contrib", "Signed-By": KEYRING},
        {"Types": "deb-src", "URIs": "http://archive.example/security",
         "Suites": "stable-security", "Components": "main"},
        {"Types": "deb-src", "URIs": "http://flat.example/repo", "Suites": "./"},
    ]


def test_deb822_stanzas_keep_their_fields_and_inline_keys(tmp_path: Path) -> None:
    root = _apt(tmp_path, {"sources.list.d/archive.sources": (
        "# deb822\n"
        "Types: deb\n"
        "URIs: http://archive.example/debian http://other.example/debian\n"
        "Suites: stable stable-updates\n"
        "Components: main\n"
        "Architectures: amd64\n"
        "Signed-By:\n"
        " -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
        " .\n"
        " mQINBF\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n"
        "\n"
        "Types: deb\n"
        "URIs: http://disabled.example/debian\n"
        "Suites: stable\n"
        "Components: main\n"
        "Enabled: no\n")})
    result = _run(str(DERIVE), "--root", str(root))
    assert result.returncode == 0, result.stderr
    assert _stanzas(result.stdout) == [{
        "Types": "deb-src", "URIs": "http://archive.example/debian http://other.example/debian",
        "Suites": "stable stable-updates", "Components": "main",
        "Signed-By": "\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBF\n"
                     " -----END PGP PUBLIC KEY BLOCK-----"}]


def test_sources_with_a_deb_src_twin_our_own_file_and_other_names_are_left_out(
        tmp_path: Path) -> None:
    root = _apt(tmp_path, {
        "sources.list.d/both.list": ("deb http://a.example/debian stable main\n"
                                     "deb-src http://a.example/debian/ stable main\n"),
        "sources.list.d/mixed.sources": ("Types: deb deb-src\nURIs: http://b.example/debian\n"
                                         "Suites: stable\nComponents: main\n"),
        "sources.list.d/vendor.list.disabled": "deb http://c.example/debian stable main\n",
        "sources.list.d/ours.sources": ("Types: deb-src\nURIs: http://d.example/debian\n"
                                        "Suites: stable\nComponents: main\n"),
        "sources.list.d/wanted.sources": ("Types: deb\nURIs: http://d.example/debian\n"
                                          "Suites: stable\nComponents: main\n"),
    })
    ours = root / "etc" / "apt" / "sources.list.d" / "ours.sources"
    result = _run(str(DERIVE), "--root", str(root), "--exclude", str(ours))
    assert result.returncode == 0, result.stderr
    assert [s["URIs"] for s in _stanzas(result.stdout)] == ["http://d.example/debian"]
    # Without the exclusion, our own earlier output counts as the twin: nothing is left.
    again = _run(str(DERIVE), "--root", str(root))
    assert again.returncode == 1 and again.stdout == ""
    assert "no binary apt source without a deb-src twin" in again.stderr


def test_no_apt_sources_at_all_fail_with_a_message(tmp_path: Path) -> None:
    result = _run(str(DERIVE), "--root", str(tmp_path))
    assert result.returncode == 1 and result.stdout == ""
    assert f"under {tmp_path / 'etc/apt'}" in result.stderr


@pytest.mark.parametrize(("name", "text", "where"), [
    ("sources.list", "deb\n", "sources.list:1: an entry needs a URI and a suite"),
    ("sources.list", "\n\ndeb http://a.example/debian\n", "sources.list:3: an entry needs"),
    ("sources.list", "rpm http://a.example/ stable main\n", "sources.list:1: not a sources.list"),
    ("sources.list.d/x.sources", " orphan\n", "x.sources:1: continuation line outside"),
    ("sources.list.d/x.sources", "Types: deb\nnonsense\n", "x.sources:2: not a deb822 field"),
    ("sources.list.d/x.sources", "Types: deb\n: value\n", "x.sources:2: not a deb822 field"),
])
def test_malformed_sources_are_refused_with_file_and_line(tmp_path: Path, name: str, text: str,
                                                          where: str) -> None:
    root = _apt(tmp_path, {name: text})
    result = _run(str(DERIVE), "--root", str(root))
    assert result.returncode == 1 and result.stdout == ""
    assert where in result.stderr


def test_install_script_names_no_package_archive_host() -> None:
    for path in (INSTALL, DERIVE, REPO / "docs" / "dev-cluster.md"):
        text = path.read_text()
        hosts = re.findall(r"\b(?:https?|ftp)://(?!127\.0\.0\.1|localhost)[^\s/`)]+", text)
        assert [h for h in hosts if "example" not in h and "k8s.io" not in h
                and "kwok.sigs" not in h] == [], path


@pytest.mark.parametrize("version", ["1.25.0", "1.29.12", "2.0.0", "1.37", "latest",
                                     "1.37.2; true"])
def test_install_refuses_releases_it_cannot_build(version: str, tmp_path: Path) -> None:
    result = _run(str(INSTALL), env={"KUBE_VERSION": version,
                                     "RECONCILER_CACHE": str(tmp_path)})
    assert result.returncode == 1
    assert f"KUBE_VERSION={version}: either 1.20.2" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_install_of_a_release_without_a_module_says_how_to_add_one(tmp_path: Path) -> None:
    result = _run(str(INSTALL), env={"KUBE_VERSION": "1.99.0",
                                     "RECONCILER_CACHE": str(tmp_path)})
    assert result.returncode == 1
    assert "write one with: scripts/install-kubernetes --new-module 1.99.0" in result.stderr
    assert "v1.37.2" in result.stderr  # the modules there are named
    assert list(tmp_path.iterdir()) == []


def test_each_module_pins_every_staging_module_to_its_release() -> None:
    modules = sorted(MODULES.glob("v1.*/go.mod"))
    assert modules, "no module under scripts/kube-modules"
    for go_mod in modules:
        release = go_mod.parent.name  # v1.MINOR.PATCH
        text = go_mod.read_text()
        assert re.search(rf"^require k8s\.io/kubernetes {re.escape(release)}\b", text, re.M)
        staging = re.findall(r"^\tk8s\.io/([a-z-]+) (v\S+)", text, re.M)
        pinned = {name: version for name, version in staging
                  if name not in ("klog", "kube-openapi", "utils", "system-validators")}
        assert {"api", "apimachinery", "apiserver", "client-go", "kubectl"} <= set(pinned)
        assert set(pinned.values()) == {"v0." + release.removeprefix("v1.")}, go_mod
        tools = re.findall(r"^\t(k8s\.io/kubernetes/cmd/\S+)", text, re.M)
        assert sorted(tools) == [f"k8s.io/kubernetes/cmd/{b}" for b in (
            "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")]
        assert (go_mod.parent / "go.sum").stat().st_size > 0
        etcd = (go_mod.parent / "etcd" / "go.mod").read_text()
        assert re.search(r"^tool go\.etcd\.io/etcd/server/v3$", etcd, re.M)
        assert re.search(r"^\tgo\.etcd\.io/etcd/server/v3 v3\.([5-9]|\d\d)\.", etcd, re.M)


def _progress_script(command: str) -> str:
    """The script's own progress functions, sourced from it, around ``command``."""
    text = INSTALL.read_text()
    functions = "".join(
        re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.S | re.M).group(0)  # type: ignore[union-attr]
        for name in ("with_progress", "wait_up_to"))
    return ("set -euo pipefail\nlog() { printf '[install-kubernetes] %s\\n' \"$*\" >&2; }\n"
            f"{functions}{command}\n")


def test_a_long_build_prints_a_progress_line_each_interval_and_keeps_its_exit_code() -> None:
    result = _run("bash", "-c", _progress_script(
        "work() { sleep 2.6; return 3; }\nwith_progress 600 work || echo \"exit $?\""),
        env={"PROGRESS_SECONDS": "1"})
    assert result.stdout == "exit 3\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert all(re.fullmatch(r"\[install-kubernetes\] still building: \d+ s of about 600 s", line)
               for line in lines), lines


def test_a_quick_build_prints_no_progress_line() -> None:
    result = _run("bash", "-c", _progress_script("with_progress 600 true && echo done"))
    assert (result.stdout, result.stderr) == ("done\n", "")


def test_install_takes_demo_or_nothing() -> None:
    result = _run(str(REPO / "scripts" / "install"), "--everything")
    assert result.returncode == 2 and "usage: scripts/install [--demo]" in result.stderr
