"""Topology-aware waves (docs/rollout.md#topology-aware-waves): the rollout order over the domains
of a node label, the ``sequential`` gate and the per-domain budget of fresh starts. Pure.

``rollout.topology`` is frozen in ``upgradeStatus.topology`` when a rollout starts (``frozen``)
and read back from there for the rest of it (``read``): a change of the setting mid-rollout
waits for the next rollout, and a rollout that started without topology stays without.

Domains are the distinct values of the key's label among the rollout nodes; nodes without the
label form one domain (``None``), last. Domains holding canary nodes come first (canary nodes go
first under both orders, the unlabelled domain too when it holds one), then by value as strings.
``sequential``: domain by domain, within a domain canaries first, then by name. ``spread``: the
domains in turn (round robin), canaries first: the i-th node of every domain before the
(i+1)-th of any, so every wave touches every domain alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from reconciler.names import CANARY_LABEL
from reconciler.policy.quantity import parse_quantity
from reconciler.policy.rollout_settings import TopologySettings
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.scan import DomainCount

#: the name a status message gives the domain of the nodes without the label
UNLABELLED = "(no label)"


def frozen(settings: TopologySettings | None) -> dict[str, Any]:
    """``upgradeStatus.topology`` for a rollout starting with ``settings`` (``{}``: none)."""
    if settings is None:
        return {}
    result: dict[str, Any] = {"key": settings.key, "order": settings.order}
    limit = settings.max_unavailable_per_domain
    if limit is not None:
        result["maxUnavailablePerDomain"] = str(limit) if limit.percent else limit.value
    return result


def read(raw: Mapping[str, Any]) -> TopologySettings | None:
    """The topology a rollout started with, from ``upgradeStatus.topology``; None: none (or a
    record nobody could have written: the rollout goes on without topology)."""
    key = raw.get("key")
    order = raw.get("order", "sequential")
    if not isinstance(key, str) or not key or order not in ("sequential", "spread"):
        return None
    limit = raw.get("maxUnavailablePerDomain")
    try:
        quantity = None if limit is None else parse_quantity(limit)
    except ValueError:
        quantity = None
    if quantity is not None and quantity.value < 1:
        quantity = None
    return TopologySettings(key=key, order=order, max_unavailable_per_domain=quantity)


def domain_name(domain: str | None) -> str:
    return UNLABELLED if domain is None else domain


@dataclass(slots=True)
class Topology:
    """One pass's topology: the rollout order of every node, and (progressing) each domain's
    counts from the scan, which the gate and the budget read."""

    settings: TopologySettings
    #: node name -> its place in the rollout order
    positions: dict[str, int]
    #: domain -> its place in the domain order
    rank: dict[str | None, int]
    #: the scan's counts per domain (empty in a rollback: order only)
    counts: Mapping[str | None, DomainCount] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: TopologySettings, nodes: Iterable[RolloutNode],
           counts: Mapping[str | None, DomainCount] | None = None) -> Topology:
        """The order of ``nodes`` (built in C-speed steps: it runs once per pass over the
        fleet)."""
        key = settings.key
        canaries: dict[str | None, list[str]] = {}
        others: dict[str | None, list[str]] = {}
        for node in nodes:
            labels = node.labels
            group = canaries if labels and labels.get(CANARY_LABEL) == "true" else others
            domain = labels.get(key) if labels else None
            names = group.get(domain)
            if names is None:
                group[domain] = [node.name]
            else:
                names.append(node.name)
        domains = sorted({*canaries, *others},
                         key=lambda d: (d not in canaries, d is None, d or ""))
        rank = {d: i for i, d in enumerate(domains)}
        empty: list[str] = []
        for group in (canaries, others):
            for names in group.values():
                names.sort()
        if settings.order == "sequential":
            order = [name for d in domains
                     for name in (*canaries.get(d, empty), *others.get(d, empty))]
        else:  # in turn: the i-th of every domain, canaries first
            order = []
            for group in (canaries, others):
                lists = [group[d] for d in domains if d in group]
                order += [name for turn in zip_longest(*lists) for name in turn
                          if name is not None]
        return cls(settings, {name: i for i, name in enumerate(order)}, rank, counts or {})

    def domain(self, node: RolloutNode) -> str | None:
        return node.labels.get(self.settings.key)

    def in_order(self, nodes: Iterable[RolloutNode]) -> list[RolloutNode]:
        positions = self.positions
        last = len(positions)
        return sorted(nodes, key=lambda n: positions.get(n.name, last))

    def open_rank(self) -> int | None:
        """``sequential``: the place of the first domain with a node not yet upgraded or
        failed (nodes of later domains wait for it); None: no gate (``spread``, or every
        domain done)."""
        if self.settings.order != "sequential":
            return None
        waiting = [self.rank.get(d, len(self.rank)) for d, c in self.counts.items()
                   if c.settled < c.nodes]
        return min(waiting, default=None)

    def retried(self, node: RolloutNode) -> None:
        """A failed node is in flight again: its domain is not done (the gate holds the
        domains after it) and the node counts in flight instead of unavailable."""
        count = self.counts.get(self.domain(node))
        if count is not None and node.name in count.unavailable:
            count.unavailable.discard(node.name)
            count.settled -= 1
            count.in_flight += 1

    def limit(self, domain: str | None) -> int | None:
        """The domain's budget of nodes in flight plus unavailable for fresh starts."""
        count = self.counts.get(domain)
        return self.settings.per_domain_limit(count.nodes if count is not None else 0)

    def domain_at(self, rank: int) -> str | None:
        for domain, place in self.rank.items():
            if place == rank:
                return domain
        return None


@dataclass(slots=True)
class Budgets:
    """The per-domain budgets as fresh starts use them up within one pass."""

    topology: Topology
    #: domain -> nodes in flight plus unavailable, with this pass's starts
    used: dict[str | None, int] = field(default_factory=dict)
    #: domains whose budget held a start back in this pass, with their limit
    held: dict[str | None, int] = field(default_factory=dict)

    def exhausted(self) -> bool:
        """Every domain's budget is used up: no further node can start in this pass."""
        return len(self.held) >= len(self.topology.rank)

    def allows(self, node: RolloutNode) -> bool:
        """True when ``node`` may start fresh now; then counts it as started."""
        topology = self.topology
        domain = topology.domain(node)
        if domain in self.held:
            return False
        limit = topology.limit(domain)
        if limit is None:
            return True
        count = topology.counts.get(domain)
        used = self.used.get(domain)
        if used is None:
            used = count.in_flight + len(count.unavailable) if count is not None else 0
        # an unavailable node that starts is in flight instead: the sum does not grow
        after = used if count is not None and node.name in count.unavailable else used + 1
        if after > limit:
            self.used[domain] = used
            self.held[domain] = limit
            return False
        self.used[domain] = after
        return True

    def message(self) -> str:
        return "; ".join(
            f"domain {domain_name(d)}: {self.used.get(d, 0)} in flight or unavailable "
            f"(maxUnavailablePerDomain {limit}), its next nodes wait"
            for d, limit in sorted(self.held.items(), key=lambda i: self.topology.rank.get(
                i[0], len(self.topology.rank))))
