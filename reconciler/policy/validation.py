"""Validation in layers, the way the operator's admission webhook would see a policy file.

parse (YAML 1.2, located) -> schema (JSON Schema 2020-12) -> semantic rules
(docs/policy.md#the-fields and docs/gitops.md)
-> transition rules (docs/rollout.md#starting-a-rollout and docs/firmware.md, given the live spec
and phases) -> extra rules (a seam for the firmware preflight, which needs node facts).

The daemon calls :func:`validate_document` before applying; ``reconciler validate`` and
pull-request checks call the same function offline. ``reconciler.yaml`` is validated by its owner,
``reconciler.config.validation``, on the same parse and schema layers with the rules of each
section's package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from reconciler.files import MAX_FILE_BYTES
from reconciler.policy.document import ParsedDocument, parse_document
from reconciler.policy.findings import Finding, ValidationResult, sort_findings
from reconciler.policy.rules import RuleContext, semantic_rules
from reconciler.policy.schema import schema_findings
from reconciler.policy.transitions import previous_spec_of, transition_rules

#: the kinds of file a policy repository holds (each has its JSON Schema); ``repo-config``
#: (reconciler.yaml) is validated by ``reconciler.config.validation``
DocumentKind = Literal["clusteroperator", "repo-config", "status-snapshot"]
#: A rule beyond the built-in layers, e.g. the firmware preflight: context in, findings out.
PolicyRule = Callable[[RuleContext], Iterable[Finding]]


def validate_document(
    text: bytes | str,
    path: str,
    *,
    previous: Mapping[str, Any] | None = None,
    phase: str | None = None,
    firmware_phase: str | None = None,
    kind: Literal["clusteroperator", "status-snapshot"] = "clusteroperator",
    extra_rules: Sequence[PolicyRule] = (),
    max_bytes: int = MAX_FILE_BYTES,
    whole_object: bool = False,
) -> ValidationResult:
    """Validate one file's content. ``path`` only names the file in findings.

    ``previous`` is the object (or bare spec) the cluster runs; with ``phase`` (its
    ``status.upgradeStatus.phase``) and ``firmware_phase`` it enables the transition rules.
    ``obj`` of the result is plain dict/list data, set whenever the file parsed.
    ``whole_object``: the text is a whole stored object (the admission webhook's), not a policy
    applied over one, so a field the vendor's CRD requires is an error when missing, as the API
    server would refuse it (for a policy file it is one info finding).
    """
    doc = parse_document(text, path, max_bytes=max_bytes)
    result = ValidationResult(path, list(doc.findings), doc.obj)
    if doc.root is None or doc.obj is None:
        result.findings = sort_findings(result.findings)
        return result
    result.findings.extend(schema_findings(doc, kind, whole_object=whole_object))
    if kind == "clusteroperator":
        ctx = RuleContext(doc, previous_spec_of(previous), phase, firmware_phase)
        result.findings.extend(semantic_rules(ctx))
        result.findings.extend(transition_rules(ctx))
        for rule in extra_rules:
            result.findings.extend(rule(ctx))
    result.findings = settled(result.findings)
    return result


def settled(findings: Iterable[Finding]) -> list[Finding]:
    """Findings as every validation reports them: one per place, rule and message, in file
    order."""
    return sort_findings(_dedupe(list(findings)))


def validate_status_snapshot(text: bytes | str, path: str) -> ValidationResult:
    return validate_document(text, path, kind="status-snapshot")


def parse_only(text: bytes | str, path: str) -> ParsedDocument:
    """The parse layer alone (for callers that need locations of an already valid file)."""
    return parse_document(text, path)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[int, int, str, str]] = set()
    unique: list[Finding] = []
    for finding in findings:
        key = (finding.line, finding.column, finding.rule, finding.message)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique
