"""A what-if's change to the demand's NodePools: pools changed or added, pools dropped.

Pure. Each changed pool must pass the same validation `nodewright validate` applies; a pool
changed replaces the recorded one from the start and in every later application of it (the
change is what the user would have applied instead), a dropped pool is gone from the start.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from shared.api.validation import validate_nodepool


class ChangeError(ValueError):
    """A change that cannot be applied: the command exits 2 and says which field and rule."""


def changed(
    document: Mapping[str, Any],
    nodepools: Sequence[tuple[str, Any]],
    drop: Sequence[str],
    *,
    static_capacity: bool | None = None,
) -> dict[str, Any]:
    """The scenario document with `nodepools` ((source, decoded document) each) applied and the
    pools named in `drop` removed. Says what went where in `notes`. `static_capacity`: the gate
    each changed pool is admitted by, as the sim's API admits one."""
    out = copy.deepcopy(dict(document))
    spec = out["spec"]
    known = _names(spec)
    replacing: dict[str, dict[str, Any]] = {}
    for source, raw in nodepools:
        result = validate_nodepool(raw, static_capacity=static_capacity)
        if result.nodepool is None:
            problems = "; ".join(str(e) for e in result.errors)
            raise ChangeError(f"{source}: NodePool {result.name or '?'} is not valid: {problems}")
        replacing[result.nodepool.metadata.name] = dict(raw)
    for name in drop:
        if name not in known:
            raise ChangeError(
                f"--drop {name}: no NodePool of that name in the log (it has: {', '.join(sorted(known))})"
            )
        if name in replacing:
            raise ChangeError(f"--drop {name}: the same pool is also given with --nodepool")
    pools = [replacing.get(_name(p), p) for p in spec["nodePools"] if _name(p) not in drop]
    pools += [p for n, p in replacing.items() if n not in known]
    spec["nodePools"] = pools
    timeline = []
    for entry in spec["timeline"]:
        applied = entry.get("applyNodePool")
        target = _name(applied) if applied else entry.get("deleteNodePool")
        if target in drop:
            continue
        if applied and target in replacing:
            continue  # the change stands for every application of the pool
        timeline.append(entry)
    spec["timeline"] = timeline
    return out


def pool_names(document: Mapping[str, Any]) -> set[str]:
    return _names(document["spec"])


def _names(spec: Mapping[str, Any]) -> set[str]:
    names = {_name(p) for p in spec.get("nodePools") or []}
    names |= {_name(e["applyNodePool"]) for e in spec.get("timeline") or [] if e.get("applyNodePool")}
    return names


def _name(pool: Mapping[str, Any]) -> str:
    return str((pool.get("metadata") or {}).get("name") or "")
