"""The daemon's composition root: from ``DaemonSettings`` to running parts (the ops server, the
admission webhook, the sync role with operator mode's watches and the forge statuses, the
rollout controller and the firmware orchestrator, the push webhook, the leader election), each
with its step in the ordered shutdown; ``serve`` runs them until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from reconciler.daemon.settings import (
    DaemonSettings,
    ListenFailed,
    SettingRefused,
    StartFailed,
    UsageRefused,
)

# each part is imported when it starts: a controller alone never loads Git, and a start is
# quick (a restarted replica acts again within seconds)
if TYPE_CHECKING:
    from reconciler.config.settings import ClusterSettings
    from reconciler.controller.loop import RolloutController
    from reconciler.firmware.controller import FirmwareController
    from reconciler.kube.api import KubeApi
    from reconciler.ops.metrics import Metrics
    from reconciler.ops.shutdown import Shutdown
    from reconciler.settings.live import LiveSettings
    from reconciler.sync.loop import ClusterSync
    from reconciler.trust.signatures import CommitVerifier

log = logging.getLogger("reconciler.run")

#: connections to the API server: the watches hold some, the controllers' action workers (32,
#: and 8 each for deletion records and bookkeeping) and the sync the rest
API_POOL_SIZE = 64


class _Server(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


_S = TypeVar("_S", bound=_Server)


def _listen(make: Callable[[], _S], step: str, shutdown: Shutdown, *, flag: str,
            address: str, off: bool = False) -> _S:
    """Binds and starts a listener and stops it at shutdown. The socket is bound when the
    server is made: a port taken is one line naming the port and ``flag`` (exit 2), never a
    traceback. ``off``: ``flag`` also takes ``off``."""
    from reconciler.ops.http_server import listen_failure

    try:
        server = make()
        server.start()
    except OSError as exc:
        raise ListenFailed(listen_failure(exc, flag=flag, address=address, off=off)) from exc
    shutdown.on_shutdown(step, server.stop)
    return server


def _check_port(address: str, *, flag: str) -> None:
    """A listener started later (``flag``'s ``address``) would find its port taken: one line
    (exit 2) now, before any role starts. An address that does not parse is refused where the
    listener starts."""
    from reconciler.ops.http_server import (
        ListenAddressError,
        listen_failure,
        parse_listen_address,
        try_listen,
    )

    try:
        host, port = parse_listen_address(address)
    except ListenAddressError:
        return
    try:
        try_listen(host, port)
    except OSError as exc:
        raise ListenFailed(listen_failure(exc, flag=flag, address=address)) from exc


class Leadership:
    """``is_leader`` for the roles: always true without election; false for good once shutdown
    began."""

    def __init__(self, *, acting: bool) -> None:
        self.check: Callable[[], bool] = lambda: acting
        self._revoked = False

    def is_leader(self) -> bool:
        return not self._revoked and self.check()

    def revoke(self) -> None:
        self._revoked = True


def serve(s: DaemonSettings) -> int:
    """Starts every part ``s`` asks for and runs until a signal; returns the exit code."""
    from reconciler.ops.health import HealthChecks, OpsServer
    from reconciler.ops.http_server import ListenAddressError, parse_listen_address
    from reconciler.ops.metrics import Metrics
    from reconciler.ops.shutdown import Shutdown

    api = kube_api(s.kubeconfig)
    shutdown = Shutdown()
    shutdown.install()
    # `kill -USR1 PID` writes every thread's stack to stderr: what a daemon that seems stuck is
    # doing, without stopping it
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    metrics = Metrics()
    checks = HealthChecks()
    # with an election, nothing acts until this replica holds the Lease
    leader = Leadership(acting=not s.election.enabled)

    if s.ops_listen:
        try:
            ops_address = parse_listen_address(s.ops_listen)
        except ListenAddressError as exc:
            raise SettingRefused(str(exc), flag="--ops-listen") from exc
        ops = _listen(partial(OpsServer, *ops_address, checks=checks, metrics=metrics),
                      "ops server", shutdown, flag="--ops-listen", address=s.ops_listen,
                      off=True)
        log.info("ops endpoints on %s (/healthz /readyz /metrics)", ops.url)

    #: why the daemon stopped itself (exit status 2), e.g. a port taken after the start
    fatal: list[str] = []
    if s.admission.listen:
        _start_admission(s, api, leader, shutdown, fatal)

    controller: RolloutController | None = None
    firmware: FirmwareController | None = None

    def node_counts() -> dict[str, int]:
        last = controller.last_plan if controller is not None else None
        if last is None:
            return {}
        return {"in_flight": last.in_flight, "unavailable": last.unavailable}

    if s.webhook.listen and s.runs_sync:
        # bound once the sync runs; a port taken is said before any role starts
        _check_port(s.webhook.listen, flag="--webhook-listen")
    live = _live_settings(s, shutdown)
    sync = (_start_sync(s, api, metrics, leader, shutdown,
                        node_counts if s.runs_controller else None, live)
            if s.runs_sync else None)
    if s.runs_controller:
        controller, firmware = _start_controllers(s, api, metrics, leader, shutdown, live)

    def caches_synced() -> bool:
        return ((sync is None or sync.synced())
                and (controller is None or controller.synced())
                and (firmware is None or firmware.synced()))

    checks.add_readiness("caches", caches_synced)
    if sync is not None:
        checks.add_liveness("sync", lambda: sync.alive)
    if s.webhook.listen and sync is not None:
        _start_webhook(s, sync, metrics, shutdown)
    if s.election.enabled:
        _start_election(s, api, metrics, leader, shutdown, sync, controller)

    shutdown.wait()
    checks.shutting_down()
    leader.revoke()
    failed = shutdown.run_steps()
    log.info("stopped%s", f" (failed steps: {', '.join(failed)})" if failed else "")
    return 2 if fatal else 0


def _start_controllers(s: DaemonSettings, api: KubeApi, metrics: Metrics, leader: Leadership,
                       shutdown: Shutdown, live: LiveSettings,
                       ) -> tuple[RolloutController, FirmwareController]:
    from reconciler.controller.act import Target
    from reconciler.controller.health import HealthFeeder
    from reconciler.controller.loop import RolloutController, prefer_responsiveness
    from reconciler.firmware.controller import FirmwareController
    from reconciler.rollout.model import PlannerSettings

    prefer_responsiveness()
    controller = RolloutController(
        api, Target(cluster_operator=s.cluster_operator),
        settings=PlannerSettings(cordon_ahead=s.cordon_ahead),
        is_leader=leader.is_leader,
        health=HealthFeeder(lambda: live.current().health, on_result=metrics.count_health_check),
        config=live.current,
        on_eviction=metrics.count_drain_eviction,
    )
    live.subscribe(controller.kick)  # a new setting takes effect at once
    controller.start()
    shutdown.on_shutdown("rollout controller", controller.stop)
    log.info("rollout controller started for ClusterOperator %s at %s", s.cluster_operator,
             api.host)
    firmware = FirmwareController(api, cluster_operator=s.cluster_operator,
                                  settings=lambda: live.current().firmware,
                                  is_leader=leader.is_leader,
                                  hook_env=({"KUBECONFIG": os.path.abspath(s.kubeconfig)}
                                            if s.kubeconfig else None))
    live.subscribe(firmware.kick)
    firmware.start()
    shutdown.on_shutdown("firmware orchestrator", firmware.stop)
    return controller, firmware


def _start_election(s: DaemonSettings, api: KubeApi, metrics: Metrics, leader: Leadership,
                    shutdown: Shutdown, sync: ClusterSync | None,
                    controller: RolloutController | None) -> None:
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

    e = s.election
    try:
        config = ElectionConfig(e.namespace, e.lease, default_identity(), e.duration, e.deadline,
                                e.retry)
    except ValueError as exc:
        raise UsageRefused(str(exc)) from exc
    elector = LeaderElector(KubernetesLeaseClient(api.typed()), config,
                            on_started_leading=started, on_stopped_leading=stopped,
                            metrics=metrics)
    leader.check = lambda: elector.is_leader
    elector.start()
    shutdown.on_shutdown("leader election", elector.stop)
    log.info("leader election on Lease %s/%s as %s", config.namespace, config.name,
             config.identity)


def _live_settings(s: DaemonSettings, shutdown: Shutdown) -> LiveSettings:
    """The one live view of reconciler.yaml for this cluster that every loop reads at each
    pass: published by the sync role at each commit it applies; without one, --repo-config,
    read again whenever it changes (none: the defaults). --ready-timeout pins its setting."""
    from reconciler.settings.live import LiveSettings, RepoConfigWatch

    pin = None
    flag = s.ready_timeout
    if flag is not None:
        def pin(settings: ClusterSettings) -> ClusterSettings:
            return replace(settings, rollout=replace(settings.rollout, ready_timeout=flag))

    live = LiveSettings(s.cluster or None, pin=pin)
    if s.repo_config is not None and not s.runs_sync:
        watch = RepoConfigWatch(s.repo_config.path, live).start()
        shutdown.on_shutdown("--repo-config watch", watch.stop)
    return live


def _settings_at_head(s: DaemonSettings, sync: ClusterSync, live: LiveSettings) -> None:
    """Before the sync's first pass: reconciler.yaml at the branch head (or --repo-config);
    the sync replaces it with the commit the cluster runs, then with each commit applied."""
    from reconciler.config.document import load
    from reconciler.gitops.reader import PolicyFileRefused

    if s.repo_config is not None:
        live.offer(load(s.repo_config.text, s.repo_config.path), source=s.repo_config.path)
        return
    head = sync.repo.mirror.head(s.branch)
    if head is None:
        return
    try:
        live.offer(sync.repo.reader.config_document(head), source=head)
    except PolicyFileRefused as exc:
        log.warning("reconciler.yaml unusable (%s); using defaults", exc)


def _warn_ignored_settings(api: KubeApi, cluster_operator: str, live: LiveSettings,
                           is_leader: Callable[[], bool]) -> None:
    """Operator mode: drain, waitFor, unavailableNodes and topology are ignored
    (docs/live-clusters.md#waiting-for-jobs and docs/rollout.md#topology-aware-waves), said in the
    log and, by the leader, in a Warning Event, whenever a commit sets them."""
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


def _start_vendor_health(s: DaemonSettings, api: KubeApi, sync: ClusterSync, metrics: Metrics,
                         is_leader: Callable[[], bool], shutdown: Shutdown) -> None:
    """Operator mode: the sync role checks the nodes the vendor upgraded (docs/health.md), with the
    ``health`` section in force (the live view: the commit applied last). Started with no
    section too: a later commit may add one. One that does not validate commits
    ``pause: true``."""
    from reconciler.sync.health_watch import VendorHealthWatch, stop_vendor

    watch = VendorHealthWatch(api, cluster_operator=s.cluster_operator,
                              section=lambda: sync.settings.current().health,
                              on_failure=sync.write_backs.pause_for_health,
                              on_invalid=partial(sync.write_backs.pause_for_health,
                                                 cause="health section invalid"),
                              stop_vendor=partial(stop_vendor, api, s.cluster_operator,
                                                  sync.drift),
                              on_result=metrics.count_health_check,
                              is_leader=is_leader).start()
    shutdown.on_shutdown("operator-mode health checks", watch.stop)
    log.info("operator mode: health checks run on the nodes the vendor upgrades "
             "(the health section of each commit)")


def _start_window_pauses(s: DaemonSettings, sync: ClusterSync, is_leader: Callable[[], bool],
                         shutdown: Shutdown) -> None:
    """Operator mode: ``pause: true`` / ``pause: false`` at maintenance-window edges
    (docs/configuration.md#maintenance-windows)."""
    from reconciler.sync.window_watch import WindowPauseWatch

    assert s.cluster is not None  # check_roles: a sync role has its cluster
    watch = WindowPauseWatch(sync.repo, cluster=s.cluster, branch=s.branch,
                             windows=lambda: sync.settings.current().windows,
                             is_leader=is_leader).start()
    sync.shell.holds = watch.holds  # the status snapshot says when the next window opens
    shutdown.on_shutdown("operator-mode maintenance windows", watch.stop)


def _start_sync(s: DaemonSettings, api: KubeApi, metrics: Metrics, leader: Leadership,
                shutdown: Shutdown, node_counts: Callable[[], dict[str, int]] | None,
                live: LiveSettings) -> ClusterSync:
    from reconciler.gitops.credentials import redact
    from reconciler.gitops.errors import GitOpsError
    from reconciler.sync.loop import ClusterSync

    assert s.repo is not None and s.cluster is not None  # check_roles
    verifier = _verifier(s, metrics)
    try:
        sync = ClusterSync(
            api, s.repo, cluster=s.cluster, branch=s.branch, state_dir=s.state_dir,
            git_credentials=s.git,
            cluster_operator=s.cluster_operator, fetch_interval=s.fetch_interval,
            status_min_interval=s.status_min_interval, verifier=verifier,
            signature_mode=s.signatures.mode, signing=_signing(s), metrics=metrics,
            is_leader=leader.is_leader, controller_field_manager=s.controller_field_manager,
            node_counts=node_counts, settings=live,
        )
    except GitOpsError as exc:
        raise StartFailed(str(exc)) from exc
    _settings_at_head(s, sync, live)
    _start_forge_statuses(s, sync, live, metrics, leader.is_leader, shutdown)
    sync.start()
    shutdown.on_shutdown("sync (flush Git)", sync.stop)
    if s.mode == "operator":
        _start_vendor_health(s, api, sync, metrics, leader.is_leader, shutdown)
        _start_window_pauses(s, sync, leader.is_leader, shutdown)
        _warn_ignored_settings(api, s.cluster_operator, live, leader.is_leader)
    log.info("syncing %s (branch %s, cluster %s) to ClusterOperator %s; mode %s",
             redact(s.repo), s.branch, s.cluster, s.cluster_operator, s.mode)
    return sync


def _start_forge_statuses(s: DaemonSettings, sync: ClusterSync, live: LiveSettings,
                          metrics: Metrics, is_leader: Callable[[], bool],
                          shutdown: Shutdown) -> None:
    """Commit statuses to the forge (docs/forges.md): the flags, each missing one from the
    ``forge:`` section in force (the live settings: the branch head's or --repo-config's at the
    start, then each applied commit's), asked again before each post, so a change of ``forge:``
    in Git takes effect at the next commit. A bad flag refuses the start; a bad section turns
    the statuses off (an ERROR line) until a commit fixes it."""
    from reconciler.gitops.forge_status import CommitStatuses, ForgeTarget
    from reconciler.policy.forge_config import ForgeConfig
    from reconciler.sync.forge_report import ForgeReport

    assert s.repo is not None and s.cluster is not None  # check_roles
    f = s.forge
    target = ForgeTarget(kind=f.kind, url=f.url, repository=f.repository, remote=s.repo,
                         section=lambda: live.current().forge)
    target.current()  # said at the start: where the statuses go, or why nowhere
    if target.error is not None and f.kind is not None and f.url is not None:
        raise UsageRefused(target.error)
    if f.token_file is None:
        if f.kind is not None:
            raise UsageRefused(f"commit statuses to {f.kind} need --forge-token-file")

        said: list[ForgeConfig | None] = [None]

        def no_token() -> None:
            """Said once per forge a commit names."""
            named = target.current()
            if named is not None and named != said[0]:
                log.error("reconciler.yaml forge: names %s %s, but the daemon has no "
                          "--forge-token-file: no commit statuses", named.kind,
                          named.repository)
            said[0] = named

        no_token()
        live.subscribe(no_token)
        return
    poster = CommitStatuses(target.current, f.token_file, is_leader=is_leader,
                            metrics=metrics).start()
    report = ForgeReport(sync.repo, poster, cluster=s.cluster, record=sync.record,
                         wall=sync.clock, target_url=f.dashboard_url, start=sync.rollout_start)
    sync.shell.on_snapshot = report.snapshot
    shutdown.on_shutdown("forge commit statuses", poster.stop)


def _verifier(s: DaemonSettings, metrics: Metrics) -> CommitVerifier | None:
    sig = s.signatures
    if not sig.trusted_gpg_keys and sig.allowed_signers is None:
        if sig.mode not in (None, "none"):
            raise UsageRefused(f"--signature-mode {sig.mode} needs --trusted-gpg-key and/or "
                               "--allowed-signers")
        return None
    from reconciler.gitops.mirror import default_state_dir
    from reconciler.trust.signatures import (
        CommitVerifier,
        Method,
        SignatureConfigError,
        TrustedKeys,
    )

    methods = set()
    if sig.trusted_gpg_keys:
        methods.add(Method.OPENPGP)
    if sig.allowed_signers is not None:
        methods.add(Method.SSH)
    try:
        trusted = TrustedKeys(openpgp_key_files=sig.trusted_gpg_keys,
                              allowed_signers_file=sig.allowed_signers,
                              methods=frozenset(methods))
        return CommitVerifier(trusted, s.state_dir or default_state_dir(), metrics=metrics)
    except SignatureConfigError as exc:
        raise UsageRefused(str(exc)) from exc


def _signing(s: DaemonSettings) -> tuple[list[str], list[str], dict[str, str]] | None:
    sig = s.signatures
    if not sig.signing_gpg_key and sig.signing_ssh_key is None:
        return None
    from reconciler.trust.signatures import SignatureConfigError, signing_config

    try:
        config = signing_config(openpgp_key=sig.signing_gpg_key,
                                gnupg_home=sig.signing_gnupg_home,
                                ssh_key_file=sig.signing_ssh_key)
    except SignatureConfigError as exc:
        raise UsageRefused(str(exc)) from exc
    return config.git_args(), config.commit_tree_args(), dict(config.env)


def _start_webhook(s: DaemonSettings, sync: ClusterSync, metrics: Metrics,
                   shutdown: Shutdown) -> None:
    from reconciler.ops.http_server import ListenAddressError, parse_listen_address
    from reconciler.trust.webhook import (
        WatchedBranch,
        WebhookConfigError,
        WebhookReceiver,
        WebhookServer,
        load_secret,
    )

    w = s.webhook
    assert w.listen is not None and s.repo is not None
    try:
        host, port = parse_listen_address(w.listen)
        secret = load_secret(w.secret_file)
    except (ListenAddressError, WebhookConfigError) as exc:
        raise UsageRefused(str(exc)) from exc
    receiver = WebhookReceiver(
        secret=secret,
        watched=WatchedBranch(w.repository or s.repo, s.branch),
        trigger=lambda event: sync.trigger(),
        metrics=metrics,
    )
    server = _listen(partial(WebhookServer, host, port, receiver), "webhook server", shutdown,
                     flag="--webhook-listen", address=w.listen)
    log.info("webhook receiver on %s/webhook", server.url)


def _start_admission(s: DaemonSettings, api: KubeApi, leader: Leadership,
                     shutdown: Shutdown, fatal: list[str]) -> None:
    """The admission webhook's own HTTPS listener (docs/admission.md). Every replica serves it,
    leader or not: the API server calls whichever Service endpoint it picks. ``fatal``: why the
    daemon stopped itself (a port taken after the start)."""
    from reconciler.admission.server import AdmissionServer, CertificateError, CertificateSource
    from reconciler.ops.http_server import ListenAddressError, parse_listen_address

    a = s.admission
    assert a.listen is not None
    if a.self_signed == (a.cert_dir is not None):
        raise UsageRefused("--admission-listen needs either --admission-cert-dir (a mounted "
                           "tls.crt and tls.key) or --admission-self-signed")
    try:
        host, port = parse_listen_address(a.listen)
    except ListenAddressError as exc:
        raise SettingRefused(str(exc), flag="--admission-listen") from exc

    def serve(cert_dir: Path) -> None:
        server = _listen(partial(AdmissionServer, host, port, CertificateSource(cert_dir)),
                         "admission webhook", shutdown, flag="--admission-listen",
                         address=a.listen or "")
        log.info("admission webhook on %s (certificate from %s)", server.url, cert_dir)

    if a.self_signed:
        _self_signed(s, api, leader, shutdown, serve, fatal)
        return
    assert a.cert_dir is not None
    try:
        serve(a.cert_dir)
    except CertificateError as exc:
        raise SettingRefused(str(exc), flag="--admission-cert-dir") from exc


def _self_signed(s: DaemonSettings, api: KubeApi, leader: Leadership, shutdown: Shutdown,
                 serve: Callable[[Path], None], fatal: list[str]) -> None:
    """The Secret-held certificate: the listener starts once the Secret has a pair (at once
    for a leader, once the leader issued it for the others). Its port is tried at start, so a
    port taken then stops the start; one taken later stops the daemon with exit status 2."""
    from reconciler.admission.self_signed import SelfSignedCertificates
    from reconciler.gitops.mirror import default_state_dir
    a = s.admission
    namespace = s.election.namespace
    cert_dir = (s.state_dir or default_state_dir()) / "admission-tls"
    _check_port(a.listen or "", flag="--admission-listen")

    def ready() -> None:
        try:
            serve(cert_dir)
        except ListenFailed as exc:  # taken since the start: nothing to serve with, stop
            fatal.append(str(exc))
            log.error("%s", exc)
            os.kill(os.getpid(), signal.SIGTERM)

    certificates = SelfSignedCertificates(
        api, namespace=namespace, secret=a.secret, webhook_config=a.webhook_config,
        hosts=list(a.hosts) or [f"gpu-reconciler.{namespace}.svc"],
        cert_dir=cert_dir, is_leader=leader.is_leader, on_ready=ready,
        interval=a.cert_interval)
    certificates.start()
    shutdown.on_shutdown("admission certificates", certificates.stop)
    log.info("admission certificates from Secret %s/%s (the leader issues and rotates them)",
             namespace, a.secret)


def kube_api(kubeconfig: str | None) -> KubeApi:
    """The given kubeconfig, else in-cluster config, else ~/.kube/config."""
    from reconciler.kube.api import KubeApi
    from reconciler.kube.kubeconfig import in_cluster_api

    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise SettingRefused(f"{kubeconfig} does not exist", flag="--kubeconfig")
        try:
            return KubeApi.from_kubeconfig(kubeconfig, pool_size=API_POOL_SIZE)
        except Exception as exc:  # the client raises several kinds for a bad file
            raise StartFailed(f"cannot use kubeconfig {kubeconfig}: {exc}") from exc
    api = in_cluster_api(pool_size=API_POOL_SIZE)
    if api is None:
        path = os.path.expanduser("~/.kube/config")
        if not os.path.isfile(path):
            raise UsageRefused(
                "no cluster: give --kubeconfig (or $KUBECONFIG), or run in a pod") from None
        return KubeApi.from_kubeconfig(path, pool_size=API_POOL_SIZE)
    return api
