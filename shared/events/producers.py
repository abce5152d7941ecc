"""Who appends each event: the one declaration of the log's producers, for the generated table
of who appends, projects and consumes what (`python -m tools.events_table`). A test checks each
service's name here is the `producer` its own appends carry."""

from __future__ import annotations

from collections.abc import Mapping

from shared.events import contracts as c

PRODUCERS: Mapping[str, tuple[type[c.Event], ...]] = {
    "watcher": (
        c.NodePoolApplied,
        c.NodePoolRejected,
        c.NodePoolDeleted,
        c.PodPending,
        c.PodBound,
        c.PodDeleted,
        c.NodeRegistered,
        c.NodeInitialized,
        c.NodeDeleted,
        c.NodeClaimNotReady,
        c.NodeClaimReady,
        c.NodeClaimConditionChanged,
        c.NodeClaimDeletionRequested,
        c.PodDisruptionBudgetApplied,
        c.PodDisruptionBudgetDeleted,
        c.DaemonSetApplied,
        c.DaemonSetDeleted,
        c.NodeClassStatusChanged,
        c.NodeOverlayApplied,
        c.NodeOverlayDeleted,
    ),
    "scheduler": (
        c.NodeClaimCreated,
        c.NodeClaimLaunched,
        c.NodeClaimLaunchFailed,
        c.NodeClaimRegistered,
        c.NodeClaimInitialized,
        c.NodeClaimTerminated,
        c.NodeClaimDeletionRequested,
        c.InstanceInterrupted,
    ),
    "disruption": (
        c.DisruptionBlocked,
        c.Unconsolidatable,
        c.DisruptionDecided,
        c.DisruptionValidated,
        c.DisruptionCancelled,
        c.DisruptionCompleted,
        c.NodeClaimCreated,
        c.NodeClaimDeletionRequested,
        c.FeatureGatesObserved,
    ),
    "termination": (c.NodeClaimDraining, c.NodeClaimTerminated, c.PodEvicted, c.PodEvictionWaiting),
    "cli": (c.NodeClaimDeletionRequested,),
}
"""Producer (the `producer` of its appends' metadata) -> the contracts it appends."""


def producers_of(contract: type[c.Event]) -> tuple[str, ...]:
    return tuple(name for name, appended in PRODUCERS.items() if contract in appended)
