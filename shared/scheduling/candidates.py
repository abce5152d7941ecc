"""The claims a pass has planned, indexed so a pod finds the first one that takes it without
trying each (a pass over 35,000 pods used to try 300 claims per pod, nearly all in vain).

The order is the pass's own: fewest pods first, then the order they reached that count. What
the index adds:
- Claims alike in what decides whether a pod's requirements fit (pool, requirements, options)
  form a kind; whether a pod's requirements, tolerations and zones fit is answered once per
  kind and pod signature, so a kind that cannot take the pod is passed over whole.
- Per kind and per hostname-rule signature (`Topology.blocker`), a view in the pass's order;
  a claim those rules block leaves that view for good (counts only grow within a pass).
- In a view, a heap until a claim is passed over for want of room; then that claim is parked
  under a max tree of room (`roomtree`), which later pods descend instead of trying each
  parked claim (a batch in which each claim keeps room for the smallest pod but not for the
  pod at hand used to cost every claim per pod).
- A claim that no pod of the batch could fit on any longer leaves the index.
The claims the trees do not pass over are tried with the same checks the pass made before.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from shared.api.core import Taint
from shared.scheduling.fitting import Fitting
from shared.scheduling.offerings import Option
from shared.scheduling.requirements import Requirements
from shared.scheduling.roomtree import EMPTY, Figures, RoomTree
from shared.scheduling.rules import ZERO, min_values_met, pin, pinned_to, tolerated, with_pod, within
from shared.scheduling.topology import Blocked

if TYPE_CHECKING:
    from shared.scheduling.values import PendingPod, PlannedClaim


@dataclass(slots=True, eq=False)
class _Slot:
    """A claim's place in the index; `seq` changes whenever it moves, so older heap entries for
    it are known stale (and a parked claim moves out of its parking)."""

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
        self.views: dict[Hashable, _View] = {}
        self.answers: dict[Hashable, _Answer | None] = {}

    def answer(self, pod: PendingPod, key: Hashable, zones: list[str] | None, fitting: Fitting) -> _Answer | None:
        """Whether the pod's requirements and zones fit claims of this kind (room aside), as
        the pass decides it; remembered per pod signature."""
        if key in self.answers:
            return self.answers[key]
        claim = self.sample
        found: _Answer | None = None
        if not (pod.requirements and claim.requirements.incompatible(pod.requirements)):
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
        view = self.views.get(blocked.key)
        if view is None:
            view = self.views[blocked.key] = _View([(s.size, s.seq, s) for s in self.members])
        found = view.parked_first(bound, pod, answer) if view.parked else None
        if found is not None:
            bound = (found[0].size, found[0].seq)
        return view.heap_first(self, blocked, bound, pod, answer) or found


class _Parked:
    """The parked members of one size in a view, in the order they reached it, under a
    `RoomTree` of what each has used (negated: a kind's members share one largest option, so
    the least used has the most room)."""

    __slots__ = ("live", "slots", "tree")

    def __init__(self) -> None:
        self.slots: list[_Slot | None] = []  # None: gone
        self.live = 0
        self.tree = RoomTree((), 4)

    def compacted(self) -> list[_Slot]:
        """The members left, in order, at new positions (their indices in the answer), under a
        tree twice their number."""
        slots = [s for s in self.slots if s is not None]
        self.slots = list(slots)
        self.live = len(slots)
        self.tree = RoomTree([_figures(s.claim.used) for s in slots], 2 * len(slots))
        return slots


class _View:
    """A kind's members as one hostname-rule signature (`Blocked.key`) sees them, in the pass's
    order. A heap holds them until a search passes over one for want of room: it is parked,
    by size, under trees that let later searches pass over whole runs of members without room
    (a batch whose pods each fit few claims used to pop and push back every claim per pod). A
    member that moves leaves its parking for the heap. A member these rules block leaves the
    view for good (counts only grow within a pass), and does not come back when it moves."""

    __slots__ = ("at", "blocked", "heap", "parked", "sizes")

    def __init__(self, entries: list[tuple[int, int, _Slot]]) -> None:
        heapq.heapify(entries)
        self.heap = entries  # (size, seq, member); an entry whose seq is not its member's is stale
        self.parked: dict[int, _Parked] = {}
        self.sizes: list[int] = []  # the parked sizes, ascending
        self.at: dict[_Slot, int] = {}  # parked member -> its position (its size: `slot.size`)
        self.blocked: set[_Slot] = set()

    def heap_first(
        self, kind: _Kind, blocked: Blocked, bound: tuple[int, int] | None, pod: PendingPod, answer: _Answer
    ) -> tuple[_Slot, dict[str, Decimal]] | None:
        """The first member in the heap, before `bound`, that takes the pod; those before it
        are dropped (stale, blocked) or parked (no room)."""
        heap = self.heap
        check = blocked.key is not None
        while heap:
            size, seq, slot = heap[0]
            if slot.seq != seq or slot.kind is not kind:
                heapq.heappop(heap)  # it moved on
                continue
            if bound is not None and (size, seq) > bound:
                return None
            if check and slot.claim.id in blocked:
                heapq.heappop(heap)
                self.blocked.add(slot)  # for these rules from now on
                continue
            used = _room_for(slot.claim.used, pod, answer)
            if used is not None:
                return slot, used  # its entry goes stale once it moves
            heapq.heappop(heap)
            self._park(slot)
        return None

    def parked_first(
        self, bound: tuple[int, int] | None, pod: PendingPod, answer: _Answer
    ) -> tuple[_Slot, dict[str, Decimal]] | None:
        """The first parked member, before `bound`, that takes the pod. The trees pass over
        members short of cpu, memory or pod slots against the answer's largest option (used +
        requested <= largest, as -used >= requested - largest); the rest are tried in full.
        None of them is blocked: hostname rules block a claim only for the pods on it, and a
        claim that takes a pod leaves its parking."""
        requests, largest = pod.requests, answer.largest
        cpu = requests["cpu"] - largest.get("cpu", ZERO) if "cpu" in requests else EMPTY
        memory = requests["memory"] - largest.get("memory", ZERO) if "memory" in requests else EMPTY
        pods = _ONE - largest.get("pods", ZERO)
        found: list[tuple[_Slot, dict[str, Decimal]]] = []
        slots: list[_Slot | None] = []
        last = None

        def accept(position: int) -> bool:  # `slots`, `last`: the size searched now, its bound
            slot = slots[position]
            assert slot is not None
            if last is not None and slot.seq > last:
                return True  # past the bound: nothing later can count
            used = _room_for(slot.claim.used, pod, answer)
            if used is not None:
                found.append((slot, used))
            return used is not None

        for size in self.sizes:
            if bound is not None and size > bound[0]:
                break
            parked = self.parked[size]
            slots, last = parked.slots, bound[1] if bound is not None and size == bound[0] else None
            if parked.tree.first(cpu, memory, pods, accept) is not None:
                break
        return found[0] if found else None

    def _park(self, slot: _Slot) -> None:
        size = slot.size
        parked = self.parked.get(size)
        if parked is None:
            parked = self.parked[size] = _Parked()
            insort(self.sizes, size)
        position = len(parked.slots)
        if position == parked.tree.size:
            at = self.at
            for index, moved in enumerate(parked.compacted()):
                at[moved] = index
            position = len(parked.slots)
        parked.slots.append(slot)
        parked.live += 1
        parked.tree.set(position, *_figures(slot.claim.used))
        self.at[slot] = position

    def leave(self, slot: _Slot) -> None:
        """The member out of its parking (if parked), as it takes a pod; `slot.size` is still
        the size it was parked at."""
        position = self.at.pop(slot, None)
        if position is None:
            return
        size = slot.size
        parked = self.parked[size]
        parked.live -= 1
        if not parked.live:
            del self.parked[size]
            del self.sizes[bisect_left(self.sizes, size)]
            return
        parked.slots[position] = None
        parked.tree.set(position, EMPTY, EMPTY, EMPTY)


_ONE = Decimal(1)  # a pod slot


def _figures(used: Mapping[str, Decimal]) -> Figures:
    return -used.get("cpu", ZERO), -used.get("memory", ZERO), -used.get("pods", ZERO)


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
                    ok = allowed[claim.nodepool] = (
                        tolerated(pod.tolerations, claim.taints, pod.avoid_prefer_no_schedule) is None
                    )
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
        kind = slot.kind
        assert kind is not None
        for view in kind.views.values():
            if view.at:
                view.leave(slot)
        claim.used = used
        claim.pods.append(pod.key)
        if answer.same:
            self._move(slot, kind)
        else:
            claim.requirements = Requirements(answer.requirements.values())
            claim.narrowed(answer.options, self.fitting)
            self._drop(slot, kind)
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
        """The claim's new place in its kind's order (out of its parking already); out of the
        index once it is done."""
        claim = slot.claim
        slot.size = len(claim.pods)
        self._seq += 1
        slot.seq = self._seq
        if not within(claim.used, self.smallest, claim.largest):
            slot.kind = None
            self._drop(slot, kind)
            return
        slot.kind = kind
        entry = (slot.size, slot.seq, slot)
        for view in kind.views.values():
            if not view.blocked or slot not in view.blocked:
                heapq.heappush(view.heap, entry)

    def _drop(self, slot: _Slot, kind: _Kind) -> None:
        """The claim out of the kind for good (done, or narrowed into another kind)."""
        kind.members.discard(slot)
        for view in kind.views.values():
            view.blocked.discard(slot)
        if not kind.members:
            del self._kinds[kind.key]

    def _canonical(self, options: list[Option]) -> list[Option]:
        """One list per content: claims with equal options are one kind, however their lists
        were built (a pool under limits builds a new list per claim)."""
        known = self._by_id.get(id(options))
        if known is not None and known[0] is options:
            return known[1]
        canonical = self._by_content.setdefault(tuple(map(id, options)), options)
        self._by_id[id(options)] = (options, canonical)  # keeps `options` alive: its id stays its own
        return canonical
