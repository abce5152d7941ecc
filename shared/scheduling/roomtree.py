"""A max tree over places in order (existing nodes, planned claims), holding per place three
figures of its room (cpu, memory, pod slots): a pod descends to the first place whose figures
reach its own, passing over whole runs of places that cannot take it. One tree for both indexes
(`existing`, `candidates`), so the descent that decides "first in order" is written once.

Per branch, the largest figure of each kind below it: a branch short in any figure holds no
place for the pod, but a branch that passes may still hold none (the figures need not come from
one place), so each place found is checked in full by the caller's `accept`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal

EMPTY = Decimal("-Infinity")  # a leaf without a place, or a figure any amount reaches
Figures = tuple[Decimal, Decimal, Decimal]  # cpu, memory, pods


class RoomTree:
    """Leaves in the places' order, each place's figures; positions beyond the places are
    empty. Its capacity is fixed: a caller that outgrows it builds a larger one."""

    __slots__ = ("cpu", "memory", "pods", "size")

    def __init__(self, leaves: Sequence[Figures], capacity: int = 1) -> None:
        size = 1
        while size < len(leaves) or size < capacity:
            size *= 2
        self.size = size
        self.cpu = [EMPTY] * (2 * size)
        self.memory = [EMPTY] * (2 * size)
        self.pods = [EMPTY] * (2 * size)
        for position, (cpu, memory, pods) in enumerate(leaves):
            leaf = size + position
            self.cpu[leaf], self.memory[leaf], self.pods[leaf] = cpu, memory, pods
        for k in range(size - 1, 0, -1):
            self._pull(k)

    def _pull(self, k: int) -> None:
        left, right = 2 * k, 2 * k + 1
        cpu, memory, pods = self.cpu, self.memory, self.pods
        cpu[k] = cpu[left] if cpu[left] >= cpu[right] else cpu[right]
        memory[k] = memory[left] if memory[left] >= memory[right] else memory[right]
        pods[k] = pods[left] if pods[left] >= pods[right] else pods[right]

    def set(self, position: int, cpu: Decimal, memory: Decimal, pods: Decimal) -> None:
        """A place's new figures (EMPTY in each: the place is gone)."""
        k = self.size + position
        self.cpu[k], self.memory[k], self.pods[k] = cpu, memory, pods
        k //= 2
        while k:
            self._pull(k)
            k //= 2

    def first(self, cpu: Decimal, memory: Decimal, pods: Decimal, accept: Callable[[int], bool]) -> int | None:
        """The first position, in order, whose figures reach these and that `accept` takes.
        `pods` must be finite: an empty leaf then never reaches it."""
        stack = [1]
        size, cpus, memories, slots = self.size, self.cpu, self.memory, self.pods
        while stack:
            k = stack.pop()
            if cpus[k] < cpu or memories[k] < memory or slots[k] < pods:
                continue
            if k >= size:
                if accept(k - size):
                    return k - size
                continue
            stack.append(2 * k + 1)
            stack.append(2 * k)
        return None
