"""The claims a pass has planned, indexed so a pod finds the first one that takes it without
trying each (a pass over 35,000 pods used to try 300 claims per pod, nearly all in vain).

The order is the pass's own: fewest pods first, then the order they reached that count. What
the index adds:
- Claims alike in what decides whether a pod's requirements fit (pool, requirements, options)
  form a kind; whether a pod's requirements, tolerations and zones fit is answered once per
  kind and pod signature, so a kind that cannot take the pod is passed over whole.
- Per kind and per hostname-rule signature (`Topology.blocker`), a heap in the pass's order;
  a claim those rules block leaves that heap for good (counts only grow within a pass).
- A claim that no pod of the batch could fit on any longer leaves the index.
Only room is then tried claim by claim, with the same checks the pass made before.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from shared.api.core import Taint
from shared.scheduling.fitting import Fitting
from shared.scheduling.offerings import Option
from shared.scheduling.requirements import Requirements
from shared.scheduling.rules import min_values_met, pin, pinned_to, tolerated, with_pod, within
from shared.scheduling.topology import Blocked

if TYPE_CHECKING:
    from shared.scheduling.packing import PendingPod, PlannedClaim


@dataclass(slots=True, eq=False)
class _Slot:
    """A claim's place in the index; `seq` changes whenever it moves, so older heap entries for
    it are known stale."""

    claim: PlannedClaim
    size: int
    seq: int
    kind: _Kind | None  # None: it can take no pod more


@dataclass(frozen=True, slots=True)
class _Answer:
    """What a kind becomes with the pod: `same` when only room matters (nothing narrows)."""

    same: bool
    requirements: Requirements
    options: list[Option]
    largest: Mapping[str, Decimal]
    min_values: bool


@dataclass(frozen=True, slots=True)
class _Shared:
    """What the members of a kind have in common, as it was when the kind was made (a member
    that narrows leaves the kind; it does not change it)."""

    nodepool: str
    taints: tuple[Taint, ...]
    requirements: Requirements
    options: list[Option]
    largest: Mapping[str, Decimal]
    zone_set: frozenset[str]


class _Kind:
    __slots__ = ("answers", "key", "members", "sample", "views")

    def __init__(self, key: Hashable, claim: PlannedClaim) -> None:
        self.key = key
        self.sample = _Shared(
            claim.nodepool, claim.taints, claim.requirements, claim.options, claim.largest, claim.zone_set
        )
        self.members: set[_Slot] = set()
        self.views: dict[Hashable, list[tuple[int, int, _Slot]]] = {}
        self.answers: dict[Hashable, _Answer | None] = {}

    def answer(self, pod: PendingPod, key: Hashable, zones: list[str] | None, fitting: Fitting) -> _Answer | None:
        """Whether the pod's requirements and zones fit claims of this kind (room aside), as
        the pass decides it; remembered per pod signature."""
        if key in self.answers:
            return self.answers[key]
        claim = self.sample
        found: _Answer | None = None
        if not (pod.requirements and claim.requirements.compatible(pod.requirements)):
            if not pod.requirements and (zones is None or pinned_to(claim, zones)):
                found = _Answer(True, claim.requirements, claim.options, claim.largest, _asks_min(claim.requirements))
            else:
                merged = Requirements(claim.requirements.values())
                for name in pod.requirements:
                    merged.add(pod.requirements[name])
                if pin(merged, zones, claim.zone_set):
                    options = fitting(claim.options, merged)
                    if options:
                        largest, _ = fitting.derived(options)
                        found = _Answer(False, merged, options, largest, _asks_min(merged))
        self.answers[key] = found
        return found

    def first(
        self, blocked: Blocked, bound: tuple[int, int] | None, pod: PendingPod, answer: _Answer
    ) -> tuple[_Slot, dict[str, Decimal]] | None:
        """The first member in the pass's order, before `bound`, that the hostname rules allow
        and that has room for the pod; with what it would use."""
        heap = self.views.get(blocked.key)
        if heap is None:
            heap = self.views[blocked.key] = [(s.size, s.seq, s) for s in self.members]
            heapq.heapify(heap)
        check = blocked.key is not None
        passed: list[tuple[int, int, _Slot]] = []
        found = None
        while heap:
            entry = heap[0]
            size, seq, slot = entry
            if slot.seq != seq or slot.kind is not self:
                heapq.heappop(heap)  # it moved on
                continue
            if bound is not None and (size, seq) > bound:
                break
            claim = slot.claim
            if check and claim.id in blocked:
                heapq.heappop(heap)  # blocked for these rules from now on
                continue
            used = _room_for(claim.used, pod, answer)
            if used is not None:
                found = (slot, used)
                break
            passed.append(heapq.heappop(heap))
        for entry in passed:
            heapq.heappush(heap, entry)
        return found


def _asks_min(requirements: Requirements) -> bool:
    return any(v.min_values for v in requirements.values())


def _room_for(used: Mapping[str, Decimal], pod: PendingPod, answer: _Answer) -> dict[str, Decimal] | None:
    """What the claim would use with the pod, if one of the answer's options holds it (and
    minValues still holds); the pass's own checks, largest option first."""
    if not within(used, pod.requests, answer.largest):
        return None
    more = with_pod(used, pod)
    if not any(o.holds(more) for o in reversed(answer.options)):
        return None
    if answer.min_values and not min_values_met(answer.requirements, answer.options, more):
        return None
    return more


class ClaimIndex:
    """The claims of one pass (see the module's docstring). `smallest`: the least cpu and
    memory any pod of the batch asks for; a claim without room for that is done."""

    def __init__(self, fitting: Fitting, smallest: Mapping[str, Decimal]) -> None:
        self.fitting = fitting
        self.smallest = dict(smallest)
        self._kinds: dict[Hashable, _Kind] = {}
        self._slots: dict[str, _Slot] = {}
        self._by_content: dict[tuple[int, ...], list[Option]] = {}
        self._by_id: dict[int, tuple[list[Option], list[Option]]] = {}
        self._seq = 0

    def add(self, claim: PlannedClaim) -> None:
        """A new claim of the pass (with its first pod)."""
        slot = _Slot(claim, len(claim.pods), 0, None)
        self._slots[claim.id] = slot
        self._place(slot)

    def take(self, pod: PendingPod, blocked: Blocked, zones: list[str] | None) -> PlannedClaim | None:
        """The first claim, in the pass's order, that takes the pod; it takes it."""
        key = (frozenset(pod.requirements.values()) if pod.requirements else None, tuple(zones or ()), zones is None)
        allowed: dict[str, bool] = {}
        best: tuple[_Slot, dict[str, Decimal], _Answer] | None = None
        for kind in self._kinds.values():
            claim = kind.sample
            if claim.taints:
                ok = allowed.get(claim.nodepool)
                if ok is None:
                    ok = allowed[claim.nodepool] = tolerated(pod.tolerations, claim.taints) is None
                if not ok:
                    continue
            answer = kind.answer(pod, key, zones, self.fitting)
            if answer is None:
                continue
            bound = (best[0].size, best[0].seq) if best is not None else None
            found = kind.first(blocked, bound, pod, answer)
            if found is not None:
                best = (found[0], found[1], answer)
        if best is None:
            return None
        slot, used, answer = best
        claim = slot.claim
        claim.used = used
        claim.pods.append(pod.key)
        kind = slot.kind
        assert kind is not None
        if answer.same:
            self._move(slot, kind)
        else:
            claim.requirements = Requirements(answer.requirements.values())
            claim.narrowed(answer.options, self.fitting)
            kind.members.discard(slot)
            if not kind.members:
                del self._kinds[kind.key]
            self._place(slot)
        return claim

    def _place(self, slot: _Slot) -> None:
        """File the claim under its kind (a new one if none matches)."""
        claim = slot.claim
        options = self._canonical(claim.options)
        claim.options = options
        key = (claim.nodepool, id(options), frozenset(claim.requirements.values()))
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = _Kind(key, claim)
        kind.members.add(slot)
        self._move(slot, kind)

    def _move(self, slot: _Slot, kind: _Kind) -> None:
        """The claim's new place in its kind's order; out of the index once it is done."""
        claim = slot.claim
        slot.size = len(claim.pods)
        self._seq += 1
        slot.seq = self._seq
        if not within(claim.used, self.smallest, claim.largest):
            slot.kind = None
            kind.members.discard(slot)
            if not kind.members:
                del self._kinds[kind.key]
            return
        slot.kind = kind
        entry = (slot.size, slot.seq, slot)
        for heap in kind.views.values():
            heapq.heappush(heap, entry)

    def _canonical(self, options: list[Option]) -> list[Option]:
        """One list per content: claims with equal options are one kind, however their lists
        were built (a pool under limits builds a new list per claim)."""
        known = self._by_id.get(id(options))
        if known is not None and known[0] is options:
            return known[1]
        canonical = self._by_content.setdefault(tuple(map(id, options)), options)
        self._by_id[id(options)] = (options, canonical)  # keeps `options` alive: its id stays its own
        return canonical
