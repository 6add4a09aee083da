"""``reconciler run``: the daemon (sync role, rollout controller, or both).

Every setting comes from, highest first: the command-line flag, its environment variable
(``RECONCILER_*``, listed in ``--help`` and docs/configuration.md), the policy repository's
``reconciler.yaml`` (for the keys it has), the default. This module is the command line only:
the flags become typed ``DaemonSettings`` here, and ``reconciler.daemon.assembly`` wires and
runs the parts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from reconciler.cli.durations import parse_duration_seconds
from reconciler.cli.errors import OneLineUsageError
from reconciler.daemon.settings import (
    Admission,
    DaemonSettings,
    Election,
    Forge,
    ListenFailed,
    RepoConfigArg,
    SettingRefused,
    Signatures,
    StartFailed,
    UsageRefused,
    Webhook,
    check_forge_url,
    check_roles,
)
from reconciler.gitops.credentials import GitCredentials

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
                   "Git, docs/gitops.md#git-stays-the-truth); in operator mode, the vendor "
                   "operator's.")
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
    with _as_usage_errors():
        settings = daemon_settings(options)
        from reconciler.daemon.assembly import serve

        code = serve(settings)
    sys.exit(code)


@contextmanager
def _as_usage_errors() -> Iterator[None]:
    """The daemon's refusals as the CLI's errors: exit 2 naming the flag, or exit 1."""
    try:
        yield
    except ListenFailed as exc:
        raise OneLineUsageError(str(exc)) from exc
    except SettingRefused as exc:
        raise click.BadParameter(str(exc), param_hint=exc.flag) from exc
    except UsageRefused as exc:
        raise click.UsageError(str(exc)) from exc
    except StartFailed as exc:
        raise click.ClickException(str(exc)) from exc


def daemon_settings(o: Mapping[str, Any]) -> DaemonSettings:
    """The typed settings from the command line's values (flags, else their environment
    variables, else the defaults: click resolved them)."""
    check_roles(o["role"], o["mode"], repo=o["repo"], cluster=o["cluster"])
    ready = _duration(o["ready_timeout"], "--ready-timeout")
    repo_config = _read_repo_config(o["repo_config"]) if o["repo_config"] else None
    check_forge_url(o["forge_url"])
    lease = tuple(_duration(o[k], f"--{k.replace('_', '-')}") or 0.0
                  for k in ("lease_duration", "renew_deadline", "retry_period"))
    return DaemonSettings(
        role=o["role"], mode=o["mode"], repo=o["repo"], cluster=o["cluster"],
        branch=o["branch"], kubeconfig=o["kubeconfig"], cluster_operator=o["cluster_operator"],
        state_dir=_path(o["state_dir"], expand=True),
        fetch_interval=_duration(o["fetch_interval"], "--fetch-interval"),
        status_min_interval=_duration(o["status_min_interval"], "--status-min-interval"),
        ready_timeout=ready, cordon_ahead=bool(o["cordon_ahead"]), repo_config=repo_config,
        controller_field_manager=o["controller_field_manager"],
        git=GitCredentials(ssh_key=_path(o["git_ssh_key"]),
                           known_hosts=_path(o["git_known_hosts"]), username=o["git_username"],
                           password_file=_path(o["git_password_file"])),
        signatures=Signatures(
            mode=o["signature_mode"],
            trusted_gpg_keys=tuple(Path(p) for p in o["trusted_gpg_keys"]),
            allowed_signers=_path(o["allowed_signers"]), signing_gpg_key=o["signing_gpg_key"],
            signing_gnupg_home=_path(o["signing_gnupg_home"]),
            signing_ssh_key=_path(o["signing_ssh_key"])),
        webhook=Webhook(listen=o["webhook_listen"], secret_file=o["webhook_secret_file"],
                        repository=o["webhook_repository"]),
        forge=Forge(kind=o["forge"], url=o["forge_url"], token_file=_path(o["forge_token_file"]),
                    repository=o["forge_repository"], dashboard_url=o["dashboard_url"]),
        admission=Admission(
            listen=o["admission_listen"], cert_dir=_path(o["admission_cert_dir"]),
            self_signed=bool(o["admission_self_signed"]), secret=o["admission_secret"],
            webhook_config=o["admission_webhook_config"], hosts=tuple(o["admission_hosts"]),
            cert_interval=_duration(o["admission_cert_interval"],
                                    "--admission-cert-interval") or 30.0),
        ops_listen=o["ops_listen"] if o["ops_listen"] not in (None, "", "off") else None,
        election=Election(enabled=bool(o["leader_elect"]),
                          namespace=o["leader_elect_namespace"], lease=o["leader_elect_lease"],
                          duration=lease[0], deadline=lease[1], retry=lease[2]),
    )


def _path(value: str | None, *, expand: bool = False) -> Path | None:
    if not value:
        return None
    return Path(value).expanduser() if expand else Path(value)


def _read_repo_config(path: str) -> RepoConfigArg:
    """--repo-config, read at start: a link, a FIFO, an oversized or unparsable file is a usage
    error naming it (bounded like a policy file, never followed)."""
    from reconciler.files import FileRefused, printable, read_bounded
    from reconciler.policy.document import YamlRefused, parse_yaml

    try:
        text = read_bounded(path)
        data = parse_yaml(text, path)
    except (FileRefused, YamlRefused) as exc:
        raise click.BadParameter(printable(str(exc)), param_hint="--repo-config") from None
    return RepoConfigArg(path=path, data=data if isinstance(data, dict) else {}, text=text)


# every setting's environment variable shows in --help (docs/configuration.md has them all)
for _param in run.params:
    if isinstance(_param, click.Option) and _param.envvar:
        _param.show_envvar = True
