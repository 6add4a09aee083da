"""``reconciler.yaml`` validated the way ``reconciler validate`` reports it: the parse layer, the
JSON Schema (``schemas/repo-config.schema.json``), then the rules of each section, from the
package that owns the section's type: ``health`` (``reconciler.health.rules``), ``windows`` and
``promotion`` (``reconciler.fleet.rules``), ``rollout`` and ``firmware.nodeLabels``
(``reconciler.policy.rollout_rules``), the URLs of ``forge`` and ``notify``
(``reconciler.policy.url_rules``), ``notify`` (``reconciler.policy.notify_rules``). Pure.

``reconciler.config.document.load`` runs it once per file; everything that reads the file's
settings reads the findings kept there.
"""

from __future__ import annotations

from collections.abc import Collection

from reconciler.files import MAX_FILE_BYTES
from reconciler.fleet.rules import fleet_rules
from reconciler.health.rules import health_rules
from reconciler.policy.document import ParsedDocument, parse_document
from reconciler.policy.findings import Finding, ValidationResult, sort_findings
from reconciler.policy.notify_rules import notify_rules
from reconciler.policy.rollout_rules import rollout_rules
from reconciler.policy.schema import schema_findings
from reconciler.policy.url_rules import url_rules
from reconciler.policy.validation import settled


def is_empty(doc: ParsedDocument) -> bool:
    """An empty file (or one of comments only): every setting at its default."""
    return [f.rule for f in doc.findings] == ["empty-document"]


def checked(doc: ParsedDocument, *, known_clusters: Collection[str] | None = None,
            remote: str | None = None) -> list[Finding]:
    """Every finding of a parsed file, in file order: the parse layer's, the schema's and the
    sections' rules (these only when the text parsed). ``known_clusters``: the repository's
    cluster folders, for ``promotion.after`` and ``clusters.<name>`` (None: not known).
    ``remote``: the repository's remote URL, the host ``forge.url`` must be on."""
    if is_empty(doc):
        return []
    if doc.root is None or doc.obj is None:
        return sort_findings(doc.findings)
    return settled([
        *doc.findings,
        *schema_findings(doc, "repo-config"),
        *health_rules(doc),
        *fleet_rules(doc, known_clusters),
        *rollout_rules(doc),
        *url_rules(doc, remote),
        *notify_rules(doc),
    ])


def validate_repo_config(text: bytes | str, path: str, *,
                         known_clusters: Collection[str] | None = None,
                         remote: str | None = None,
                         max_bytes: int = MAX_FILE_BYTES) -> ValidationResult:
    """``reconciler validate``'s result for one ``reconciler.yaml`` (``path`` names it in the
    findings); an empty file is valid, its ``obj`` ``{}``."""
    doc = parse_document(text, path, max_bytes=max_bytes)
    findings = checked(doc, known_clusters=known_clusters, remote=remote)
    return ValidationResult(path, findings, {} if is_empty(doc) else doc.obj)
