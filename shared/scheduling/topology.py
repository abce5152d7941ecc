"""Inter-pod rules in a scheduling pass: topology spread on zone and hostname (maxSkew,
DoNotSchedule), required pod affinity on zone, required pod anti-affinity on hostname: the
constraint kinds of Karpenter's own scheduling benchmark.

`Topology` knows where matching pods are: the running ones it starts with, and each pod the
pass places (on a node, or on a planned claim whose zone is then pinned to one value, as
Karpenter pins a topology-constrained claim to the domain it chose).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.api.labels import HOSTNAME_LABEL, ZONE_LABEL
from shared.api.pod import LabelSelector, PodAffinityTerm, TopologySpreadConstraint, WhenUnsatisfiable


@dataclass(frozen=True, slots=True)
class PodTopology:
    """A pod's inter-pod rules as a pass applies them. The preferred terms and `anyway` are those
    still in force while the pass tries the pod with its preferences as requirements
    (`preferences.relax` drops them one at a time); a pod placed records only its required
    anti-affinity, as upstream tracks no inverse preferred anti-affinity."""

    labels: Mapping[str, str] = field(default_factory=dict)
    spread: tuple[TopologySpreadConstraint, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()  # required; zone is the key Karpenter's benchmark uses
    anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required; hostname likewise
    preferred_affinity: tuple[PodAffinityTerm, ...] = ()  # in force, heaviest first
    preferred_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    anyway: bool = False  # the ScheduleAnyway constraints left in `spread` are in force

    @property
    def constrained(self) -> bool:
        return bool(self.hard_spread or self.affinity_in_force or self.anti_affinity_in_force)

    @property
    def hard_spread(self) -> tuple[TopologySpreadConstraint, ...]:
        if self.anyway:
            return self.spread
        return tuple(c for c in self.spread if c.when_unsatisfiable == WhenUnsatisfiable.DO_NOT_SCHEDULE)

    @property
    def affinity_in_force(self) -> tuple[PodAffinityTerm, ...]:
        return self.affinity + self.preferred_affinity if self.preferred_affinity else self.affinity

    @property
    def anti_affinity_in_force(self) -> tuple[PodAffinityTerm, ...]:
        anti = self.preferred_anti_affinity
        return self.anti_affinity + anti if anti else self.anti_affinity

    @property
    def zonal(self) -> bool:
        """Whether a rule needs the pod's zone known: its claim is then pinned to one zone."""
        return any(c.topology_key == ZONE_LABEL for c in self.hard_spread) or any(
            t.topology_key == ZONE_LABEL for t in self.affinity_in_force
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
        own anti-affinity keeps matching pods off their hosts too, as the kube-scheduler's does.
        Selectors and terms are kept by what they say, not by object: the projection parses each
        pod's own copy, and a pass over 100,000 pods must not keep 100,000 counts."""
        self._by_host: dict[str, list[_Placed]] = {}
        self._zone_counts: dict[Hashable, tuple[LabelSelector, dict[str, int]]] = {}
        self._by_selector_host: dict[Hashable, tuple[LabelSelector, dict[str, int]]] = {}
        self._anti: dict[Hashable, tuple[PodAffinityTerm, set[str]]] = {}  # placed pods' own terms -> their hosts
        for labels, zone, host, *terms in running:
            self._add(_Placed(labels, zone, host, tuple(terms[0]) if terms else ()))

    def _placed(self) -> Iterable[_Placed]:
        for here in self._by_host.values():
            yield from here

    def _add(self, placed: _Placed) -> None:
        self._by_host.setdefault(placed.host, []).append(placed)
        for term in placed.anti_affinity:
            if term.topology_key == HOSTNAME_LABEL:
                self._anti.setdefault(_term_key(term), (term, set()))[1].add(placed.host)
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

    def blocker(self, pod: PodTopology) -> Blocked:
        """The hosts (nodes, claims) the hostname rules keep the pod off: those with a pod its
        anti-affinity selects, with a pod whose anti-affinity selects it, or whose count of
        matching pods is at maxSkew already. Asked host by host, never listed: the list grows
        with the claims. Counts only grow within a pass, so a host blocked for one `key` stays
        blocked for every later pod with the same key."""
        counts: list[tuple[dict[str, int], int]] = []
        hosts: list[set[str]] = []
        key: list[Hashable] = []
        for term in pod.anti_affinity_in_force:
            if term.topology_key == HOSTNAME_LABEL and term.label_selector is not None:
                counts.append((self._host_counts(term.label_selector), 0))
                key.append(("anti", selector_key(term.label_selector)))
        for term_key, (term, placed_on) in self._anti.items():
            if term.selects(pod.labels):
                hosts.append(placed_on)
                key.append(("theirs", term_key))
        for c in pod.hard_spread:
            if c.topology_key == HOSTNAME_LABEL and c.label_selector is not None:
                room = c.max_skew - _self(c.label_selector, pod)
                counts.append((self._host_counts(c.label_selector), room))
                key.append(("spread", selector_key(c.label_selector), room))
        return Blocked(tuple(key), counts, hosts) if key else NOT_BLOCKED

    def _host_counts(self, selector: LabelSelector) -> dict[str, int]:
        """Matching pods per host; kept up to date per selector from its first use on."""
        key = selector_key(selector)
        known = self._by_selector_host.get(key)
        if known is None:
            counts: dict[str, int] = {}
            for placed in self._placed():
                if selector.matches(placed.labels):
                    counts[placed.host] = counts.get(placed.host, 0) + 1
            known = self._by_selector_host[key] = (selector, counts)
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
        for term in pod.affinity_in_force:
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
        key = selector_key(selector)
        known = self._zone_counts.get(key)
        if known is None:
            counts: dict[str, int] = {}
            for placed in self._placed():
                if placed.zone is not None and selector.matches(placed.labels):
                    counts[placed.zone] = counts.get(placed.zone, 0) + 1
            known = self._zone_counts[key] = (selector, counts)
        return {z: known[1].get(z, 0) for z in zones}


class Blocked:
    """The hosts a pod's hostname rules keep it off (`Topology.blocker`), asked one at a time."""

    __slots__ = ("_counts", "_hosts", "key")

    def __init__(self, key: Hashable, counts: list[tuple[dict[str, int], int]], hosts: list[set[str]]) -> None:
        self.key = key  # equal keys: the same rules, so the same hosts (a set that only grows)
        self._counts = counts
        self._hosts = hosts

    def __contains__(self, host: str) -> bool:
        for counts, room in self._counts:
            n = counts.get(host)
            if n is not None and n > room:
                return True
        return any(host in placed_on for placed_on in self._hosts)


NOT_BLOCKED = Blocked(None, [], [])


def selector_key(selector: LabelSelector) -> Hashable:
    """What a selector says, as a key: equal selectors of different pods share their counts."""
    labels = tuple(sorted((selector.match_labels or {}).items()))
    expressions = tuple((e.key, str(e.operator), tuple(e.values or ())) for e in selector.match_expressions or ())
    return labels, expressions


def _term_key(term: PodAffinityTerm) -> Hashable:
    return term.topology_key, None if term.label_selector is None else selector_key(term.label_selector)


def _self(selector: LabelSelector | None, pod: PodTopology) -> int:
    return 1 if selector is not None and selector.matches(pod.labels) else 0
