"""``reconciler run``: the daemon."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

import click

from reconciler.cli.durations import parse_duration_seconds

if TYPE_CHECKING:
    from reconciler.kube.api import KubeApi


@click.command("run")
@click.option("--role", type=click.Choice(["all", "sync", "controller"]), default="all",
              show_default=True, help="Which role(s) this process plays (SPEC section 1).")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Kubeconfig file (default: in-cluster config, then ~/.kube/config).")
@click.option("--cluster-operator", "cluster_operator", default="cluster-operator",
              show_default=True, help="Name of the ClusterOperator object.")
@click.option("--ready-timeout", default="10m", show_default=True,
              help="How long a new driver pod may take to become Ready before it counts as failed.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def run(role: str, kubeconfig: str | None, cluster_operator: str, ready_timeout: str,
        log_level: str) -> None:
    """Run the reconciler until SIGTERM or Ctrl-C."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if role != "controller":
        raise click.UsageError(
            f"--role {role} needs the Git sync role, which this build does not include yet; "
            "use --role controller"
        )
    try:
        timeout = parse_duration_seconds(ready_timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ready-timeout") from exc

    from reconciler.controller.act import Target
    from reconciler.controller.loop import RolloutController
    from reconciler.kube.api import KubeApi
    from reconciler.rollout.model import PlannerSettings

    api = KubeApi.from_kubeconfig(kubeconfig) if kubeconfig else _default_api()
    controller = RolloutController(
        api,
        Target(cluster_operator=cluster_operator),
        settings=PlannerSettings(ready_timeout=timeout),
    )
    stop = threading.Event()

    def _handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    controller.start()
    log = logging.getLogger("reconciler")
    log.info("rollout controller started for ClusterOperator %s at %s", cluster_operator, api.host)
    if not controller.wait_synced(60):
        log.warning("caches not synced after 60 s; continuing to wait")
    stop.wait()
    log.info("shutting down")
    controller.stop()
    sys.exit(0)


def _default_api() -> KubeApi:
    """In-cluster config when running in a pod, else $KUBECONFIG or ~/.kube/config."""
    import os

    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    from reconciler.kube.api import KubeApi

    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        path = os.environ.get("KUBECONFIG", os.path.expanduser("~/.kube/config"))
        return KubeApi.from_kubeconfig(path)
    return KubeApi(k8s_client.ApiClient())
