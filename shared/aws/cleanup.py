"""What a deleted EC2NodeClass leaves behind in AWS, and which of it is Karpenter's to delete: pure.

As upstream's nodeclass termination (aws/karpenter-provider-aws `pkg/controllers/nodeclass/`):
every launch template tagged with the cluster and the class goes, and the instance profiles made
for the class's `spec.role`, found under the class's own IAM path. A profile is deleted only when
its path and tags both say it was made for this class in this cluster, so a `spec.instanceProfile`
the user gave, or another cluster's profile, is never touched whatever its name.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.aws.launch_template import EKS_CLUSTER_TAG, NODECLASS_TAG, cluster_tag
from shared.aws.nodeclass import Filter

PROFILE_ROOT = "karpenter"


def profile_path(region: str, cluster: str, uid: str | None = None) -> str:
    """The IAM path of the profiles made for a class (`/karpenter/<region>/<cluster>/<uid>/`, as
    upstream's), or, without a uid, the path under which every class of the cluster keeps them."""
    base = f"/{PROFILE_ROOT}/{region}/{cluster}/"
    return f"{base}{uid}/" if uid else base


def template_filters(cluster: str, nodeclass: str) -> list[Filter]:
    """DescribeLaunchTemplates' filters for the class's templates in this cluster."""
    return [(f"tag:{EKS_CLUSTER_TAG}", (cluster,)), (f"tag:{NODECLASS_TAG}", (nodeclass,))]


def owned_profile(
    path: str, tags: Mapping[str, str], *, region: str, cluster: str, nodeclass: str, uid: str | None
) -> bool:
    """Whether the profile at `path` with `tags` is one the class's `spec.role` made: under the
    class's path (the cluster's when its uid is not known, a class deleted while no watcher ran)
    and tagged for the class and the cluster, as the resolver tags what it makes."""
    if uid is not None and path != profile_path(region, cluster, uid):
        return False
    if not path.startswith(profile_path(region, cluster)):
        return False
    return (
        tags.get(NODECLASS_TAG) == nodeclass
        and tags.get(EKS_CLUSTER_TAG) == cluster
        and tags.get(cluster_tag(cluster)) == "owned"
    )
