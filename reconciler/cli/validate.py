"""``reconciler validate``: the admission webhook's checks, offline, for editors, pre-commit and CI.

Exit status: 0 when every file is valid (warnings allowed), 1 when any error was found, 2 on a
usage error (unknown option, missing path, unknown git ref).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from reconciler.firmware.preflight import firmware_preflight_rule
from reconciler.policy.document import parse_document
from reconciler.policy.findings import Finding, ValidationResult, sort_findings
from reconciler.policy.repo_config import CONFIG_FILE, RepoConfig
from reconciler.policy.schema import SchemasMissingError, load_schema
from reconciler.policy.validation import DocumentKind, validate_document

#: Below this many files a worker pool costs more than it saves.
_PARALLEL_MIN_FILES = 64
_YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class Job:
    """One file to validate, with the live state its transition rules compare against."""

    path: Path
    shown: str
    kind: DocumentKind
    cluster: str | None = None
    previous: Mapping[str, Any] | None = None
    phase: str | None = None
    firmware_phase: str | None = None
    #: the cluster's last status snapshot (facts for the firmware preflight), if known
    snapshot: Mapping[str, Any] | None = None


@dataclass(slots=True)
class Repository:
    root: Path
    config: RepoConfig
    config_result: ValidationResult | None

    def relative(self, path: Path) -> Path | None:
        try:
            return path.resolve().relative_to(self.root)
        except ValueError:
            return None

    def kind_of(self, path: Path) -> DocumentKind:
        rel = self.relative(path)
        if rel is None:
            return "clusteroperator"
        if rel == Path(CONFIG_FILE):
            return "repo-config"
        if rel.parts[: len(Path(self.config.status_path).parts)] == Path(
                self.config.status_path).parts:
            return "status-snapshot"
        return "clusteroperator"

    def cluster_of(self, path: Path) -> str | None:
        rel = self.relative(path)
        prefix = Path(self.config.clusters_dir).parts
        if rel is None or rel.parts[: len(prefix)] != prefix or len(rel.parts) < len(prefix) + 2:
            return None
        return rel.parts[len(prefix)]

    def cluster_files(self) -> list[Path]:
        clusters = self.root / self.config.clusters_dir
        if not clusters.is_dir():
            return []
        return sorted(
            p for p in clusters.glob("*/*") if p.suffix in _YAML_SUFFIXES and p.is_file()
        )


def find_repository(start: Path) -> Repository:
    """The policy repository around ``start``: the nearest folder with reconciler.yaml, else the
    enclosing git work tree, else ``start`` itself; with its config (defaults if absent)."""
    start = start.resolve()
    if start.is_file():
        start = start.parent
    root: Path | None = None
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            root = folder
            break
        if (folder / ".git").exists():
            root = folder
            break
    root = root or start
    config_path = root / CONFIG_FILE
    if not config_path.is_file():
        return Repository(root, RepoConfig(), None)
    result = validate_document(config_path.read_bytes(), _shown(config_path), kind="repo-config")
    config = RepoConfig.from_obj(result.obj) if result.ok else RepoConfig()
    return Repository(root, config, result)


def _shown(path: Path) -> str:
    """A path as a compiler shows it: relative to the current folder when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def collect_files(repo: Repository, paths: Sequence[Path]) -> list[Path]:
    if not paths:
        return _repository_files(repo)
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            if path.resolve() == repo.root and (repo.root / repo.config.clusters_dir).is_dir():
                files.extend(_repository_files(repo))
                continue
            for current, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files.extend(Path(current) / n for n in sorted(names)
                             if n.endswith(_YAML_SUFFIXES) and not n.startswith("."))
        else:
            files.append(path)
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(file.resolve(), file)
    return list(unique.values())


def _repository_files(repo: Repository) -> list[Path]:
    config = repo.root / CONFIG_FILE
    return ([config] if config.is_file() else []) + repo.cluster_files()


# -- --against: the previous spec from a git ref, the phase from the status snapshot ---------

class GitState:
    """Reads files at a git ref (GitPython, imported only when --against is used)."""

    def __init__(self, repo: Repository, ref: str) -> None:
        import git

        try:
            self.git = git.Repo(repo.root, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise click.UsageError(f"--against needs a git repository; {repo.root} is not in one")\
                from exc
        self.top = Path(self.git.working_tree_dir or repo.root).resolve()
        self.repo = repo
        self.ref = ref
        try:
            self.commit = self.git.commit(ref)
        except (git.BadName, ValueError, git.GitCommandError) as exc:
            raise click.UsageError(f"--against: unknown git ref '{ref}'") from exc

    def read(self, path: Path, ref: str | None = None) -> bytes | None:
        import git

        try:
            commit = self.commit if ref is None else self.git.commit(ref)
            rel = path.resolve().relative_to(self.top).as_posix()
            blob = commit.tree / rel
            data: bytes = blob.data_stream.read()
            return data
        except (KeyError, ValueError, git.BadName, git.GitCommandError):
            return None

    def snapshot(self, cluster: str) -> Mapping[str, Any] | None:
        """The cluster's last status snapshot: on the status branch when one is configured (the
        remote-tracking one next to the ref first), else at the ref; else the working tree's."""
        path = self.repo.root / self.repo.config.status_file(cluster)
        refs: list[str | None] = [None]
        branch = self.repo.config.status_branch
        if branch:
            remote = self.ref.split("/", 1)[0] if "/" in self.ref else None
            refs = [*([f"{remote}/{branch}"] if remote else []), branch, None]
        data = None
        for ref in refs:
            data = self.read(path, ref)
            if data is not None:
                break
        if data is None and path.is_file():
            data = path.read_bytes()
        if data is None:
            return None
        doc = parse_document(data, str(path))
        return doc.obj if isinstance(doc.obj, dict) else None

    def previous_object(self, path: Path) -> dict[str, Any] | None:
        data = self.read(path)
        if data is None:
            return None  # a new file: no transition to check
        doc = parse_document(data, str(path))
        return doc.obj if isinstance(doc.obj, dict) else None


def live_spec(previous: Mapping[str, Any] | None, snapshot: Mapping[str, Any] | None
              ) -> Mapping[str, Any] | None:
    """The spec the cluster runs: the file at the ref, with the payload and upgradePolicy the
    snapshot reports (they include the rollout controller's own changes, SPEC 4.6)."""
    spec = dict(previous.get("spec") or {}) if isinstance(previous, Mapping) else None
    live = snapshot.get("spec") if isinstance(snapshot, Mapping) else None
    live_driver = live.get("driver") if isinstance(live, Mapping) else None
    if not isinstance(live_driver, Mapping):
        return spec
    spec = spec if spec is not None else {}
    driver = dict(spec.get("driver") or {})
    for name in ("payload", "upgradePolicy"):
        if isinstance(live_driver.get(name), Mapping):
            driver[name] = live_driver[name]
    spec["driver"] = driver
    return spec


def _phases(snapshot: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    if not isinstance(snapshot, Mapping):
        return None, None
    upgrade = snapshot.get("upgradeStatus")
    firmware = snapshot.get("firmware")
    phase = upgrade.get("phase") if isinstance(upgrade, Mapping) else None
    fw_phase = firmware.get("phase") if isinstance(firmware, Mapping) else None
    return (phase if isinstance(phase, str) else None,
            fw_phase if isinstance(fw_phase, str) else None)


def plan_jobs(repo: Repository, files: Sequence[Path], against: str | None) -> list[Job]:
    state = GitState(repo, against) if against else None
    snapshots: dict[str, Mapping[str, Any] | None] = {}
    jobs: list[Job] = []
    for path in files:
        kind = repo.kind_of(path)
        cluster = repo.cluster_of(path) if kind == "clusteroperator" else None
        job = Job(path, _shown(path), kind, cluster)
        if state is not None and kind == "clusteroperator":
            snapshot = None
            if cluster is not None:
                if cluster not in snapshots:
                    snapshots[cluster] = state.snapshot(cluster)
                snapshot = snapshots[cluster]
            phase, fw_phase = _phases(snapshot)
            previous = live_spec(state.previous_object(path), snapshot)
            job = Job(path, job.shown, kind, cluster, previous, phase, fw_phase, snapshot)
        jobs.append(job)
    return jobs


# -- running ---------------------------------------------------------------------------------

def run_job(job: Job) -> ValidationResult:
    try:
        data = job.path.read_bytes()
    except OSError as exc:
        return ValidationResult(job.shown, [Finding(
            job.shown, 1, 1, "", "unreadable-file", "error",
            f"cannot read the file: {exc.strerror or exc}",
        )])
    extra_rules = [firmware_preflight_rule(job.snapshot)] if job.snapshot is not None else []
    return validate_document(
        data, job.shown, previous=job.previous, phase=job.phase,
        firmware_phase=job.firmware_phase, kind=job.kind, extra_rules=extra_rules,
    )


def worker_count() -> int:
    """Worker processes: ``RECONCILER_JOBS`` if set (1 = in this process), else every core."""
    configured = os.environ.get("RECONCILER_JOBS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return min(os.cpu_count() or 1, 8)


def run_jobs(jobs: Sequence[Job]) -> list[ValidationResult]:
    """Validate every file, on all cores when there are many (the validators are built before
    forking, so workers start warm)."""
    workers = worker_count()
    if len(jobs) < _PARALLEL_MIN_FILES or workers < 2 or "fork" not in \
            multiprocessing.get_all_start_methods():
        return [run_job(job) for job in jobs]
    from reconciler.policy.schema import validator

    for kind in {job.kind for job in jobs}:
        validator(kind)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        light = pool.map(_run_job_light, jobs, chunksize=max(1, len(jobs) // (workers * 4)))
    return [ValidationResult(job.shown, findings, {"kind": kind} if kind else None)
            for job, (findings, kind) in zip(jobs, light, strict=True)]


def _run_job_light(job: Job) -> tuple[list[Finding], str | None]:
    """run_job for a worker: the parsed object stays in the worker (only its kind is needed)."""
    result = run_job(job)
    kind = result.obj.get("kind") if isinstance(result.obj, dict) else None
    return result.findings, kind if isinstance(kind, str) else None


def duplicate_objects(
    jobs: Sequence[Job], results: Sequence[ValidationResult]
) -> Iterator[Finding]:
    """One ClusterOperator per cluster folder: two would fight over the same object."""
    first: dict[str, str] = {}
    for job, result in zip(jobs, results, strict=True):
        if job.cluster is None or job.kind != "clusteroperator" or not isinstance(result.obj, dict):
            continue
        if result.obj.get("kind") != "ClusterOperator":
            continue
        if job.cluster in first:
            doc = parse_document(job.path.read_bytes(), job.shown)
            loc = doc.locate("/kind")
            yield Finding(
                job.shown, loc.line, loc.column, "/kind", "duplicate-object", "error",
                f"cluster '{job.cluster}' already has a ClusterOperator in {first[job.cluster]}; "
                "keep one policy file per cluster folder",
            )
        else:
            first[job.cluster] = job.shown


# -- output ------------------------------------------------------------------------------------

def format_text(findings: Iterable[Finding]) -> str:
    return "".join(
        f"{f.file}:{f.line}:{f.column}: {f.severity}: {f.message} [{f.rule}]\n" for f in findings
    )


def format_json(findings: Iterable[Finding]) -> str:
    return json.dumps([f.as_dict() for f in findings], indent=2, ensure_ascii=False) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(findings: Iterable[Finding]) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the PR's diff."""
    return "".join(
        f"::{f.severity} file={_escape_property(f.file)},line={f.line},col={f.column},"
        f"title={_escape_property(f.rule)}::{_escape_data(f.message)}\n"
        for f in findings
    )


FORMATTERS = {"text": format_text, "json": format_json, "github": format_github}


@click.command("validate")
@click.argument("paths", nargs=-1, metavar="[PATH]...",
                type=click.Path(exists=True, path_type=Path))
@click.option("--against", "against", metavar="GIT_REF",
              help="Check transition rules: previous spec from this ref, rollout phase from the "
                   "cluster's status snapshot.")
@click.option("--format", "output_format", type=click.Choice(list(FORMATTERS)), default="text",
              show_default=True, help="text (like a compiler), json, or github annotations.")
def validate(paths: tuple[Path, ...], against: str | None, output_format: str) -> None:
    """Validate policy files the way the operator's admission webhook would.

    PATH is a file or folder (default: the repository's reconciler.yaml and cluster folders).
    Exit status: 0 valid, 1 errors found, 2 usage error.
    """
    repo = find_repository(paths[0] if paths else Path.cwd())
    files = collect_files(repo, list(paths))
    if not files:
        where = ", ".join(map(str, paths)) or str(repo.root / repo.config.clusters_dir)
        raise click.UsageError(f"no policy files (*.yaml, *.yml) found in {where}")
    jobs = plan_jobs(repo, files, against)
    try:
        for kind in {job.kind for job in jobs}:
            load_schema(kind)
    except SchemasMissingError as exc:
        raise click.ClickException(str(exc)) from exc
    results = run_jobs(jobs)
    findings = [f for r in results for f in r.findings]
    findings.extend(duplicate_objects(jobs, results))
    findings = sort_findings(findings)
    sys.stdout.write(FORMATTERS[output_format](findings))
    errors = sum(f.is_error for f in findings)
    warnings = len(findings) - errors
    if output_format == "text":
        if findings:
            click.echo(f"{errors} error(s), {warnings} warning(s) in {len(files)} file(s)",
                       err=True)
        else:
            click.echo(f"{len(files)} file(s) valid", err=True)
    sys.exit(1 if errors else 0)
