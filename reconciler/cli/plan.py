"""``reconciler plan --against REF``: what merging the working tree into REF does, per cluster
(docs/plan.md). The findings are ``validate --against REF``'s own (its jobs run here); the decisions
and the rendering are ``reconciler.merge.plan`` (pure), on the cluster's settings as
``reconciler.config`` resolves them for the daemon.

Exit status as ``validate``: 0 no error, 1 errors found (a refused or held cluster), 2 usage.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import click

from reconciler import clock
from reconciler.cli.report_formats import printable_json
from reconciler.cli.validate import (
    ExistingPath,
    GitState,
    Job,
    Repository,
    duplicate_objects,
    find_repository,
    plan_jobs,
    run_jobs,
)
from reconciler.config.document import CONFIG_FILE, ConfigDocument, load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.files import FileRefused, read_bounded
from reconciler.fleet.promotion import payload_version, promotion_gate
from reconciler.gitops.ref_reader import LINK_MODE, blob_id
from reconciler.merge.plan import (
    ClusterInput,
    ClusterPlan,
    plan_cluster,
    render_json,
    render_markdown,
    render_text,
)
from reconciler.policy.document import parse_document
from reconciler.policy.findings import Finding, sort_findings
from reconciler.policy.schema import SchemasMissingError, load_schema

_YAML_SUFFIXES = (".yaml", ".yml")
POLICY_FILE = "cluster-operator.yaml"


@dataclass(slots=True)
class ClusterSide:
    """A cluster's files at the ref and in the working tree."""

    name: str
    #: the policy file (working tree path; the same path is read at the ref)
    policy: Path
    #: every policy-like file of the folder in the working tree (validate checks them all)
    files: list[Path]
    before: bytes | None
    after: bytes | None


def _read(path: Path) -> bytes | None:
    try:
        return read_bounded(path) if os.path.lexists(path) else None
    except FileRefused:
        return b"\0refused"  # differs from any blob: validating it says why


def _cluster_side(repo: Repository, state: GitState, name: str,
                  blobs: Mapping[str, tuple[str, str]]) -> ClusterSide:
    """The cluster's policy at both sides; at the ref it is read only when its blob differs
    from the working tree's file (``blobs``: the ref's files, one ``git ls-tree``)."""
    folder = repo.root / repo.layout.clusters_dir / name
    files = []
    if folder.is_dir() and not folder.is_symlink():
        files = sorted(p for p in folder.iterdir()
                       if p.name.endswith(_YAML_SUFFIXES) and not p.name.startswith("."))
    elif folder.is_symlink():
        files = [folder]
    policy = folder / POLICY_FILE
    if not os.path.lexists(policy) and files and files[0] != folder:
        policy = files[0]
    after = _read(policy)
    rel = repo.relative(policy)
    known = blobs.get(rel.as_posix()) if rel is not None else None
    if (known is not None and after is not None and known[0] != LINK_MODE
            and not policy.is_symlink() and known[1] == blob_id(after)):
        return ClusterSide(name, policy, files, after, after)
    try:
        before = state.read(policy)
    except FileRefused:
        before = b"\0refused"
    return ClusterSide(name, policy, files, before, after)


def _object(data: bytes | None, shown: str) -> Mapping[str, Any] | None:
    if data is None:
        return None
    obj = parse_document(data, shown).obj
    return obj if isinstance(obj, Mapping) else None


def _cluster_names(repo: Repository, blobs: Mapping[str, tuple[str, str]]) -> list[str]:
    """The cluster folders of the working tree and of the ref (``blobs``)."""
    depth = len(PurePosixPath(repo.layout.clusters_dir).parts)
    there = {PurePosixPath(path).parts[depth] for path in blobs
             if len(PurePosixPath(path).parts) > depth}
    return sorted(name for name in set(repo.cluster_names()) | there
                  if not name.startswith("."))


def _only_cluster(repo: Repository, path: Path | None) -> str | None:
    """The cluster PATH names (a cluster folder or a file in one), None for the repository."""
    if path is None:
        return None
    rel = repo.relative(path)
    prefix = PurePosixPath(repo.layout.clusters_dir).parts
    if rel is None or rel.parts[: len(prefix)] != prefix or len(rel.parts) <= len(prefix):
        return None
    return rel.parts[len(prefix)]


def _promotion_earliest(job: Job | None, version: str | None) -> float | None:
    if job is None or job.promotion is None or version is None:
        return None
    upstream, soak, snapshot, now = job.promotion
    return promotion_gate(upstream, snapshot, version, soak=soak, now=now).earliest


Changed = tuple[ClusterSide, dict[str, Any], dict[str, Any]]


def _changed(repo: Repository, state: GitState, config_ref: ConfigDocument,
             config_now: ConfigDocument, only: str | None) -> list[Changed]:
    """The clusters whose policy file or settings (as each sees reconciler.yaml) differ, with
    both settings."""
    changed: list[Changed] = []
    blobs = state.reader.blobs(PurePosixPath(repo.layout.clusters_dir))
    for name in _cluster_names(repo, blobs):
        if only is not None and name != only:
            continue
        side = _cluster_side(repo, state, name, blobs)
        before, after = config_ref.seen_by(name), config_now.seen_by(name)
        if side.before != side.after or before != after:
            changed.append((side, before, after))
    return changed


def _validate(repo: Repository, against: str, changed: Sequence[Changed]
              ) -> tuple[list[Job], list[Finding]]:
    """``validate --against``'s jobs and sorted findings for reconciler.yaml and the changed
    clusters' files (the others are as at the ref). Info findings are left to ``validate``:
    they change nothing about what a merge does."""
    config_path = repo.root / CONFIG_FILE
    files = [config_path] if os.path.lexists(config_path) else []
    for side, _, _ in changed:
        files.extend(side.files)
    jobs = plan_jobs(repo, files, against)
    for kind in {job.kind for job in jobs}:
        load_schema(kind)
    results = run_jobs(jobs)
    findings = [f for r in results for f in r.findings if not f.is_info]
    findings.extend(duplicate_objects(jobs, results))
    wanted = {side.name for side, _, _ in changed}
    findings.extend(f for f in repo.cluster_files()[1]
                    if _only_cluster(repo, Path(f.file)) in wanted)
    return jobs, sort_findings(findings)


def build_plans(repo: Repository, against: str, *, now: float, only: str | None = None
                ) -> tuple[list[ClusterPlan], list[Finding]]:
    """Every changed cluster's plan, and the findings that belong to no planned cluster (an
    error in reconciler.yaml belongs to every one: the daemon reads it at every commit)."""
    state = GitState(repo, against)
    config_now_text = _read(repo.root / CONFIG_FILE)
    try:
        config_ref_text = state.read(repo.root / CONFIG_FILE)
    except FileRefused:
        config_ref_text = None
    config_now = load(config_now_text)
    changed = _changed(repo, state, load(config_ref_text), config_now, only)
    jobs, findings = _validate(repo, against, changed)
    by_file = {job.shown: job for job in jobs}
    config_shown = next((job.shown for job in jobs if job.kind == "repo-config"), None)
    config_errors = tuple(f for f in findings if f.file == config_shown and f.is_error)
    plans: list[ClusterPlan] = []
    claimed = set(config_errors) if changed else set()
    for side, settings_before, settings_after in changed:
        own = [f for f in findings if _cluster_of(repo, by_file, f) == side.name]
        claimed.update(own)
        policy_job = next((job for job in jobs if job.path == side.policy), None)
        after = _object(side.after, str(side.policy))
        inp = ClusterInput(
            cluster=side.name,
            before=_object(side.before, f"{against}:{side.policy}"),
            after=after,
            settings_before=settings_before,
            settings_after=settings_after,
            snapshot=policy_job.snapshot if policy_job is not None
            else state.snapshot(side.name, []),
            findings=(*own, *config_errors),
            settings=_settings(config_now, side.name),
            promotion_earliest=_promotion_earliest(policy_job, payload_version(after)),
        )
        plans.append(plan_cluster(inp, now=now))
    return plans, [f for f in findings if f not in claimed]


def _settings(config: ConfigDocument, cluster: str) -> ClusterSettings:
    """The cluster's settings as the daemon would resolve the merged reconciler.yaml (refused:
    the defaults; its errors refuse the cluster's plan)."""
    try:
        return resolve(config, cluster, source=CONFIG_FILE)
    except SettingsRefused:
        return ClusterSettings()


def _cluster_of(repo: Repository, jobs: Mapping[str, Job], finding: Finding) -> str | None:
    job = jobs.get(finding.file)
    return job.cluster if job is not None else _only_cluster(repo, Path(finding.file))


def render(output_format: str, plans: Sequence[ClusterPlan], others: Sequence[Finding], *,
           against: str) -> str:
    if output_format == "json":
        text = json.dumps(render_json(plans, against=against, other_findings=others),
                          indent=2, ensure_ascii=False) + "\n"
        return printable_json(text)
    if output_format == "markdown":
        return render_markdown(plans, against=against, other_findings=others)
    return render_text(plans, against=against, other_findings=others)


@click.command("plan")
@click.argument("path", required=False, metavar="[PATH]", type=ExistingPath())
@click.option("--against", "against", required=True, metavar="REF",
              help="The branch the change merges into (e.g. origin/main): the policy, settings "
                   "and status snapshots there are the cluster's present.")
@click.option("--format", "output_format", type=click.Choice(["text", "markdown", "json"]),
              default="text", show_default=True,
              help="text for a terminal, markdown for a pull-request comment, json.")
def plan(path: Path | None, against: str, output_format: str) -> None:
    """What merging the working tree into REF does to each cluster: a rollout (steps, nodes,
    gates, predicted end), settings only, the firmware flow, a promotion hold, a refusal.

    PATH is the policy repository or a cluster folder in it (default: the current folder).
    Exit status: 0 no error, 1 errors found (refused or held), 2 usage error.
    """
    repo = find_repository(path or Path.cwd())
    try:
        plans, others = build_plans(repo, against, now=clock.wall(),
                                    only=_only_cluster(repo, path))
    except SchemasMissingError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.stdout.write(render(output_format, plans, others, against=against))
    errors = any(f.is_error for p in plans for f in p.findings) or any(
        f.is_error for f in others)
    sys.exit(1 if errors else 0)
