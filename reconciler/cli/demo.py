"""``reconciler demo``: the whole story on this machine in about two minutes."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from reconciler.cli.numbers import BoundedInt, FiniteFloat


@click.command("demo")
@click.option("--nodes", type=BoundedInt(4, 200), default=10, show_default=True,
              help="Simulated GPU nodes (the vendor manual's scenario has 10).")
@click.option("--install-seconds", type=FiniteFloat(0), default=3.0, show_default=True,
              help="Simulated driver install time per node (a real install takes minutes).")
@click.option("--review-seconds", type=FiniteFloat(0), default=3.0, show_default=True,
              help="How long the person at the gate looks at the canary nodes.")
@click.option("--timeout", type=FiniteFloat(10), default=600, show_default=True,
              help="Give up (and clean up) after this many seconds.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the demo's repositories, control plane and logs go "
                   "(default: a temporary directory, removed at the end).")
@click.option("--keep", is_flag=True, help="Keep the work directory (repositories, logs).")
@click.option("--live/--plain", default=None,
              help="Live screen, or one line per change (default: live on a terminal).")
@click.option("--examples", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, help="The example policy repository (default: examples-repo/).")
@click.option("--dashboard", "dashboard", is_flag=False, flag_value="127.0.0.1:8090",
              default=None, metavar="[HOST:PORT]",
              help="Serve `reconciler dashboard` of the demo's cluster during the demo "
                   "(default address 127.0.0.1:8090; port 0 picks one).")
def demo(nodes: int, install_seconds: float, review_seconds: float, timeout: float,
         workdir: Path | None, keep: bool, live: bool | None, examples: Path | None,
         dashboard: str | None) -> None:
    """Merge-to-upgrade, end to end, on a local control plane with simulated GPU nodes.

    Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, a
    simulated fleet of GPU nodes on driver 2.32.0.6, and a policy repository made from
    examples-repo/ with a bare remote; runs `reconciler run` against them; merges the driver
    bump to 2.33.0.9 of the 10-node scenario; shows the rollout live; releases the manual gate
    with a person's commit; and prints the git log audit trail and the final status.
    Ctrl-C stops everything it started.
    """
    from reconciler.demo.runner import Demo, DemoOptions

    options = DemoOptions(nodes=nodes, install_seconds=install_seconds,
                          review_seconds=review_seconds, timeout=timeout, workdir=workdir,
                          keep=keep, live=live, examples=examples, dashboard=dashboard)
    sys.exit(Demo(options).run())
