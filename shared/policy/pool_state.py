"""The counted state of one NodePool and of its NodeClaims, as `shared.policy.counters` folds it:
the `nodepool_counters` row and what a claim's own stream says of it, with the pool's parsed
policy (limits, budgets, node limit mode) cached per spec."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from shared.api.nodepool import NODES_RESOURCE, NodePool
from shared.policy.budgets import DisruptionBudgets
from shared.policy.resources import format_resources

IN_FLIGHT = "in_flight"
LAUNCHED = "launched"
ENDED = "ended"
NOT_READY = "NotReady"
"""The `disrupting` reason of a claim that only consumes budget because its node is NotReady."""


@dataclass(slots=True)
class ClaimState:
    """One NodeClaim as the counters see it."""

    nodepool: str
    resources: Mapping[str, Decimal]  # replaced on change, never changed in place (may be shared)
    phase: str = IN_FLIGHT
    initialized: bool = False
    replacement_for: str | None = None
    ready: bool = True

    def copy(self) -> ClaimState:
        """A twin to evolve separately (`resources` is replaced on change, never mutated)."""
        return ClaimState(self.nodepool, self.resources, self.phase, self.initialized, self.replacement_for, self.ready)


@dataclass(slots=True)
class PoolCounters:
    """The `nodepool_counters` row of one pool."""

    nodepool: str
    spec: dict[str, Any] | None = None
    nodes: int = 0
    in_flight: int = 0
    initialized: int = 0
    resources: dict[str, Decimal] = field(default_factory=dict)
    disrupting: dict[str, list[str]] = field(default_factory=dict)  # claim -> [reason, decision id]
    replacing: dict[str, list[str]] = field(default_factory=dict)  # decision id -> replacements not created yet
    version: int = 0
    last_position: int = 0
    _policy: _PoolPolicy | None = None
    _policy_for: dict[str, Any] | None = None

    def copy(self) -> PoolCounters:
        """A twin to evolve separately: its maps are its own (the spec is shared, never changed)."""
        return PoolCounters(
            self.nodepool,
            self.spec,
            self.nodes,
            self.in_flight,
            self.initialized,
            dict(self.resources),
            dict(self.disrupting),
            {k: list(v) for k, v in self.replacing.items()},
            self.version,
            self.last_position,
            self._policy,
            self._policy_for,
        )

    def usage(self) -> dict[str, Decimal]:
        return {**self.resources, NODES_RESOURCE: Decimal(self.nodes)}

    def disrupting_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for reason, _ in self.disrupting.values():
            out[reason] = out.get(reason, 0) + 1
        return dict(sorted(out.items()))

    def policy(self) -> _PoolPolicy | None:
        if self.spec is None:
            return None
        if self._policy is None or self._policy_for is not self.spec:
            known = _POLICY_BY_OBJECT.get(id(self.spec))
            if known is None or known[0] is not self.spec:
                if len(_POLICY_BY_OBJECT) >= 1024:
                    _POLICY_BY_OBJECT.clear()
                policy = _policy_of(json.dumps(self.spec, sort_keys=True))
                known = _POLICY_BY_OBJECT[id(self.spec)] = (self.spec, policy)
            self._policy, self._policy_for = known[1], self.spec
        return self._policy

    def comparable(self) -> dict[str, Any]:
        """The counted state, for comparing a replay with the live table."""
        return {
            "nodepool": self.nodepool,
            "spec": self.spec,
            "nodes": self.nodes,
            "in_flight": self.in_flight,
            "initialized": self.initialized,
            "resources": format_resources({k: v for k, v in self.resources.items() if v}),
            "disrupting": dict(sorted(self.disrupting.items())),
            "replacing": dict(sorted(self.replacing.items())),
            "version": self.version,
            "last_position": self.last_position,
        }


@dataclass(frozen=True, slots=True)
class _PoolPolicy:
    nodepool: NodePool
    limits: dict[str, Decimal]
    budgets: DisruptionBudgets
    soft: bool
    expire_after: timedelta | None
    """The template's expireAfter (None: Never), which a claim created now is given."""


_POLICY_BY_OBJECT: dict[int, tuple[dict[str, Any], _PoolPolicy]] = {}
"""Policies by spec object, for callers that hand the same spec to many PoolCounters (the store's
spec cache): no serialising at all. The entry keeps its spec alive, so an id is never reused."""


@functools.lru_cache(maxsize=1024)
def _policy_of(spec_text: str) -> _PoolPolicy:
    """The parsed NodePool, keyed by its canonical JSON: each spec is parsed once per process."""
    nodepool = NodePool.model_validate_json(spec_text)
    limits = {name: q.value for name, q in (nodepool.spec.limits or {}).items()}
    soft = nodepool.spec.disruption.node_limit_mode == "Soft"
    expire_after = nodepool.spec.template.spec.expire_after_timedelta
    return _PoolPolicy(nodepool, limits, DisruptionBudgets.of(nodepool), soft, expire_after)


ClaimLookup = MutableMapping[str, ClaimState]
