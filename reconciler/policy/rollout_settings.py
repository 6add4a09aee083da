"""``rollout:`` of reconciler.yaml for one cluster (docs/live-clusters.md#when-a-change-applies and
docs/rollout.md#topology-aware-waves): the builtin controller's own settings, typed and frozen. Read
at every commit like the rest of the file (``reconciler.config`` resolves them, the live view in
``reconciler.settings`` carries them to the controller's passes, ``PlannerSettings.for_pass`` into
each pass and into every prediction): a key added here follows commits with no other wiring. Pure.

``clusters.<name>.rollout`` replaces the repository-wide section key by key (``readyTimeout``,
``drain``, ``waitFor``, ``unavailableNodes``, ``topology`` each replaced whole:
docs/live-clusters.md#waiting-for-jobs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from reconciler.durations import parse_duration_setting
from reconciler.errors import RepoConfigError
from reconciler.policy.label_selector import LabelSelector, LabelSelectorError, label_key_error
from reconciler.policy.quantity import Quantity

DEFAULT_READY_TIMEOUT = 600.0
DEFAULT_DRAIN_TIMEOUT = 900.0
#: the keys of ``rollout``, each replaced whole by a cluster's own section
ROLLOUT_KEYS = ("readyTimeout", "drain", "waitFor", "unavailableNodes", "topology")
DEFAULT_WAIT_FOR_SELECTOR = "gpu.metax-tech.com/wait-for-completion=true"

_Option = TypeVar("_Option", bound=str)

OnTimeout = Literal["wait", "fail", "delete"]
UnavailableNodes = Literal["count", "skip"]
TopologyOrder = Literal["sequential", "spread"]
ON_TIMEOUT: tuple[OnTimeout, ...] = ("wait", "fail", "delete")
UNAVAILABLE_NODES: tuple[UnavailableNodes, ...] = ("count", "skip")
TOPOLOGY_ORDERS: tuple[TopologyOrder, ...] = ("sequential", "spread")


@dataclass(frozen=True, slots=True)
class DrainSettings:
    """``rollout.drain``: evict the node's pods through the Eviction API after the cordon."""

    #: the pods to evict; empty: every pod requesting a GPU resource
    pod_selector: LabelSelector = field(default_factory=LabelSelector)
    #: seconds per node from the start of its drain (its cordon)
    timeout: float = DEFAULT_DRAIN_TIMEOUT
    on_timeout: OnTimeout = "wait"
    #: a pod with an emptyDir volume is evicted only when true
    delete_empty_dir: bool = False


@dataclass(frozen=True, slots=True)
class WaitForSettings:
    """``rollout.waitFor``: pods waited for, never evicted (jobs that must finish)."""

    pod_selector: LabelSelector = field(
        default_factory=lambda: LabelSelector.parse(DEFAULT_WAIT_FOR_SELECTOR))
    #: 0: as long as it takes; else the node is drained after it (or failed, per onTimeout)
    timeout: float = 0.0


@dataclass(frozen=True, slots=True)
class TopologySettings:
    """``rollout.topology`` (docs/rollout.md#topology-aware-waves): domains of a node label, in
    order or in turn."""

    key: str
    order: TopologyOrder = "sequential"
    #: nodes in flight plus unavailable per domain, for fresh starts; None: no limit
    max_unavailable_per_domain: Quantity | None = None

    def per_domain_limit(self, domain_nodes: int) -> int | None:
        """The limit for a domain of ``domain_nodes`` rollout nodes (a percentage rounds up,
        at least 1); None: no limit."""
        quantity = self.max_unavailable_per_domain
        if quantity is None:
            return None
        if not quantity.percent:
            return max(int(quantity.value), 1)
        return max(-(-int(quantity.value) * domain_nodes // 100), 1)


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    """The ``rollout`` section that applies to a cluster."""

    #: seconds a new driver pod may take to become Ready before the node failed
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    #: None: drain is off, busy nodes wait (docs/rollout.md#upgrading-one-node)
    drain: DrainSettings | None = None
    wait_for: WaitForSettings | None = None
    unavailable_nodes: UnavailableNodes = "count"
    topology: TopologySettings | None = None

    @classmethod
    def from_section(cls, value: object, *, label: str = "rollout") -> RolloutSettings:
        """From the section as written (None: every default). Raises ``RepoConfigError``
        naming the key."""
        return cls.from_sections(None, value, label=label)

    @classmethod
    def from_sections(cls, wide: object, own: object, *, label: str = "rollout",
                      wide_label: str = "rollout") -> RolloutSettings:
        """A cluster's settings: its own section (``own``, labelled ``label``) over the
        repository-wide one (``wide``), key by key; every error names the key where it was
        written."""
        sources: dict[str, tuple[object, str]] = {}
        for section, place in ((wide, wide_label), (own, label)):
            if section is None:
                continue
            for key, raw in _mapping(section, place).items():
                sources[str(key)] = (raw, f"{place}.{key}")
        for key, (_, place) in sources.items():
            if key not in ROLLOUT_KEYS:
                raise RepoConfigError(f"{place}: unknown key (expected one of "
                                      f"{', '.join(ROLLOUT_KEYS)})")

        def value(key: str) -> object:
            return sources.get(key, (None, ""))[0]

        def where(key: str) -> str:
            return sources.get(key, (None, f"{label}.{key}"))[1]

        ready = value("readyTimeout")
        drain = _drain(value("drain"), where("drain"))
        wait_for = _wait_for(value("waitFor"), where("waitFor"))
        if wait_for is not None and wait_for.timeout and drain is None:
            raise RepoConfigError(
                f"{where('waitFor')}.timeout: a timeout drains the node after it, but "
                f"{where('drain')} is not set (set drain, or timeout: 0)")
        unavailable = value("unavailableNodes")
        unavailable_nodes = _one_of("count" if unavailable is None else unavailable,
                                    UNAVAILABLE_NODES, where("unavailableNodes"))
        return cls(
            ready_timeout=(DEFAULT_READY_TIMEOUT if ready is None else
                           parse_duration_setting(ready, key=where("readyTimeout"))),
            drain=drain,
            wait_for=wait_for,
            unavailable_nodes=unavailable_nodes,
            topology=_topology(value("topology"), where("topology")),
        )


def _mapping(value: object, label: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise RepoConfigError(f"{label}: expected a mapping, got {type(value).__name__}")
    return value


def _known(section: Mapping[str, object], keys: tuple[str, ...], label: str) -> None:
    for key in section:
        if key not in keys:
            raise RepoConfigError(f"{label}.{key}: unknown key (expected one of "
                                  f"{', '.join(keys)})")


def _one_of(raw: object, options: tuple[_Option, ...], label: str) -> _Option:
    """``raw`` if it is one of ``options``; else the error lists them (``'a', 'b' or 'c'``)."""
    for option in options:
        if raw == option:
            return option
    quoted = [repr(option) for option in options]
    expected = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
    raise RepoConfigError(f"{label}: expected {expected}, got {raw!r}")


def _selector(raw: object, label: str, default: str = "") -> LabelSelector:
    if raw is None:
        raw = default
    if not isinstance(raw, str):
        raise RepoConfigError(f"{label}: expected a label selector string like "
                              f"'app=web,tier!=db', got {raw!r}")
    try:
        return LabelSelector.parse(raw)
    except LabelSelectorError as exc:
        raise RepoConfigError(f"{label}: {exc}") from None


def _drain(raw: object, label: str) -> DrainSettings | None:
    if raw is None:
        return None
    section = _mapping(raw, label)
    _known(section, ("podSelector", "timeout", "onTimeout", "deleteEmptyDir"), label)
    on_timeout = _one_of(section.get("onTimeout", "wait"), ON_TIMEOUT, f"{label}.onTimeout")
    delete_empty_dir = section.get("deleteEmptyDir", False)
    if not isinstance(delete_empty_dir, bool):
        raise RepoConfigError(f"{label}.deleteEmptyDir: expected true or false, "
                              f"got {delete_empty_dir!r}")
    timeout = section.get("timeout")
    return DrainSettings(
        pod_selector=_selector(section.get("podSelector"), f"{label}.podSelector"),
        timeout=(DEFAULT_DRAIN_TIMEOUT if timeout is None else
                 parse_duration_setting(timeout, key=f"{label}.timeout")),
        on_timeout=on_timeout,
        delete_empty_dir=delete_empty_dir,
    )


def _wait_for(raw: object, label: str) -> WaitForSettings | None:
    if raw is None:
        return None
    section = _mapping(raw, label)
    _known(section, ("podSelector", "timeout"), label)
    timeout = section.get("timeout")
    return WaitForSettings(
        pod_selector=_selector(section.get("podSelector"), f"{label}.podSelector",
                               DEFAULT_WAIT_FOR_SELECTOR),
        timeout=0.0 if timeout in (None, 0) else parse_duration_setting(
            timeout, key=f"{label}.timeout"),
    )


def _topology(raw: object, label: str) -> TopologySettings | None:
    if raw is None:
        return None
    section = _mapping(raw, label)
    _known(section, ("key", "order", "maxUnavailablePerDomain"), label)
    key = section.get("key")
    if not isinstance(key, str) or not key:
        raise RepoConfigError(f"{label}.key: expected a node label key such as "
                              f"'topology.kubernetes.io/zone', got {key!r}")
    error = label_key_error(key)
    if error is not None:
        raise RepoConfigError(f"{label}.key: {error}")
    order = _one_of(section.get("order", "sequential"), TOPOLOGY_ORDERS, f"{label}.order")
    limit = section.get("maxUnavailablePerDomain")
    quantity: Quantity | None = None
    if limit is not None:
        quantity = _per_domain(limit, f"{label}.maxUnavailablePerDomain")
    return TopologySettings(key=key, order=order, max_unavailable_per_domain=quantity)


def _per_domain(raw: object, label: str) -> Quantity:
    """An int >= 1 or ``"N%"`` with 1 <= N <= 100."""
    if isinstance(raw, bool):
        raise RepoConfigError(f"{label}: expected an integer >= 1 or 'N%', got {raw!r}")
    if isinstance(raw, int):
        if raw < 1:
            raise RepoConfigError(f"{label}: expected an integer >= 1 or 'N%', got {raw!r}")
        return Quantity(raw, False)
    if isinstance(raw, str) and raw.endswith("%") and raw[:-1].isdigit():
        percent = int(raw[:-1])
        if 1 <= percent <= 100:
            return Quantity(percent, True)
    raise RepoConfigError(f"{label}: expected an integer >= 1 or 'N%' (1-100), got {raw!r}")
