"""ORACLE BASELINE, not production code: `shared.scheduling.topology` as it was before the
claim index (commit 8c27508), for `baseline_pass`.

Inter-pod rules in a scheduling pass: topology spread on zone and hostname (maxSkew,
DoNotSchedule), required pod affinity on zone, required pod anti-affinity on hostname: the
constraint kinds of Karpenter's own scheduling benchmark.

`Topology` knows where matching pods are: the running ones it starts with, and each pod the
pass places (on a node, or on a planned claim whose zone is then pinned to one value, as
Karpenter pins a topology-constrained claim to the domain it chose).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.api.labels import HOSTNAME_LABEL, ZONE_LABEL
from shared.api.pod import LabelSelector, PodAffinityTerm, TopologySpreadConstraint, WhenUnsatisfiable


@dataclass(frozen=True, slots=True)
class PodTopology:
    labels: Mapping[str, str] = field(default_factory=dict)
    spread: tuple[TopologySpreadConstraint, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()  # required; zone is the key Karpenter's benchmark uses
    anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required; hostname likewise

    @property
    def constrained(self) -> bool:
        return bool(self.hard_spread or self.affinity or self.anti_affinity)

    @property
    def hard_spread(self) -> tuple[TopologySpreadConstraint, ...]:
        return tuple(c for c in self.spread if c.when_unsatisfiable == WhenUnsatisfiable.DO_NOT_SCHEDULE)

    @property
    def zonal(self) -> bool:
        """Whether a rule needs the pod's zone known: its claim is then pinned to one zone."""
        return any(c.topology_key == ZONE_LABEL for c in self.hard_spread) or any(
            t.topology_key == ZONE_LABEL for t in self.affinity
        )


@dataclass(frozen=True, slots=True)
class _Placed:
    labels: Mapping[str, str]
    zone: str | None
    host: str
    anti_affinity: tuple[PodAffinityTerm, ...] = ()


Running = (
    tuple[Mapping[str, str], str | None, str] | tuple[Mapping[str, str], str | None, str, Sequence[PodAffinityTerm]]
)
"""A pod already placed: (labels, zone, node), and optionally its required anti-affinity terms."""


class Topology:
    def __init__(self, running: Iterable[Running] = ()) -> None:
        """`running`: the pods already on the cluster's nodes (or on claims in flight). Their
        own anti-affinity keeps matching pods off their hosts too, as the kube-scheduler's does."""
        self._by_host: dict[str, list[_Placed]] = {}
        self._zone_counts: dict[int, tuple[LabelSelector, dict[str, int]]] = {}  # by selector, kept alive
        self._by_selector_host: dict[int, tuple[LabelSelector, dict[str, int]]] = {}
        self._anti: dict[int, tuple[PodAffinityTerm, set[str]]] = {}  # placed pods' own terms -> their hosts
        for labels, zone, host, *terms in running:
            self._add(_Placed(labels, zone, host, tuple(terms[0]) if terms else ()))

    def _placed(self) -> Iterable[_Placed]:
        for here in self._by_host.values():
            yield from here

    def _add(self, placed: _Placed) -> None:
        self._by_host.setdefault(placed.host, []).append(placed)
        for term in placed.anti_affinity:
            if term.topology_key == HOSTNAME_LABEL:
                self._anti.setdefault(id(term), (term, set()))[1].add(placed.host)
        for selector, counts in self._by_selector_host.values():
            if selector.matches(placed.labels):
                counts[placed.host] = counts.get(placed.host, 0) + 1
        if placed.zone is not None:
            self._count(placed, placed.zone)

    def _count(self, placed: _Placed, zone: str) -> None:
        for selector, counts in self._zone_counts.values():
            if selector.matches(placed.labels):
                counts[zone] = counts.get(zone, 0) + 1

    def record(self, pod: PodTopology, zone: str | None, host: str) -> None:
        if zone is not None:  # a claim just pinned to a zone: its earlier pods are there too
            here = self._by_host.get(host, [])
            for index, earlier in enumerate(here):
                if earlier.zone is None:
                    settled = _Placed(earlier.labels, zone, host, earlier.anti_affinity)
                    here[index] = settled
                    self._count(settled, zone)
        self._add(_Placed(pod.labels, zone, host, pod.anti_affinity))

    def blocked_hosts(self, pod: PodTopology) -> frozenset[str] | set[str]:
        """The hosts (nodes, claims) the hostname rules keep the pod off, found once per pod:
        those with a pod its anti-affinity selects, with a pod whose anti-affinity selects it,
        or whose count of matching pods is at maxSkew already."""
        blocked: set[str] = set()
        for term in pod.anti_affinity:
            if term.topology_key == HOSTNAME_LABEL and term.label_selector is not None:
                blocked |= {h for h, n in self._host_counts(term.label_selector).items() if n}
        for term, hosts in self._anti.values():
            if term.selects(pod.labels):
                blocked |= hosts
        for c in pod.hard_spread:
            if c.topology_key == HOSTNAME_LABEL and c.label_selector is not None:
                room = c.max_skew - _self(c.label_selector, pod)
                blocked |= {h for h, n in self._host_counts(c.label_selector).items() if n > room}
        return blocked or _NONE

    def _host_counts(self, selector: LabelSelector) -> dict[str, int]:
        """Matching pods per host; kept up to date per selector from its first use on."""
        known = self._by_selector_host.get(id(selector))
        if known is None:
            counts: dict[str, int] = {}
            for placed in self._placed():
                if selector.matches(placed.labels):
                    counts[placed.host] = counts.get(placed.host, 0) + 1
            known = self._by_selector_host[id(selector)] = (selector, counts)
        return known[1]

    def zones_allowed(self, pod: PodTopology, eligible: Iterable[str]) -> list[str]:
        """The zones among `eligible` the zone rules allow, best first (fewest matching pods for
        spread; for affinity, zones that have a matching pod, or any zone for the first pod of a
        group that selects itself)."""
        zones = sorted(set(eligible))
        allowed = set(zones)
        order: dict[str, int] = dict.fromkeys(zones, 0)
        for c in pod.hard_spread:
            if c.topology_key != ZONE_LABEL:
                continue
            counts = self._counts(c.label_selector, zones)
            lowest = min(counts.values(), default=0)
            allowed &= {z for z in zones if counts[z] + _self(c.label_selector, pod) - lowest <= c.max_skew}
            for z in zones:
                order[z] += counts[z]
        for term in pod.affinity:
            if term.topology_key != ZONE_LABEL or term.label_selector is None:
                continue
            counts = self._counts(term.label_selector, zones)
            with_match = {z for z, n in counts.items() if n}
            if with_match:
                allowed &= with_match
            elif not term.selects(pod.labels) or any(term.selects(p.labels) for p in self._placed()):
                return []  # a matching pod exists but its zone is not known yet, or none will ever come
        return sorted(allowed, key=lambda z: (order[z], z))

    def _counts(self, selector: LabelSelector | None, zones: list[str]) -> dict[str, int]:
        """Matching pods per zone; kept up to date per selector from its first use on."""
        if selector is None:  # a constraint without a selector matches no pod
            return dict.fromkeys(zones, 0)
        known = self._zone_counts.get(id(selector))
        if known is None:
            counts: dict[str, int] = {}
            for placed in self._placed():
                if placed.zone is not None and selector.matches(placed.labels):
                    counts[placed.zone] = counts.get(placed.zone, 0) + 1
            known = self._zone_counts[id(selector)] = (selector, counts)
        return {z: known[1].get(z, 0) for z in zones}


_NONE: frozenset[str] = frozenset()


def _self(selector: LabelSelector | None, pod: PodTopology) -> int:
    return 1 if selector is not None and selector.matches(pod.labels) else 0
