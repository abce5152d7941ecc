"""Drift detection (reference §5.6): whether a launched claim no longer matches its pool.

`NodePoolDrifted`: the pool's template hash changed since the claim was made (both hashes known
and of the same version: a new hashing scheme never drifts a whole fleet). `RequirementsDrifted`:
the claim's labels no longer satisfy the pool's requirements (a new required key, narrowed
values, DoesNotExist on a key it has); broadening values or loosening to Exists does not drift.
The first that holds is the reason. Drifted claims go empty ones first, then oldest drift first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.scheduling.requirements import Requirements

NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"


@dataclass(frozen=True, slots=True)
class Stamp:
    """A template hash and the version of the scheme that made it."""

    hash: str | None
    version: str | None


def drift_reason(
    *,
    launched: bool,
    claim: Stamp,
    pool: Stamp,
    claim_labels: Mapping[str, str],
    pool_requirements: Requirements,
) -> str | None:
    """Why the claim is drifted, or None."""
    if not launched:
        return None
    if claim.hash and pool.hash and claim.version == pool.version and claim.hash != pool.hash:
        return NODEPOOL_DRIFTED
    if Requirements.from_labels(claim_labels).compatible(pool_requirements):
        return REQUIREMENTS_DRIFTED
    return None


@dataclass(frozen=True, slots=True)
class DriftedClaim:
    nodeclaim: str
    empty: bool
    drifted_since: datetime


def drift_order(claims: Sequence[DriftedClaim]) -> list[str]:
    """Empty claims first (they cost nothing to move), then the longest drifted, then by name."""
    ordered = sorted(claims, key=lambda c: (not c.empty, c.drifted_since, c.nodeclaim))
    return [c.nodeclaim for c in ordered]
