"""A scenario's AWS account (`spec.cloud.aws`) made on moto over HTTP: the scenario's own
EC2NodeClass then resolves Ready from it; made once; never on an endpoint that is not local."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.adapters.aws.resolver import NodeClassResolver
from shared.adapters.aws.seed import SeedRefused, seed
from shared.adapters.aws.session import AwsSettings
from shared.api.scenario import parse_scenario
from tests.aws import REGION, moto_clients, moto_reset, moto_url
from tests.factories import nodepool_doc, scenario_doc

__all__ = ["moto_reset", "moto_url"]

pytestmark = pytest.mark.asyncio(loop_scope="module")

DISCOVERY = {"karpenter.sh/discovery": "demo"}
NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default", "uid": "5a1d-uid"},
    "spec": {
        "role": "KarpenterNodeRole-demo",
        "amiFamily": "AL2023",
        "amiSelectorTerms": [{"tags": DISCOVERY}],
        "subnetSelectorTerms": [{"tags": DISCOVERY}],
        "securityGroupSelectorTerms": [{"tags": DISCOVERY}],
    },
}
AWS = {
    "subnets": [
        {"zone": "us-east-1a", "cidrBlock": "10.0.1.0/24", "tags": DISCOVERY},
        {"zone": "us-east-1b", "cidrBlock": "10.0.2.0/24", "tags": DISCOVERY},
    ],
    "securityGroups": [{"name": "nodes", "tags": DISCOVERY}],
    "images": [{"architecture": "x86_64", "tags": DISCOVERY}, {"architecture": "arm64", "tags": DISCOVERY}],
    "roles": ["KarpenterNodeRole-demo"],
}


def scenario():
    document = scenario_doc(
        "aws", cloud={"aws": AWS}, nodePools=[nodepool_doc(**{"metadata.name": "general"})], nodeClasses=[NODECLASS]
    )
    return parse_scenario(document)


async def test_a_seeded_account_resolves_the_scenarios_class_ready_and_is_made_once(moto_url, moto_reset):
    played = scenario()
    clients = moto_clients(moto_url)
    settings = AwsSettings(REGION, moto_url)
    made = await seed(clients, settings, played.spec.cloud.aws, "demo")
    assert made.made and len(made.subnets) == 2 and set(made.security_groups) == {"nodes"} and len(made.images) == 2

    resolver = NodeClassResolver(clients, cluster="demo", region=REGION, k8s_version="1.36")
    out = await resolver.resolve(played.nodeclasses[0], datetime(2026, 3, 1, tzinfo=UTC))
    assert out.ready, out.status["conditions"]
    assert sorted(s["zone"] for s in out.status["subnets"]) == ["us-east-1a", "us-east-1b"]
    assert {a["id"] for a in out.status["amis"]} == set(made.images)  # one per architecture

    again = await seed(clients, settings, played.spec.cloud.aws, "demo")
    assert not again.made and again.vpc == made.vpc


@pytest.mark.parametrize("endpoint", [None, "https://ec2.us-east-1.amazonaws.com", "http://10.1.2.3:5000"])
async def test_seeding_is_refused_anywhere_but_a_local_endpoint(endpoint):
    with pytest.raises(SeedRefused, match="only on a local endpoint"):
        await seed(moto_clients("http://127.0.0.1:9"), AwsSettings(REGION, endpoint), scenario().spec.cloud.aws, "x")
