"""``reconciler dashboard``: a read-only live page of one cluster's rollout.

It watches the ClusterOperator, the GPU nodes, pods, the driver DaemonSet and the object's Events
(read-only), and with ``--repo`` reads the cluster's audit trail from Git. Exit status: 0 after
SIGINT/SIGTERM, 2 on a usage error (bad kubeconfig, bad listen address, a repository that is not
one) and when the port is taken (one line naming it and ``--listen``).
"""

from __future__ import annotations

import click


@click.command("dashboard")
@click.option("--cluster", required=True, metavar="NAME",
              help="The cluster: its folder in the policy repository (with --repo), else only "
                   "a label on the page.")
@click.option("--repo", envvar="RECONCILER_REPO", default=None, metavar="PATH|URL",
              help="Policy repository for the audit trail (default: no Git sections).")
@click.option("--branch", envvar="RECONCILER_BRANCH", default="main", show_default=True)
@click.option("--state-dir", envvar="RECONCILER_STATE_DIR", default=None,
              type=click.Path(file_okay=False), help="Where a remote repository is mirrored.")
@click.option("--kubeconfig", envvar="KUBECONFIG", required=True,
              type=click.Path(dir_okay=False), help="Kubeconfig of the cluster.")
@click.option("--listen", default="127.0.0.1:8090", show_default=True, metavar="HOST:PORT",
              help="Where to serve the page (loopback by default; port 0 picks one).")
@click.option("--cluster-operator", "cluster_operator", default="cluster-operator",
              show_default=True, help="Name of the ClusterOperator object.")
@click.option("--ready-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="readyTimeout of the rollout, seconds, for the model [rollout.readyTimeout "
                   "of the cluster in --repo's reconciler.yaml; 600].")
def dashboard(cluster: str, repo: str | None, branch: str, state_dir: str | None,
              kubeconfig: str, listen: str, cluster_operator: str,
              ready_timeout: float | None) -> None:
    """Serve a read-only live dashboard of the cluster's rollout."""
    from reconciler.cli.errors import OneLineUsageError
    from reconciler.dashboard.audit import GitAudit
    from reconciler.dashboard.server import DashboardApp, describe_listen, serve
    from reconciler.dashboard.source import ClusterSource
    from reconciler.kube.api import KubeApi
    from reconciler.ops.http_server import (
        ListenAddressError,
        listen_failure,
        parse_listen_address,
    )
    from reconciler.ops.shutdown import Shutdown

    try:
        host, port = parse_listen_address(listen)
    except ListenAddressError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        api = KubeApi.from_kubeconfig(kubeconfig, pool_size=8)
    except Exception as exc:  # the client raises several kinds for a bad file
        raise click.UsageError(f"cannot use kubeconfig {kubeconfig}: {exc}") from exc
    audit = None
    if repo:
        from reconciler.gitops.errors import GitOpsError, NotARepository

        try:
            audit = GitAudit(repo, cluster=cluster, branch=branch, state_dir=state_dir)
        except NotARepository as exc:
            raise click.UsageError(f"{repo} is not a Git repository") from exc
        except (GitOpsError, OSError, ValueError) as exc:
            raise click.UsageError(f"cannot read the repository {repo}: {exc}") from exc
    warning = describe_listen(host)
    if warning:
        click.echo(warning, err=True)
    app: DashboardApp
    source = ClusterSource(api, cluster=cluster, object_name=cluster_operator,
                           on_change=lambda: app.changed())
    app = DashboardApp(source.facts, object_name=cluster_operator, audit=audit,
                       ready_timeout=ready_timeout)
    shutdown = Shutdown()
    shutdown.install()
    source.start()
    app.start()
    try:
        server = serve(app, host, port)
    except OSError as exc:
        source.stop()
        app.stop()
        raise OneLineUsageError(listen_failure(exc, flag="--listen", address=listen)) from exc
    click.echo(f"dashboard of {cluster} (ClusterOperator {cluster_operator}) at {server.url}/",
               err=False)
    try:
        shutdown.wait()
    finally:
        server.stop()
        app.stop()
        source.stop()
        api.close()
