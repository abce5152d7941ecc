"""A 50% NodeOverlay on one family, through the pure cores as the services build their catalogs
(`shared.runtime.catalogs.overlaid`, from the overlays folded into the view): the scheduler
launches the family it made cheaper, and consolidation prices both the candidate and its
replacement by the adjusted catalog."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from services.disruption.world import build
from shared.disruption.passes import graceful
from shared.events import contracts as c
from shared.runtime.catalogs import Loaded, overlaid
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.packing import schedule
from shared.scheduling.values import PendingPod
from shared.scheduling.view import SchedulingView
from tests.factories import T0, applied, created, initialized, launched
from tests.unit.disruption.test_service_world import fold

FAMILY = "karpenter.k8s.aws/instance-family"
GI = Decimal(2**30)


def instance(name: str, family: str, cpu: int, price: float) -> InstanceOption:
    resources = {"cpu": Decimal(cpu), "memory": cpu * 4 * GI, "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": name, FAMILY: family}
    return InstanceOption(name, resources, resources, labels, (Offer("a", "on-demand", price),))


LABELS = {"kubernetes.io/arch": "amd64", "team": "a", "karpenter.sh/nodepool": "p"}
"""What the pool (tests.factories.pool_object) requires of its nodes: not drifted."""
CATALOG = [instance("a-4", "a", 4, 2.0), instance("a-2", "a", 2, 1.0), instance("b-2", "b", 2, 1.2)]


def overlay_applied(name: str, family: str, key: str = FAMILY, **spec: Any) -> c.NodeOverlayApplied:
    document = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": [{"key": key, "operator": "In", "values": [family]}], **spec},
    }
    return c.NodeOverlayApplied(nodeoverlay=name, nodeoverlay_object=document, resource_version=1)


def plan_types(*events: c.Event) -> list[str]:
    projection, _ = fold([applied("p"), *events])
    view: SchedulingView = projection.view
    loaded = overlaid(Loaded(CATALOG), view)
    pod = PendingPod("default/w", {"cpu": Decimal(1), "memory": GI})
    plan = schedule([pod], [], list(view.templates({})), loaded.catalog, pool_catalogs=loaded.pools)
    return [o.instance.name for o in plan.claims[0].options]


def test_the_scheduler_launches_the_family_an_overlay_made_cheaper():
    assert plan_types()[0] == "a-2"
    assert plan_types(overlay_applied("half-b", "b", priceAdjustment="-50%"))[0] == "b-2"
    deleted = c.NodeOverlayDeleted(nodeoverlay="half-b")
    assert plan_types(overlay_applied("half-b", "b", priceAdjustment="-50%"), deleted)[0] == "a-2"


def on_a_4(*overlays: c.Event) -> Any:
    """One a-4 node holding a 1-cpu pod: consolidation's single-node replace, if any."""
    node = [
        created("n", "p"),
        launched("n", "p", cpu="4", memory="16Gi", zone="a").model_copy(
            update={"instance_type": "a-4", "labels": LABELS}
        ),
        c.NodeRegistered(
            node="n-node",
            provider_id="sim:///n",
            nodeclaim="n",
            nodepool="p",
            labels={"karpenter.sh/nodepool": "p"},
            allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"},
        ),
        c.NodeClaimRegistered(nodeclaim="n", nodepool="p", node="n-node"),
        initialized("n", "p"),
        c.PodBound(namespace="default", name="w", node="n-node", requests={"cpu": "1"}, labels={"app": "x"}),
    ]
    projection, counters = fold([applied("p"), *overlays, *node])
    loaded = overlaid(Loaded(CATALOG), projection.view)
    return graceful(build(projection, counters, loaded, T0 + timedelta(hours=1)))


def test_consolidation_replaces_with_the_family_an_overlay_made_cheaper():
    plain = on_a_4()
    assert [f.command.reason for f in plain.found] == ["Underutilized"]
    assert plain.found[0].new_claims[0].options[0].instance.name == "a-2"
    cheap_b = on_a_4(overlay_applied("half-b", "b", priceAdjustment="-50%"))
    assert cheap_b.found[0].new_claims[0].options[0].instance.name == "b-2"


def test_consolidation_prices_the_candidate_by_the_adjusted_catalog():
    """The candidate's own type (alone) at 0.5 an hour: nothing is cheaper, so no replace at all."""
    assert on_a_4(overlay_applied("cheap-a4", "a-4", key="node.kubernetes.io/instance-type", price="0.5")).found == []
