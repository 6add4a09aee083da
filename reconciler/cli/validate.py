"""``reconciler validate``: the admission webhook's checks, offline, for editors, pre-commit and CI.

Exit status: 0 when every file is valid (warnings and infos allowed), 1 when any error was found,
2 on a usage error (unknown option, missing path, unknown git ref).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import click

from reconciler.cli.report_formats import (
    RepositoryPaths,
    format_gitlab,
    format_sarif,
    printable_json,
)
from reconciler.config.document import CONFIG_FILE, ConfigDocument, load
from reconciler.config.sync import SyncSettings
from reconciler.config.validation import validate_repo_config
from reconciler.errors import RepoConfigError
from reconciler.files import FileRefused, link_refusal, printable, read_bounded
from reconciler.firmware.preflight import firmware_preflight_rule
from reconciler.fleet.promotion import promotion_rule
from reconciler.policy.document import Location, parse_document
from reconciler.policy.findings import Finding, ValidationResult, sort_findings
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
    #: found before reading: a symbolic link on the way to the file (not followed)
    refused: FileRefused | None = None
    #: findings about the job's inputs (its cluster's status snapshot cannot be read)
    notes: tuple[Finding, ...] = ()
    #: repo-config: the repository's cluster folders (the known upstreams of promotion.after)
    known_clusters: tuple[str, ...] | None = None
    #: repo-config: the ``origin`` remote's URL, the host ``forge.url`` must be on
    remote: str | None = None
    #: --against with clusters.<cluster>.promotion: (upstream, soak seconds, the upstream's
    #: snapshot at the ref, now) for the promotion gate
    promotion: tuple[str, float, Mapping[str, Any] | None, float] | None = None


def _lexical(path: Path) -> Path:
    """``path`` made absolute without resolving links: what the repository holds at that place
    (resolving would validate a link's target instead of the link)."""
    return Path(os.path.abspath(path))


@dataclass(slots=True)
class Repository:
    root: Path
    #: its reconciler.yaml (the defaults when absent or not valid: validating it says why)
    config: ConfigDocument = field(default_factory=ConfigDocument)
    #: where its cluster folders and status snapshots are
    layout: SyncSettings = field(default_factory=SyncSettings)

    def relative(self, path: Path) -> Path | None:
        try:
            return _lexical(path).relative_to(self.root)
        except ValueError:
            return None

    def kind_of(self, path: Path) -> DocumentKind:
        rel = self.relative(path)
        if rel is None:
            return "clusteroperator"
        if rel == Path(CONFIG_FILE):
            return "repo-config"
        if rel.parts[: len(Path(self.layout.status_path).parts)] == Path(
                self.layout.status_path).parts:
            return "status-snapshot"
        return "clusteroperator"

    def cluster_of(self, path: Path) -> str | None:
        rel = self.relative(path)
        prefix = Path(self.layout.clusters_dir).parts
        if rel is None or rel.parts[: len(prefix)] != prefix or len(rel.parts) < len(prefix) + 2:
            return None
        return rel.parts[len(prefix)]

    def cluster_names(self) -> tuple[str, ...]:
        """The cluster folders (links included: the daemon refuses them, but they name a
        cluster)."""
        clusters = self.root / self.layout.clusters_dir
        if clusters.is_symlink() or not clusters.is_dir():
            return ()
        return tuple(sorted(entry.name for entry in clusters.iterdir()
                            if not entry.name.startswith(".")
                            and (entry.is_dir() or entry.is_symlink())))

    def link_above(self, path: Path) -> FileRefused | None:
        """A symbolic link among the folders between the root and ``path`` (the daemon sees
        such a folder as a link in the commit, not as a folder)."""
        rel = self.relative(path)
        if rel is None:
            return None
        folder = self.root
        for part in rel.parts[:-1]:
            folder = folder / part
            if folder.is_symlink():
                return link_refusal(_shown(folder), _readlink(folder))
        return None

    def cluster_files(self) -> tuple[list[Path], list[Finding]]:
        """Every entry a cluster folder's policy could be (links and FIFOs too: reading refuses
        them, located), and a finding for each cluster folder without a policy file."""
        clusters = self.root / self.layout.clusters_dir
        if clusters.is_symlink():
            return [clusters], []
        if not clusters.is_dir():
            return [], []
        files: list[Path] = []
        missing: list[Finding] = []
        for folder in sorted(clusters.iterdir()):
            if folder.name.startswith("."):
                continue
            if folder.is_symlink():
                files.append(folder)
                continue
            if not folder.is_dir():
                continue
            found = sorted(p for p in folder.iterdir() if p.name.endswith(_YAML_SUFFIXES))
            if not found:
                shown = _shown(folder)
                missing.append(Finding(
                    shown, 1, 1, "", "no-policy", "error",
                    f"cluster folder '{folder.name}' holds no policy file (*.yaml, *.yml): the "
                    "reconciler would apply nothing there; add its ClusterOperator or remove "
                    "the folder",
                ))
            files.extend(found)
        return files, missing


def _readlink(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def find_repository(start: Path) -> Repository:
    """The policy repository around ``start``: the nearest folder with reconciler.yaml, else the
    enclosing git work tree, else ``start`` itself; with its config (defaults if absent or
    unusable: validating reconciler.yaml reports why)."""
    start = _lexical(start)
    if not start.is_dir() or start.is_symlink():
        start = start.parent
    root: Path | None = None
    for folder in (start, *start.parents):
        if os.path.lexists(folder / CONFIG_FILE) or os.path.lexists(folder / ".git"):
            root = folder
            break
    root = root or start
    config_path = root / CONFIG_FILE
    if not os.path.lexists(config_path):
        return Repository(root)
    try:
        data = read_bounded(config_path)
    except FileRefused:
        return Repository(root)
    config = load(data, _shown(config_path))
    if config.errors or config.refused is not None:
        return Repository(root)
    try:
        return Repository(root, config, SyncSettings.from_obj(config.obj))
    except RepoConfigError:
        return Repository(root)


def _shown(path: Path) -> str:
    """A path as a compiler shows it: relative to the current folder when below it."""
    try:
        return str(_lexical(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def collect_files(repo: Repository, paths: Sequence[Path]) -> tuple[list[Path], list[Finding]]:
    """The files to validate and the findings of the walk itself (cluster folders without a
    policy). A symbolic link or a FIFO among them is kept: reading it refuses it, located;
    folders are walked without following links."""
    if not paths:
        return _repository_files(repo)
    files: list[Path] = []
    findings: list[Finding] = []
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            if _lexical(path) == repo.root and (repo.root / repo.layout.clusters_dir).is_dir():
                more, missing = _repository_files(repo)
                files.extend(more)
                findings.extend(missing)
                continue
            for current, dirs, names in os.walk(path):
                here = Path(current)
                links = sorted(d for d in dirs if (here / d).is_symlink())
                files.extend(here / d for d in links if not d.startswith("."))
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in links)
                files.extend(here / n for n in sorted(names)
                             if n.endswith(_YAML_SUFFIXES) and not n.startswith("."))
        else:
            files.append(path)
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(_lexical(file), file)
    return list(unique.values()), findings


def _repository_files(repo: Repository) -> tuple[list[Path], list[Finding]]:
    config = repo.root / CONFIG_FILE
    files, missing = repo.cluster_files()
    return ([config] if os.path.lexists(config) else []) + files, missing


# -- --against: the previous spec from a git ref, the phase from the status snapshot ---------

def _origin(repo: Repository) -> str | None:
    """``origin``'s URL, read only when reconciler.yaml names a forge URL (gitpython is
    imported then, not for every validate)."""
    try:
        if b"forge" not in read_bounded(repo.root / CONFIG_FILE):
            return None
    except (FileRefused, OSError):
        return None
    from reconciler.gitops.ref_reader import origin_url

    return origin_url(repo.root)


class GitState:
    """Reads files at a git ref (``gitops.ref_reader``, imported only when --against is used)."""

    def __init__(self, repo: Repository, ref: str) -> None:
        from reconciler.gitops.ref_reader import NotARepository, RefReader, UnknownRef

        try:
            self.reader = RefReader(repo.root, ref)
        except NotARepository as exc:
            raise click.UsageError(f"--against needs a git repository; {repo.root} is not in one")\
                from exc
        except UnknownRef as exc:
            raise click.UsageError(f"--against: unknown git ref '{ref}'") from exc
        self.repo = repo
        self.ref = ref

    def read(self, path: Path, ref: str | None = None) -> bytes | None:
        """The file at the ref as the daemon reads it (a link or an oversized blob raises
        FileRefused), None when the ref has no file there."""
        rel = self.repo.relative(path)
        if rel is None:
            return None
        return self.reader.read(PurePosixPath(rel.as_posix()), ref)

    def snapshot(self, cluster: str, notes: list[Finding], *, working_tree: bool = True
                 ) -> Mapping[str, Any] | None:
        """The cluster's last status snapshot: on the status branch when one is configured (the
        remote-tracking one next to the ref first), else at the ref; else (``working_tree``)
        the working tree's. One that cannot be read adds a finding to ``notes``."""
        path = self.repo.root / self.repo.layout.status_file(cluster)
        refs: list[str | None] = [None]
        branch = self.repo.layout.status_branch
        if branch:
            remote = self.ref.split("/", 1)[0] if "/" in self.ref else None
            refs = [*([f"{remote}/{branch}"] if remote else []), branch, None]
        data = None
        try:
            for ref in refs:
                data = self.read(path, ref)
                if data is not None:
                    break
            if data is None and working_tree and os.path.lexists(path):
                data = read_bounded(path)
        except FileRefused as refused:
            notes.append(_refused_finding(refused, _shown(path)))
            return None
        if data is None:
            return None
        doc = parse_document(data, str(path))
        return doc.obj if isinstance(doc.obj, dict) else None

    def previous_object(self, path: Path, notes: list[Finding]) -> dict[str, Any] | None:
        try:
            data = self.read(path)
        except FileRefused as refused:
            notes.append(_refused_finding(refused, f"{self.ref}:{_shown(path)}"))
            return None
        if data is None:
            return None  # a new file: no transition to check
        doc = parse_document(data, str(path))
        return doc.obj if isinstance(doc.obj, dict) else None


def live_spec(previous: Mapping[str, Any] | None, snapshot: Mapping[str, Any] | None
              ) -> Mapping[str, Any] | None:
    """The spec the cluster runs: the file at the ref, with the payload and upgradePolicy the
    snapshot reports (they include the rollout controller's own changes,
    docs/gitops.md#git-stays-the-truth)."""
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
    snapshots: dict[str, tuple[Mapping[str, Any] | None, tuple[Finding, ...]]] = {}
    jobs: list[Job] = []
    for path in files:
        kind = repo.kind_of(path)
        cluster = repo.cluster_of(path) if kind == "clusteroperator" else None
        job = Job(path, _shown(path), kind, cluster, refused=repo.link_above(path),
                  known_clusters=repo.cluster_names() if kind == "repo-config" else None,
                  remote=_origin(repo) if kind == "repo-config" else None)
        if state is not None and kind == "clusteroperator":
            snapshot = None
            notes: list[Finding] = []
            if cluster is not None:
                if cluster not in snapshots:
                    found: list[Finding] = []
                    snapshots[cluster] = (state.snapshot(cluster, found), tuple(found))
                snapshot, cluster_notes = snapshots[cluster]
                notes.extend(cluster_notes)
            phase, fw_phase = _phases(snapshot)
            previous = live_spec(state.previous_object(path, notes), snapshot)
            job = Job(path, job.shown, kind, cluster, previous, phase, fw_phase, snapshot,
                      job.refused, tuple(notes),
                      promotion=_promotion(repo, state, cluster, notes, snapshots))
        jobs.append(job)
    return jobs


def _promotion(repo: Repository, state: GitState, cluster: str | None, notes: list[Finding],
               snapshots: dict[str, tuple[Mapping[str, Any] | None, tuple[Finding, ...]]]
               ) -> tuple[str, float, Mapping[str, Any] | None, float] | None:
    """The promotion gate's inputs for ``cluster``: its ``promotion`` section (the working
    tree's reconciler.yaml: what the merge brings) and the upstream's snapshot at the ref
    (never the working tree's: a pull request cannot vouch for its own upstream)."""
    if cluster is None:
        return None
    from reconciler import clock
    from reconciler.config.settings import SettingsRefused, resolve

    try:
        promotion = resolve(repo.config, cluster, source=CONFIG_FILE).promotion
    except SettingsRefused:
        return None  # validating reconciler.yaml reports it
    if promotion is None:
        return None  # none, or one validating reconciler.yaml reports
    key = f"promotion:{promotion.after}"
    if key not in snapshots:
        found: list[Finding] = []
        snapshots[key] = (state.snapshot(promotion.after, found, working_tree=False),
                          tuple(found))
    upstream, upstream_notes = snapshots[key]
    notes.extend(upstream_notes)
    return promotion.after, promotion.soak, upstream, clock.wall()


# -- running ---------------------------------------------------------------------------------

def _refused_finding(refused: FileRefused, shown: str) -> Finding:
    return Finding(shown, 1, 1, "", refused.problem, "error", refused.reason)


def run_job(job: Job) -> ValidationResult:
    if job.refused is not None:
        return ValidationResult(job.shown, [_refused_finding(job.refused, job.refused.path),
                                            *job.notes])
    try:
        data = read_bounded(job.path)
    except FileRefused as refused:
        return ValidationResult(job.shown, [_refused_finding(refused, job.shown), *job.notes])
    extra_rules = [firmware_preflight_rule(job.snapshot)] if job.snapshot is not None else []
    if job.promotion is not None:
        upstream, soak, upstream_snapshot, now = job.promotion
        extra_rules.append(promotion_rule(upstream, upstream_snapshot, soak=soak, now=now))
    if job.kind == "repo-config":
        result = validate_repo_config(data, job.shown, known_clusters=job.known_clusters,
                                      remote=job.remote)
    else:
        result = validate_document(
            data, job.shown, previous=job.previous, phase=job.phase,
            firmware_phase=job.firmware_phase, kind=job.kind, extra_rules=extra_rules,
        )
    if job.notes:
        result.findings.extend(job.notes)
    return result


#: More workers than this only add forking: validation is CPU-bound.
MAX_JOBS = 64


def worker_count() -> int:
    """Worker processes: ``RECONCILER_JOBS`` if set (1 = in this process, at most 64), else
    every core (at most 8); any other value is a usage error."""
    configured = os.environ.get("RECONCILER_JOBS", "").strip()
    if not configured:
        return min(os.cpu_count() or 1, 8)
    if not (configured.isascii() and configured.isdigit()
            and 1 <= int(configured[:4]) <= MAX_JOBS and len(configured) <= 4):
        raise click.UsageError(
            f"RECONCILER_JOBS must be a number of processes from 1 to {MAX_JOBS}, "
            f"got '{printable(configured[:40])}'")
    return int(configured)


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
            try:
                loc = parse_document(read_bounded(job.path), job.shown).locate("/kind")
            except FileRefused:
                loc = Location(1, 1)
            yield Finding(
                job.shown, loc.line, loc.column, "/kind", "duplicate-object", "error",
                f"cluster '{job.cluster}' already has a ClusterOperator in {first[job.cluster]}; "
                "keep one policy file per cluster folder",
            )
        else:
            first[job.cluster] = job.shown


# -- output ------------------------------------------------------------------------------------

def format_text(findings: Iterable[Finding]) -> str:
    """One line per finding; control characters of file names and content are escaped."""
    return "".join(
        f"{printable(f.file)}:{f.line}:{f.column}: {f.severity}: {printable(f.message)} "
        f"[{printable(f.rule)}]\n" for f in findings
    )


def format_json(findings: Iterable[Finding]) -> str:
    text = json.dumps([f.as_dict() for f in findings], indent=2, ensure_ascii=False) + "\n"
    return printable_json(text)


def _escape_data(text: str) -> str:
    """A workflow command's message: visible escapes for control characters (ESC would reach
    the log raw), then GitHub's own escapes."""
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


#: GitHub's workflow command per severity (it has no ``info``: ``notice`` is its word)
GITHUB_COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def format_github(findings: Iterable[Finding]) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the PR's diff."""
    return "".join(
        f"::{GITHUB_COMMANDS[f.severity]} file={_escape_property(f.file)},line={f.line},"
        f"col={f.column},"
        f"title={_escape_property(f.rule)}::{_escape_data(f.message)}\n"
        for f in findings
    )


class ExistingPath(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A path that exists as a directory entry: a link (even a dangling one) or a FIFO is taken
    as given, so validating it reports what it is instead of following it."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Path:
        path = Path(value)
        if not os.path.lexists(path):
            self.fail(f"'{printable(str(value))}' does not exist", param, ctx)
        return path


FORMATTERS = {"text": format_text, "json": format_json, "github": format_github}
#: Reports for code-review tools: their paths are relative to the repository root.
REPORTS = {"sarif": format_sarif, "gitlab": format_gitlab}


@click.command("validate")
@click.argument("paths", nargs=-1, metavar="[PATH]...", type=ExistingPath())
@click.option("--against", "against", metavar="GIT_REF",
              help="Check transition rules: previous spec from this ref, rollout phase from the "
                   "cluster's status snapshot; and the promotion gate: the upstream's status "
                   "snapshot at this ref.")
@click.option("--format", "output_format", type=click.Choice([*FORMATTERS, *REPORTS]),
              default="text", show_default=True,
              help="text (like a compiler), json, github annotations, sarif (SARIF 2.1.0 for "
                   "code scanning) or gitlab (a Code Quality report).")
def validate(paths: tuple[Path, ...], against: str | None, output_format: str) -> None:
    """Validate policy files the way the operator's admission webhook would.

    PATH is a file or folder (default: the repository's reconciler.yaml and cluster folders).
    Exit status: 0 valid, 1 errors found, 2 usage error.
    """
    repo = find_repository(paths[0] if paths else Path.cwd())
    files, walk_findings = collect_files(repo, list(paths))
    if not files and not walk_findings:
        where = ", ".join(map(str, paths)) or str(repo.root / repo.layout.clusters_dir)
        raise click.UsageError(f"no policy files (*.yaml, *.yml) found in {printable(where)}")
    jobs = plan_jobs(repo, files, against)
    try:
        for kind in {job.kind for job in jobs}:
            load_schema(kind)
    except SchemasMissingError as exc:
        raise click.ClickException(str(exc)) from exc
    results = run_jobs(jobs)
    findings = [f for r in results for f in r.findings]
    findings.extend(duplicate_objects(jobs, results))
    findings.extend(walk_findings)
    findings = sort_findings(findings)
    if output_format in REPORTS:
        places = RepositoryPaths(repo.root, _lexical(Path.cwd()), against)
        sys.stdout.write(REPORTS[output_format](findings, places.relative))
    else:
        sys.stdout.write(FORMATTERS[output_format](findings))
    errors = sum(f.is_error for f in findings)
    warnings = sum(f.is_warning for f in findings)
    infos = sum(f.is_info for f in findings)
    if output_format == "text":
        noted = f", {infos} info(s)" if infos else ""
        if errors or warnings:
            click.echo(f"{errors} error(s), {warnings} warning(s){noted} in {len(files)} "
                       "file(s)", err=True)
        else:
            click.echo(f"{len(files)} file(s) valid{noted}", err=True)
    sys.exit(1 if errors else 0)
