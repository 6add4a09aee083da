"""The real ``helm`` for the deploy tests and scripts/render-manifests: found on PATH or where
scripts/install-helm builds it, and the chart rendered into the kustomize manifests of deploy/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-gitops-reconciler"
MANIFEST_VALUES = ROOT / "deploy" / "helm" / "manifests-values.yaml"
#: the release and namespace the kustomize manifests are rendered as
RELEASE = NAMESPACE = "gpu-reconciler"
DEFAULT_CACHE = Path("/var/cache/gpu-reconciler")
_SOURCE = re.compile(rf"^---\n# Source: {CHART.name}/templates/(\S+)\n", re.M)


class HelmNotFound(RuntimeError):
    pass


def helm_binary() -> str:
    """A helm v4 on PATH, else the newest build under the cache folder."""
    found = shutil.which("helm")
    if found and subprocess.run([found, "version", "--template", "{{.Version}}"],
                                capture_output=True, text=True, check=False
                                ).stdout.startswith("v4."):
        return found
    cache = Path(os.environ.get("RECONCILER_CACHE", str(DEFAULT_CACHE)))
    built = sorted(cache.glob("helm-*/bin/helm"),
                   key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)])
    if not built:
        raise HelmNotFound(f"no helm v4 on PATH nor in {cache}/helm-*/bin: "
                           "run scripts/install-helm")
    return str(built[-1])


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, env=env,
                            timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def header(template: str) -> str:
    return (f"# GENERATED from the Helm chart deploy/helm/{CHART.name} (templates/{template})\n"
            "# by scripts/render-manifests; do not edit: change the chart and run it again.\n")


#: optional parts of the manifests: deploy/<folder>/ holds the files of the templates the chart
#: renders only with the value set (each folder applied on its own: `kubectl apply -k`)
OPTIONAL_PARTS = {"drain": ("drain.enabled", ("rbac-drain.yaml",))}


def render_manifests() -> dict[str, str]:
    """deploy/<file> for each template the chart renders with ``MANIFEST_VALUES``: its
    documents in helm's order, under a header that names its source."""
    return _split(helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                       "--values", str(MANIFEST_VALUES)).stdout)


def render_optional_parts() -> dict[str, str]:
    """deploy/<folder>/<file> of each optional part (``OPTIONAL_PARTS``): the templates that
    its value turns on, rendered as ``render_manifests`` renders the rest."""
    rendered: dict[str, str] = {}
    for folder, (value, templates) in OPTIONAL_PARTS.items():
        files = _split(helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                            "--values", str(MANIFEST_VALUES), "--set", f"{value}=true").stdout)
        rendered.update({f"{folder}/{name}": files[name] for name in templates})
    return rendered


def _split(output: str) -> dict[str, str]:
    parts = _SOURCE.split(output)
    documents: dict[str, list[str]] = {}
    for template, text in zip(parts[1::2], parts[2::2], strict=True):
        documents.setdefault(Path(template).name, []).append(text.rstrip("\n") + "\n")
    return {name: header(name) + "---\n".join(docs) for name, docs in documents.items()}
