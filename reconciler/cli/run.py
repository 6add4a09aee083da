"""``reconciler run``: the daemon (sync role, rollout controller, or both).

Every setting comes from, highest first: the command-line flag, its environment variable
(``RECONCILER_*``, listed in ``--help`` and docs/configuration.md), the policy repository's
``reconciler.yaml`` (for the keys it has), the default.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.durations import parse_duration_seconds

if TYPE_CHECKING:
    from reconciler.kube.api import KubeApi
    from reconciler.ops.metrics import Metrics
    from reconciler.settings.live import LiveSettings
    from reconciler.trust.signatures import CommitVerifier

log = logging.getLogger("reconciler.run")

ENV = "RECONCILER_"


def _duration(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration_seconds(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from exc


@click.command("run")
@click.option("--repo", envvar=f"{ENV}REPO", default=None, metavar="PATH|URL",
              help="Policy repository: a local working copy (watched) or a URL (fetched). "
                   "Needed by --role all and sync.")
@click.option("--cluster", envvar=f"{ENV}CLUSTER", default=None, metavar="NAME",
              help="This cluster's folder under clusters/ in the repository; with --role "
                   "controller, the clusters.<name> sections of --repo-config to use.")
@click.option("--branch", envvar=f"{ENV}BRANCH", default="main", show_default=True,
              help="Branch the policy is read from.")
@click.option("--kubeconfig", envvar="KUBECONFIG", type=click.Path(dir_okay=False),
              default=None, help="Kubeconfig file (default: in-cluster config, then "
                                  "~/.kube/config).")
@click.option("--role", envvar=f"{ENV}ROLE", type=click.Choice(["all", "sync", "controller"]),
              default="all", show_default=True,
              help="all: sync and rollout controller in one process; sync: Git <-> cluster "
                   "only; controller: the rollout controller only (no Git).")
@click.option("--mode", envvar=f"{ENV}MODE", type=click.Choice(["builtin", "operator"]),
              default="builtin", show_default=True,
              help="operator: the vendor operator runs the rollout; no builtin controller, the "
                   "sync applies and mirrors the vendor's status.")
@click.option("--cluster-operator", "cluster_operator", envvar=f"{ENV}CLUSTER_OPERATOR",
              default="cluster-operator", show_default=True,
              help="Name of the ClusterOperator object.")
@click.option("--state-dir", envvar=f"{ENV}STATE_DIR", type=click.Path(file_okay=False),
              default=None, help="Mirror, queue of unpushed commits, keyrings "
                                 "(default $XDG_STATE_HOME/gpu-gitops-reconciler).")
@click.option("--fetch-interval", envvar=f"{ENV}FETCH_INTERVAL", default=None,
              help="How often a remote is fetched [reconciler.yaml sync.fetchInterval; 30s].")
@click.option("--status-min-interval", envvar=f"{ENV}STATUS_MIN_INTERVAL", default=None,
              help="Status commits are coalesced to this interval "
                   "[reconciler.yaml sync.statusMinInterval; 5s].")
@click.option("--ready-timeout", envvar=f"{ENV}READY_TIMEOUT", default=None,
              help="How long a new driver pod may take to become Ready before it counts as "
                   "failed [reconciler.yaml rollout.readyTimeout; 10m].")
@click.option("--cordon-ahead/--no-cordon-ahead", "cordon_ahead", envvar=f"{ENV}CORDON_AHEAD",
              default=True, show_default=True,
              help="Cordon the nodes next in line (at most a wave; into the next step only "
                   "when it follows without a pause or gate) while the nodes before them "
                   "upgrade, so a freed slot is refilled by the pod deletion alone.")
@click.option("--repo-config", envvar=f"{ENV}REPO_CONFIG", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="With --role controller (no repository): a reconciler.yaml whose rollout, "
                   "health, windows and firmware sections to use (per --cluster when it has its "
                   "own); read again whenever it changes.")
@click.option("--controller-field-manager", envvar=f"{ENV}CONTROLLER_FIELD_MANAGER",
              default="gpu-rollout-controller", show_default=True,
              help="Field manager whose spec changes are the rollout's own (written back to "
                   "Git, SPEC 4.6); in operator mode, the vendor operator's.")
@click.option("--webhook-listen", envvar=f"{ENV}WEBHOOK_LISTEN", default=None,
              metavar="HOST:PORT", help="Serve the push webhook here (off when not set).")
@click.option("--webhook-secret-file", envvar=f"{ENV}WEBHOOK_SECRET_FILE", default=None,
              type=click.Path(dir_okay=False),
              help="The push webhook's secret: each forge's HMAC key or token "
                   "(else $RECONCILER_WEBHOOK_SECRET).")
@click.option("--webhook-repository", envvar=f"{ENV}WEBHOOK_REPOSITORY", default=None,
              help="Repository the webhook must name: URL or owner/name (default: --repo).")
@click.option("--forge", envvar=f"{ENV}FORGE", type=click.Choice(["github", "gitlab", "gitea"]),
              default=None, help="Post commit statuses to this forge (also forge.type in "
                                 "reconciler.yaml; off when neither).")
@click.option("--forge-url", envvar=f"{ENV}FORGE_URL", default=None, metavar="URL",
              help="The forge's API base URL, e.g. https://api.github.com, "
                   "https://gitlab.example.com/api/v4, https://gitea.example.com/api/v1.")
@click.option("--forge-token-file", envvar=f"{ENV}FORGE_TOKEN_FILE", default=None,
              type=click.Path(dir_okay=False),
              help="The forge API token, read again at each post.")
@click.option("--forge-repository", envvar=f"{ENV}FORGE_REPOSITORY", default=None,
              metavar="OWNER/NAME", help="The repository on the forge (default: from --repo).")
@click.option("--dashboard-url", envvar=f"{ENV}DASHBOARD_URL", default=None, metavar="URL",
              help="The target URL of commit statuses (the dashboard).")
@click.option("--signature-mode", envvar=f"{ENV}SIGNATURE_MODE",
              type=click.Choice(["none", "gpg", "ssh", "any"]), default=None,
              help="Verify the head commit's signature; the repository's signatures.mode may "
                   "only tighten it [none].")
@click.option("--trusted-gpg-key", "trusted_gpg_keys", envvar=f"{ENV}TRUSTED_GPG_KEYS",
              multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Trusted OpenPGP public key file (repeatable).")
@click.option("--allowed-signers", envvar=f"{ENV}ALLOWED_SIGNERS", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="Trusted SSH keys (ssh-keygen allowed signers file).")
@click.option("--signing-gpg-key", envvar=f"{ENV}SIGNING_GPG_KEY", default=None,
              help="Sign the reconciler's own commits with this OpenPGP key id.")
@click.option("--signing-gnupg-home", envvar=f"{ENV}SIGNING_GNUPG_HOME", default=None,
              type=click.Path(file_okay=False), help="GNUPGHOME holding the signing key.")
@click.option("--signing-ssh-key", envvar=f"{ENV}SIGNING_SSH_KEY", default=None,
              type=click.Path(dir_okay=False),
              help="Sign the reconciler's own commits with this SSH private key file.")
@click.option("--git-ssh-key", envvar=f"{ENV}GIT_SSH_KEY", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="SSH private key (a deploy key) for an ssh:// or user@host: --repo; only "
                   "this key is offered.")
@click.option("--git-known-hosts", envvar=f"{ENV}GIT_KNOWN_HOSTS", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="known_hosts file with the Git host's key; an unknown or changed host key "
                   "is always refused.")
@click.option("--git-username", envvar=f"{ENV}GIT_USERNAME", default=None,
              help="HTTPS user name [the URL's, else git].")
@click.option("--git-password-file", envvar=f"{ENV}GIT_PASSWORD_FILE", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="File holding the HTTPS password or token (read at each fetch and push).")
@click.option("--admission-listen", envvar=f"{ENV}ADMISSION_LISTEN", default=None,
              metavar="HOST:PORT",
              help="Serve the validating admission webhook (POST /validate-clusteroperator, "
                   "HTTPS) here; off when not set, in builtin and operator mode alike.")
@click.option("--admission-cert-dir", envvar=f"{ENV}ADMISSION_CERT_DIR", default=None,
              type=click.Path(file_okay=False),
              help="Directory with the webhook's tls.crt and tls.key (e.g. a cert-manager "
                   "Secret); a changed pair is served from the next connection on.")
@click.option("--admission-self-signed", is_flag=True, envvar=f"{ENV}ADMISSION_SELF_SIGNED",
              default=False,
              help="Instead of --admission-cert-dir: the leader issues and rotates the CA and "
                   "serving certificate, kept in the Secret --admission-secret (namespace "
                   "--leader-elect-namespace), and keeps caBundle of --admission-webhook-config "
                   "current; every replica serves from the Secret.")
@click.option("--admission-secret", envvar=f"{ENV}ADMISSION_SECRET",
              default="gpu-reconciler-admission-tls", show_default=True,
              help="With --admission-self-signed: the Secret holding the CA and certificate.")
@click.option("--admission-webhook-config", envvar=f"{ENV}ADMISSION_WEBHOOK_CONFIG",
              default="gpu-reconciler-admission", show_default=True,
              help="With --admission-self-signed: the ValidatingWebhookConfiguration whose "
                   "caBundle the leader keeps current.")
@click.option("--admission-host", "admission_hosts", envvar=f"{ENV}ADMISSION_HOSTS",
              multiple=True, metavar="NAME|IP",
              help="With --admission-self-signed: a name the serving certificate carries "
                   "(repeatable) [gpu-reconciler.NAMESPACE.svc].")
@click.option("--admission-cert-interval", envvar=f"{ENV}ADMISSION_CERT_INTERVAL", default="30s",
              show_default=True,
              help="With --admission-self-signed: how often the Secret is checked (the leader "
                   "renews, every replica picks up a new pair).")
@click.option("--ops-listen", envvar=f"{ENV}OPS_LISTEN", default=":8080", show_default=True,
              metavar="HOST:PORT|off", help="/healthz, /readyz and /metrics.")
@click.option("--leader-elect/--no-leader-elect", envvar=f"{ENV}LEADER_ELECT", default=False,
              show_default=True, help="Run several replicas; only the Lease holder acts.")
@click.option("--leader-elect-namespace", envvar="POD_NAMESPACE", default="metax-operator",
              show_default=True, help="Namespace of the Lease.")
@click.option("--leader-elect-lease", envvar=f"{ENV}LEASE_NAME", default="gpu-reconciler",
              show_default=True, help="Name of the Lease.")
@click.option("--lease-duration", envvar=f"{ENV}LEASE_DURATION", default="15s",
              show_default=True)
@click.option("--renew-deadline", envvar=f"{ENV}RENEW_DEADLINE", default="10s",
              show_default=True)
@click.option("--retry-period", envvar=f"{ENV}RETRY_PERIOD", default="2s", show_default=True)
@click.option("--log-format", envvar=f"{ENV}LOG_FORMAT", type=click.Choice(["text", "json"]),
              default="text", show_default=True)
@click.option("--log-level", envvar=f"{ENV}LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def run(**options: Any) -> None:
    """Run the reconciler until SIGTERM or Ctrl-C.

    \b
    reconciler run --repo https://git.example.com/fleet/policy.git --cluster prod-a
    reconciler run --repo ~/policy --cluster dev --kubeconfig dev.kubeconfig
    reconciler run --role controller            # the rollout controller alone, no Git
    reconciler run --role sync --mode operator  # the vendor operator runs the rollout
    """
    from reconciler.ops.logs import configure_logging

    configure_logging(json_logs=options["log_format"] == "json", level=options["log_level"])
    settings = _Settings.from_options(options)
    sys.exit(_serve(settings))


@dataclass
class _Settings:
    options: dict[str, Any]
    role: str
    mode: str
    fetch_interval: float | None
    status_min_interval: float | None
    ready_timeout: float | None
    lease: tuple[float, float, float]

    @property
    def runs_sync(self) -> bool:
        return self.role in ("all", "sync")

    @property
    def runs_controller(self) -> bool:
        return self.role == "controller" or (self.role == "all" and self.mode == "builtin")

    @classmethod
    def from_options(cls, o: dict[str, Any]) -> _Settings:
        role, mode = o["role"], o["mode"]
        if role == "controller" and mode == "operator":
            raise click.UsageError("--role controller --mode operator: in operator mode the "
                                   "vendor operator is the controller; run --role sync")
        if role in ("all", "sync"):
            missing = [f"--{k}" for k in ("repo", "cluster") if not o[k]]
            if missing:
                raise click.UsageError(
                    f"--role {role} needs {' and '.join(missing)} (or run --role controller "
                    "for the rollout controller alone)")
        ready = _duration(o["ready_timeout"], "--ready-timeout")
        if o["repo_config"]:
            o["repo_config_data"], o["repo_config_text"] = _read_repo_config(o["repo_config"])
        if o["forge_url"]:  # refused before anything starts (SPEC 15)
            from reconciler.policy.forge_config import ForgeConfigError, check_api_url

            try:
                check_api_url(o["forge_url"], key="--forge-url")
            except ForgeConfigError as exc:
                raise click.UsageError(str(exc)) from None
        lease = tuple(_duration(o[k], f"--{k.replace('_', '-')}") or 0.0
                      for k in ("lease_duration", "renew_deadline", "retry_period"))
        return cls(
            options=o, role=role, mode=mode,
            fetch_interval=_duration(o["fetch_interval"], "--fetch-interval"),
            status_min_interval=_duration(o["status_min_interval"], "--status-min-interval"),
            ready_timeout=ready,
            lease=(lease[0], lease[1], lease[2]),
        )


def _serve(s: _Settings) -> int:
    from reconciler.ops.health import HealthChecks, OpsServer
    from reconciler.ops.http_server import ListenAddressError, parse_listen_address
    from reconciler.ops.metrics import Metrics
    from reconciler.ops.shutdown import Shutdown

    o = s.options
    api = _api(o["kubeconfig"])
    shutdown = Shutdown()
    shutdown.install()
    # `kill -USR1 PID` writes every thread's stack to stderr: what a daemon that seems stuck is
    # doing, without stopping it
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    metrics = Metrics()
    checks = HealthChecks()
    # with an election, nothing acts until this replica holds the Lease
    leader = _Leadership(acting=not o["leader_elect"])

    ops_address = None
    if o["ops_listen"] and o["ops_listen"] != "off":
        try:
            ops_address = parse_listen_address(o["ops_listen"])
        except ListenAddressError as exc:
            raise click.BadParameter(str(exc), param_hint="--ops-listen") from exc
    if ops_address is not None:
        ops = OpsServer(*ops_address, checks=checks, metrics=metrics)
        try:
            ops.start()
        except OSError as exc:
            raise click.ClickException(f"--ops-listen {o['ops_listen']}: {exc}") from exc
        shutdown.on_shutdown("ops server", ops.stop)
        log.info("ops endpoints on %s (/healthz /readyz /metrics)", ops.url)

    if o["admission_listen"]:
        _start_admission(o, api, leader, shutdown)

    controller: Any = None
    firmware = None

    def node_counts() -> dict[str, int]:
        last = controller.last_plan if controller is not None else None
        if last is None:
            return {}
        return {"in_flight": last.in_flight, "unavailable": last.unavailable}

    live = _live_settings(s, shutdown)
    sync = (_start_sync(s, api, metrics, leader, shutdown,
                        node_counts if s.runs_controller else None, live)
            if s.runs_sync else None)
    if s.runs_controller:
        from reconciler.controller.act import Target
        from reconciler.controller.health import HealthFeeder
        from reconciler.controller.loop import RolloutController, prefer_responsiveness
        from reconciler.rollout.model import PlannerSettings

        prefer_responsiveness()
        controller = RolloutController(
            api, Target(cluster_operator=o["cluster_operator"]),
            settings=PlannerSettings(cordon_ahead=bool(o["cordon_ahead"])),
            is_leader=leader.is_leader,
            health=HealthFeeder(lambda: live.current().health,
                                on_result=metrics.count_health_check),
            config=live.current,
            on_eviction=metrics.count_drain_eviction,
        )
        live.subscribe(controller.kick)  # a new setting takes effect at once
        controller.start()
        shutdown.on_shutdown("rollout controller", controller.stop)
        log.info("rollout controller started for ClusterOperator %s at %s",
                 o["cluster_operator"], api.host)
        from reconciler.firmware.controller import FirmwareController

        firmware = FirmwareController(api, cluster_operator=o["cluster_operator"],
                                      settings=lambda: live.current().firmware,
                                      is_leader=leader.is_leader,
                                      hook_env=({"KUBECONFIG": os.path.abspath(o["kubeconfig"])}
                                                if o["kubeconfig"] else None))
        live.subscribe(firmware.kick)
        firmware.start()
        shutdown.on_shutdown("firmware orchestrator", firmware.stop)

    def caches_synced() -> bool:
        return ((sync is None or sync.synced())
                and (controller is None or controller.synced())
                and (firmware is None or firmware.synced()))

    checks.add_readiness("caches", caches_synced)
    if sync is not None:
        checks.add_liveness("sync", lambda: sync.alive)
    if o["webhook_listen"] and sync is not None:
        _start_webhook(s, sync, metrics, shutdown)

    if o["leader_elect"]:
        from reconciler.ops.leader import (
            ElectionConfig,
            KubernetesLeaseClient,
            LeaderElector,
            default_identity,
        )

        def started() -> None:
            log.info("became the leader: acting")
            if sync is not None:
                sync.resync()
            if controller is not None:
                controller.kick()

        def stopped() -> None:
            log.info("lost the leadership: not acting")
            if sync is not None:
                sync.stop_acting()

        duration, deadline, retry = s.lease
        try:
            config = ElectionConfig(o["leader_elect_namespace"], o["leader_elect_lease"],
                                    default_identity(), duration, deadline, retry)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        elector = LeaderElector(KubernetesLeaseClient(api.typed()), config,
                                on_started_leading=started, on_stopped_leading=stopped,
                                metrics=metrics)
        leader.check = lambda: elector.is_leader
        elector.start()
        shutdown.on_shutdown("leader election", elector.stop)
        log.info("leader election on Lease %s/%s as %s", config.namespace, config.name,
                 config.identity)

    shutdown.wait()
    checks.shutting_down()
    leader.revoke()
    failed = shutdown.run_steps()
    log.info("stopped%s", f" (failed steps: {', '.join(failed)})" if failed else "")
    return 0


def _live_settings(s: _Settings, shutdown: Any) -> LiveSettings:
    """The one live view of reconciler.yaml for this cluster that every loop reads at each
    pass: published by the sync role at each commit it applies; without one, --repo-config,
    read again whenever it changes (none: the defaults). --ready-timeout pins its setting."""
    from dataclasses import replace

    from reconciler.settings.cluster import ClusterSettings
    from reconciler.settings.live import LiveSettings, RepoConfigWatch

    o = s.options
    pin = None
    flag = s.ready_timeout
    if flag is not None:
        def pin(settings: ClusterSettings) -> ClusterSettings:
            return replace(settings, rollout=replace(settings.rollout, ready_timeout=flag))

    live = LiveSettings(o.get("cluster") or None, pin=pin)
    if o["repo_config"] and not s.runs_sync:
        watch = RepoConfigWatch(o["repo_config"], live).start()
        shutdown.on_shutdown("--repo-config watch", watch.stop)
    return live


def _settings_at_head(o: dict[str, Any], sync: Any, live: LiveSettings) -> None:
    """Before the sync's first pass: reconciler.yaml at the branch head (or --repo-config);
    the sync replaces it with the commit the cluster runs, then with each commit applied."""
    from reconciler.gitops.reader import PolicyFileRefused
    from reconciler.policy.repo_config import RepoConfigFile

    if o["repo_config"]:
        live.offer(RepoConfigFile.parse(o["repo_config_text"]), source=o["repo_config"],
                   path=o["repo_config"])
        return
    head = sync.repo.mirror.head(o["branch"])
    if head is None:
        return
    try:
        live.offer(sync.repo.reader.config_file(head), source=head)
    except PolicyFileRefused as exc:
        log.warning("reconciler.yaml unusable (%s); using defaults", exc)


def _read_repo_config(path: str) -> tuple[dict[str, Any], bytes]:
    """--repo-config, read at start: a link, a FIFO, an oversized or unparsable file is a usage
    error naming it (bounded like a policy file, never followed)."""
    from reconciler.files import FileRefused, YamlRefused, parse_yaml, printable, read_bounded

    try:
        text = read_bounded(path)
        data = parse_yaml(text, path)
    except (FileRefused, YamlRefused) as exc:
        raise click.BadParameter(printable(str(exc)), param_hint="--repo-config") from None
    return (data if isinstance(data, dict) else {}), text


def _warn_ignored_settings(api: KubeApi, cluster_operator: str, live: LiveSettings,
                           is_leader: Callable[[], bool]) -> None:
    """Operator mode: drain, waitFor, unavailableNodes and topology are ignored (SPEC 13, 14),
    said in the log and, by the leader, in a Warning Event, whenever a commit sets them."""
    from reconciler.sync.events import record_event
    from reconciler.sync.operator_settings import REASON, IgnoredSettingsWarning

    def record(message: str) -> bool:
        if not is_leader():
            return False
        record_event(api, cluster_operator, None, reason=REASON, message=message, warning=True)
        return True

    warning = IgnoredSettingsWarning(
        lambda: (live.current().rollout, live.current().source), record)
    live.subscribe(warning)
    warning()  # the settings at the branch head, published before


def _start_vendor_health(s: _Settings, api: KubeApi, sync: Any, metrics: Metrics,
                         is_leader: Callable[[], bool], shutdown: Any) -> None:
    """Operator mode: the sync role checks the nodes the vendor upgraded (SPEC 9), with the
    ``health`` section in force (the live view: the commit applied last). Started with no
    section too: a later commit may add one. One that does not validate commits
    ``pause: true``."""
    from functools import partial

    from reconciler.sync.health_watch import VendorHealthWatch, stop_vendor

    o = s.options
    watch = VendorHealthWatch(api, cluster_operator=o["cluster_operator"],
                              section=lambda: sync.settings.current().health,
                              on_failure=sync.write_backs.pause_for_health,
                              on_invalid=partial(sync.write_backs.pause_for_health,
                                                 cause="health section invalid"),
                              stop_vendor=partial(stop_vendor, api, o["cluster_operator"],
                                                  sync.drift),
                              on_result=metrics.count_health_check,
                              is_leader=is_leader).start()
    shutdown.on_shutdown("operator-mode health checks", watch.stop)
    log.info("operator mode: health checks run on the nodes the vendor upgrades "
             "(the health section of each commit)")


def _start_window_pauses(s: _Settings, sync: Any, is_leader: Callable[[], bool],
                         shutdown: Any) -> None:
    """Operator mode: ``pause: true`` / ``pause: false`` at maintenance-window edges (SPEC 10)."""
    from reconciler.sync.window_watch import WindowPauseWatch

    watch = WindowPauseWatch(sync.repo, cluster=s.options["cluster"], branch=s.options["branch"],
                             windows=lambda: sync.settings.current().windows,
                             is_leader=is_leader).start()
    sync.shell.holds = watch.holds  # the status snapshot says when the next window opens
    shutdown.on_shutdown("operator-mode maintenance windows", watch.stop)


class _Leadership:
    """``is_leader`` for the roles: always true without election; false for good once shutdown
    began."""

    def __init__(self, *, acting: bool) -> None:
        self.check: Callable[[], bool] = lambda: acting
        self._revoked = False

    def is_leader(self) -> bool:
        return not self._revoked and self.check()

    def revoke(self) -> None:
        self._revoked = True


def _start_sync(s: _Settings, api: KubeApi, metrics: Metrics, leader: _Leadership,
                shutdown: Any, node_counts: Callable[[], dict[str, int]] | None,
                live: LiveSettings) -> Any:
    from reconciler.gitops.credentials import GitCredentials, redact
    from reconciler.gitops.errors import GitOpsError
    from reconciler.sync.loop import ClusterSync

    o = s.options
    state_dir = Path(o["state_dir"]).expanduser() if o["state_dir"] else None
    verifier = _verifier(s, state_dir, metrics)
    signing = _signing(o)
    credentials = GitCredentials(
        ssh_key=Path(o["git_ssh_key"]) if o["git_ssh_key"] else None,
        known_hosts=Path(o["git_known_hosts"]) if o["git_known_hosts"] else None,
        username=o["git_username"],
        password_file=Path(o["git_password_file"]) if o["git_password_file"] else None,
    )
    try:
        sync = ClusterSync(
            api, o["repo"], cluster=o["cluster"], branch=o["branch"], state_dir=state_dir,
            git_credentials=credentials,
            cluster_operator=o["cluster_operator"], fetch_interval=s.fetch_interval,
            status_min_interval=s.status_min_interval, verifier=verifier,
            signature_mode=o["signature_mode"], signing=signing, metrics=metrics,
            is_leader=leader.is_leader, controller_field_manager=o["controller_field_manager"],
            node_counts=node_counts, settings=live,
        )
    except GitOpsError as exc:
        raise click.ClickException(str(exc)) from exc
    _settings_at_head(o, sync, live)
    _start_forge_statuses(o, sync, metrics, leader.is_leader, shutdown)
    sync.start()
    shutdown.on_shutdown("sync (flush Git)", sync.stop)
    if s.mode == "operator":
        _start_vendor_health(s, api, sync, metrics, leader.is_leader, shutdown)
        _start_window_pauses(s, sync, leader.is_leader, shutdown)
        _warn_ignored_settings(api, o["cluster_operator"], live, leader.is_leader)
    log.info("syncing %s (branch %s, cluster %s) to ClusterOperator %s; mode %s",
             redact(o["repo"]),
             o["branch"], o["cluster"], o["cluster_operator"], s.mode)
    return sync


def _start_forge_statuses(o: dict[str, Any], sync: Any, metrics: Metrics,
                          is_leader: Callable[[], bool], shutdown: Any) -> None:
    """Commit statuses to the forge (SPEC 15): the flags, else reconciler.yaml's ``forge:``
    (--repo-config's, else the branch head's); off when neither names one."""
    from reconciler.gitops.forge_status import CommitStatuses
    from reconciler.policy.forge_config import ForgeConfigError, forge_config
    from reconciler.sync.forge_report import ForgeReport

    section: Any = None
    if o["repo_config"]:
        section = o["repo_config_data"].get("forge")
    elif (head := sync.repo.mirror.head(o["branch"])) is not None:
        section = sync.repo.reader.config_file(head).raw.get("forge")
    try:
        forge = forge_config(kind=o["forge"], url=o["forge_url"],
                             repository=o["forge_repository"], remote=o["repo"],
                             file_section=section if isinstance(section, dict) else None)
    except ForgeConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if forge is None:
        return
    if not o["forge_token_file"]:
        raise click.UsageError(f"commit statuses to {forge.kind} need --forge-token-file")
    poster = CommitStatuses(forge, Path(o["forge_token_file"]), is_leader=is_leader,
                            metrics=metrics).start()
    report = ForgeReport(sync.repo, poster, cluster=o["cluster"], record=sync.record,
                         wall=sync.clock, target_url=o["dashboard_url"])
    sync.shell.on_snapshot = report.snapshot
    shutdown.on_shutdown("forge commit statuses", poster.stop)
    log.info("commit statuses to %s %s (%s)", forge.kind, forge.repository, forge.url)


def _verifier(s: _Settings, state_dir: Path | None, metrics: Metrics) -> CommitVerifier | None:
    o = s.options
    if not o["trusted_gpg_keys"] and not o["allowed_signers"]:
        if o["signature_mode"] not in (None, "none"):
            raise click.UsageError(f"--signature-mode {o['signature_mode']} needs "
                                   "--trusted-gpg-key and/or --allowed-signers")
        return None
    from reconciler.gitops.mirror import default_state_dir
    from reconciler.trust.signatures import (
        CommitVerifier,
        Method,
        SignatureConfigError,
        TrustedKeys,
    )

    methods = set()
    if o["trusted_gpg_keys"]:
        methods.add(Method.OPENPGP)
    if o["allowed_signers"]:
        methods.add(Method.SSH)
    try:
        trusted = TrustedKeys(
            openpgp_key_files=tuple(Path(p) for p in o["trusted_gpg_keys"]),
            allowed_signers_file=Path(o["allowed_signers"]) if o["allowed_signers"] else None,
            methods=frozenset(methods),
        )
        return CommitVerifier(trusted, state_dir or default_state_dir(), metrics=metrics)
    except SignatureConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def _signing(o: dict[str, Any]) -> tuple[list[str], list[str], dict[str, str]] | None:
    if not o["signing_gpg_key"] and not o["signing_ssh_key"]:
        return None
    from reconciler.trust.signatures import SignatureConfigError, signing_config

    try:
        config = signing_config(
            openpgp_key=o["signing_gpg_key"],
            gnupg_home=Path(o["signing_gnupg_home"]) if o["signing_gnupg_home"] else None,
            ssh_key_file=Path(o["signing_ssh_key"]) if o["signing_ssh_key"] else None,
        )
    except SignatureConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    return config.git_args(), config.commit_tree_args(), dict(config.env)


def _start_webhook(s: _Settings, sync: Any, metrics: Metrics, shutdown: Any) -> None:
    from reconciler.ops.http_server import ListenAddressError, parse_listen_address
    from reconciler.trust.webhook import (
        WatchedBranch,
        WebhookConfigError,
        WebhookReceiver,
        WebhookServer,
        load_secret,
    )

    o = s.options
    try:
        host, port = parse_listen_address(o["webhook_listen"])
        secret = load_secret(o["webhook_secret_file"])
    except (ListenAddressError, WebhookConfigError) as exc:
        raise click.UsageError(str(exc)) from exc
    receiver = WebhookReceiver(
        secret=secret,
        watched=WatchedBranch(o["webhook_repository"] or o["repo"], o["branch"]),
        trigger=lambda event: sync.trigger(),
        metrics=metrics,
    )
    server = WebhookServer(host, port, receiver)
    try:
        server.start()
    except OSError as exc:
        raise click.ClickException(f"--webhook-listen {o['webhook_listen']}: {exc}") from exc
    shutdown.on_shutdown("webhook server", server.stop)
    log.info("webhook receiver on %s/webhook", server.url)


def _start_admission(o: dict[str, Any], api: KubeApi, leader: _Leadership,
                     shutdown: Any) -> None:
    """The admission webhook's own HTTPS listener (SPEC 8). Every replica serves it, leader or
    not: the API server calls whichever Service endpoint it picks."""
    from reconciler.admission.server import AdmissionServer, CertificateError, CertificateSource
    from reconciler.ops.http_server import ListenAddressError, parse_listen_address

    if o["admission_self_signed"] == bool(o["admission_cert_dir"]):
        raise click.UsageError("--admission-listen needs either --admission-cert-dir (a mounted "
                               "tls.crt and tls.key) or --admission-self-signed")
    try:
        host, port = parse_listen_address(o["admission_listen"])
    except ListenAddressError as exc:
        raise click.BadParameter(str(exc), param_hint="--admission-listen") from exc

    def serve(cert_dir: Path) -> None:
        server = AdmissionServer(host, port, CertificateSource(cert_dir))
        server.start()
        shutdown.on_shutdown("admission webhook", server.stop)
        log.info("admission webhook on %s (certificate from %s)", server.url, cert_dir)

    if o["admission_self_signed"]:
        _self_signed(o, api, leader, shutdown, serve)
        return
    try:
        serve(Path(o["admission_cert_dir"]))
    except CertificateError as exc:
        raise click.BadParameter(str(exc), param_hint="--admission-cert-dir") from exc
    except OSError as exc:
        raise click.ClickException(f"--admission-listen {o['admission_listen']}: {exc}") from exc


def _self_signed(o: dict[str, Any], api: KubeApi, leader: _Leadership, shutdown: Any,
                 serve: Callable[[Path], None]) -> None:
    """The Secret-held certificate: the listener starts once the Secret has a pair (at once
    for a leader, once the leader issued it for the others)."""
    from reconciler.admission.self_signed import SelfSignedCertificates
    from reconciler.gitops.mirror import default_state_dir

    namespace = o["leader_elect_namespace"]
    state = Path(o["state_dir"]).expanduser() if o["state_dir"] else default_state_dir()
    cert_dir = state / "admission-tls"

    def ready() -> None:
        try:
            serve(cert_dir)
        except OSError as exc:  # the port is taken: nothing to serve with, stop the daemon
            log.error("--admission-listen %s: %s", o["admission_listen"], exc)
            os.kill(os.getpid(), signal.SIGTERM)

    certificates = SelfSignedCertificates(
        api, namespace=namespace, secret=o["admission_secret"],
        webhook_config=o["admission_webhook_config"],
        hosts=list(o["admission_hosts"]) or [f"gpu-reconciler.{namespace}.svc"],
        cert_dir=cert_dir, is_leader=leader.is_leader, on_ready=ready,
        interval=_duration(o["admission_cert_interval"], "--admission-cert-interval") or 30.0)
    certificates.start()
    shutdown.on_shutdown("admission certificates", certificates.stop)
    log.info("admission certificates from Secret %s/%s (the leader issues and rotates them)",
             namespace, o["admission_secret"])


#: connections to the API server: the watches hold some, the controllers' action workers (32,
#: and 8 each for deletion records and bookkeeping) and the sync the rest
API_POOL_SIZE = 64


def _api(kubeconfig: str | None) -> KubeApi:
    """The given kubeconfig, else in-cluster config, else ~/.kube/config."""
    from reconciler.kube.api import KubeApi
    from reconciler.kube.kubeconfig import in_cluster_api

    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise click.BadParameter(f"{kubeconfig} does not exist", param_hint="--kubeconfig")
        try:
            return KubeApi.from_kubeconfig(kubeconfig, pool_size=API_POOL_SIZE)
        except Exception as exc:  # the client raises several kinds for a bad file
            raise click.ClickException(f"cannot use kubeconfig {kubeconfig}: {exc}") from exc
    api = in_cluster_api(pool_size=API_POOL_SIZE)
    if api is None:
        path = os.path.expanduser("~/.kube/config")
        if not os.path.isfile(path):
            raise click.UsageError(
                "no cluster: give --kubeconfig (or $KUBECONFIG), or run in a pod") from None
        return KubeApi.from_kubeconfig(path, pool_size=API_POOL_SIZE)
    return api


# every setting's environment variable shows in --help (docs/configuration.md has them all)
for _param in run.params:
    if isinstance(_param, click.Option) and _param.envvar:
        _param.show_envvar = True
