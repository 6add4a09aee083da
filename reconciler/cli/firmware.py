"""The firmware orchestrator alone, until SIGTERM or Ctrl-C (``reconciler firmware``).

    reconciler firmware --kubeconfig FILE [--config reconciler.yaml]
                      [--cluster-operator cluster-operator] [--log-level info]

Exit 0 on a clean stop, 2 on bad usage or a bad config file (the message says where).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import click

from reconciler.firmware.model import FirmwareSettings, SettingsError


def load_settings(path: str | None) -> FirmwareSettings:
    """The ``firmware`` section of a repository config file, validated; defaults without one."""
    if path is None:
        return FirmwareSettings()
    from reconciler.config.document import load
    from reconciler.config.settings import SettingsRefused, resolve
    from reconciler.files import FileRefused, printable, read_bounded

    try:
        data = read_bounded(path)
    except FileRefused as refused:
        raise SettingsError(printable(str(refused))) from None
    doc = load(data, path)
    if doc.errors:
        raise SettingsError("\n".join(
            printable(f"{f.file}:{f.line}:{f.column}: {f.message}") for f in doc.errors))
    try:
        return resolve(doc, None, source=path).firmware
    except SettingsRefused as exc:
        raise SettingsError(printable(str(exc))) from None


@click.command("firmware")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Kubeconfig of the orchestrator's identity (also given to reboot hooks as "
                   "$KUBECONFIG).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Repository config (reconciler.yaml) whose firmware section to use.")
@click.option("--cluster-operator", "cluster_operator", default="cluster-operator",
              show_default=True)
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def firmware(kubeconfig: str, config: str | None, cluster_operator: str, log_level: str) -> None:
    """Run the firmware upgrade orchestrator (docs/firmware.md)."""
    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(config)
    except SettingsError as exc:
        raise click.UsageError(f"bad firmware settings: {exc}") from exc
    from reconciler.firmware.controller import FirmwareController
    from reconciler.kube.api import KubeApi

    api = KubeApi.from_kubeconfig(kubeconfig)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    controller = FirmwareController(api, cluster_operator=cluster_operator, settings=settings,
                                    hook_env={"KUBECONFIG": kubeconfig})
    controller.start()
    print(f"firmware orchestrator running for {cluster_operator}", file=sys.stderr, flush=True)
    stop.wait()
    controller.stop()
    api.close()
