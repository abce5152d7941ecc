"""The NodePool drift hash (upstream's `NodePool.Hash`, `pkg/apis/v1/nodepool.go`): which template
changes drift its nodes.

Like upstream's `karpenter.sh/nodepool-hash`, it covers `spec.template`'s labels, annotations,
taints, startupTaints, nodeClassRef, expireAfter and terminationGracePeriod, with lists taken as
sets and empty values ignored; requirements are left out (they drift a node only when the node
no longer satisfies them), and so are weight, limits and disruption. The value is our own
(upstream's hashstructure encoding is not reproduced), so it carries its own version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shared.api.nodepool import NodePool

DRIFT_HASH_VERSION = "nw1"


def drift_hash(nodepool: NodePool) -> str:
    template = nodepool.spec.template
    spec = template.spec
    hashed = {
        "labels": template.labels,
        "annotations": dict(template.metadata.annotations or {}) if template.metadata else {},
        "taints": _as_set([t.to_dict() for t in spec.taints or []]),
        "startupTaints": _as_set([t.to_dict() for t in spec.startup_taints or []]),
        "nodeClassRef": spec.node_class_ref.to_dict(),
        "expireAfter": spec.expire_after,
        "terminationGracePeriod": spec.termination_grace_period,
    }
    canonical = json.dumps(_drop_empty(hashed), sort_keys=True, separators=(",", ":"))
    return str(int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:8], "big"))


def _as_set(items: list[dict[str, Any]]) -> list[str]:
    return sorted({json.dumps(item, sort_keys=True) for item in items})


def _drop_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_empty(v) for k, v in value.items() if v not in (None, "", [], {})}
    return value
