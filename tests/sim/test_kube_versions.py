"""Which Kubernetes release the control plane runs (``KUBE_VERSION``) and the configuration each
generation gets; no binaries are started here (test_control_plane.py boots the real thing)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from reconciler.sim.control_plane import (
    CURRENT_SCHEDULER_PRE_FILTERS,
    KUBE_VERSION,
    LEGACY_KUBE_VERSION,
    SCHEDULER_FILTERS,
    SCHEDULER_PRE_FILTERS,
    Binaries,
    ControlPlaneError,
    kube_minor,
    kube_version,
    scheduler_configuration,
)


def _fake_binaries(directory: Path, names: tuple[str, ...]) -> None:
    directory.mkdir(parents=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)


SERVERS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def test_default_release_is_1_37_2_and_kube_version_selects_1_20_2(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBE_VERSION", raising=False)
    assert kube_version() == KUBE_VERSION == "1.37.2"
    monkeypatch.setenv("KUBE_VERSION", "1.20.2")
    assert kube_version() == LEGACY_KUBE_VERSION == "1.20.2"


@pytest.mark.parametrize("version", ["1.25.3", "1.29.9", "1.20.1", "2.0.0", "1.37", "v1.37.2",
                                     "1.37.2 ", "latest", ""])
def test_unsupported_releases_are_refused_by_name(version: str) -> None:
    with pytest.raises(ControlPlaneError, match=re.escape(f"KUBE_VERSION={version}:")):
        kube_minor(version)


@pytest.mark.parametrize(("version", "minor"), [("1.20.2", 20), ("1.30.0", 30),
                                                ("1.37.2", 37), ("1.40.11", 40)])
def test_supported_releases_give_their_minor(version: str, minor: int) -> None:
    assert kube_minor(version) == minor


def test_cache_is_keyed_by_the_default_release_and_its_etcd_is_used(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("KUBE_BIN_DIR", "ETCD_BIN", "KUBE_VERSION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("RECONCILER_CACHE", str(tmp_path))
    bin_dir = tmp_path / "kubernetes-1.37.2" / "bin"
    _fake_binaries(bin_dir, (*SERVERS, "etcd"))
    found = Binaries.locate()
    assert found.version == "1.37.2" and found.current
    assert found.apiserver == bin_dir / "kube-apiserver"
    assert found.etcd == bin_dir / "etcd"
    monkeypatch.setenv("ETCD_BIN", str(bin_dir / "kube-scheduler"))
    assert Binaries.locate().etcd == bin_dir / "kube-scheduler"  # ETCD_BIN still wins


def test_release_1_20_2_takes_etcd_from_path_as_before(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("KUBE_BIN_DIR", "ETCD_BIN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("RECONCILER_CACHE", str(tmp_path))
    monkeypatch.setenv("KUBE_VERSION", "1.20.2")
    _fake_binaries(tmp_path / "kubernetes-1.20.2" / "bin", SERVERS)
    path_dir = tmp_path / "path"
    _fake_binaries(path_dir, ("etcd",))
    monkeypatch.setenv("PATH", f"{path_dir}{os.pathsep}{os.environ['PATH']}")
    found = Binaries.locate()
    assert found.version == "1.20.2" and not found.current
    assert found.etcd == path_dir / "etcd"


def test_missing_binaries_of_a_selected_release_name_its_build(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBE_BIN_DIR", raising=False)
    monkeypatch.setenv("RECONCILER_CACHE", str(tmp_path))
    monkeypatch.setenv("KUBE_VERSION", "1.36.3")
    with pytest.raises(ControlPlaneError,
                       match=r"run KUBE_VERSION=1\.36\.3 scripts/install-kubernetes") as raised:
        Binaries.locate()
    assert str(tmp_path / "kubernetes-1.36.3" / "bin" / "kube-apiserver") in str(raised.value)


def test_scheduler_config_for_1_20_is_v1beta1_serving_plain_http() -> None:
    config = json.loads(scheduler_configuration(Path("/k"), "127.0.0.1:9"))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert config["healthzBindAddress"] == config["metricsBindAddress"] == "127.0.0.1:9"
    plugins = config["profiles"][0]["plugins"]
    assert [p["name"] for p in plugins["preFilter"]["enabled"]] == list(SCHEDULER_PRE_FILTERS)
    assert [p["name"] for p in plugins["filter"]["enabled"]] == list(SCHEDULER_FILTERS)


def test_scheduler_config_for_a_current_release_is_v1_without_bind_addresses() -> None:
    config = json.loads(scheduler_configuration(Path("/k"), "127.0.0.1:9", current=True))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert "healthzBindAddress" not in config and "metricsBindAddress" not in config
    assert config["clientConnection"] == {"kubeconfig": "/k", "qps": 1000, "burst": 2000}
    plugins = config["profiles"][0]["plugins"]
    pre_filters = [p["name"] for p in plugins["preFilter"]["enabled"]]
    assert pre_filters == list(CURRENT_SCHEDULER_PRE_FILTERS)
    # Every pre-filter of 1.20 still runs, and the node-narrowing ones come first.
    assert pre_filters[:2] == ["NodeAffinity", "NodeName"]
    assert set(SCHEDULER_PRE_FILTERS) <= set(pre_filters)
    assert plugins["filter"]["disabled"] == [{"name": "*"}]
    assert plugins["multiPoint"] == {"disabled": [{"name": "DynamicResources"}]}
