"""The AWS provider's well-known labels and extended resources, spelled as upstream spells them.

One place for the names, so the catalog, the docs and later the launch path agree. They are the
constants of aws/karpenter-provider-aws `pkg/apis/v1/labels.go` (the `karpenter.k8s.aws` group)
plus the Kubernetes and Karpenter labels every instance type carries.
"""

from __future__ import annotations

from shared.api.labels import ARCH_LABEL as ARCH_LABEL
from shared.api.labels import CAPACITY_TYPE_LABEL as CAPACITY_TYPE_LABEL
from shared.api.labels import INSTANCE_TYPE_LABEL as INSTANCE_TYPE_LABEL
from shared.api.labels import OS_LABEL as OS_LABEL
from shared.api.labels import REGION_LABEL as REGION_LABEL
from shared.api.labels import ZONE_LABEL as ZONE_LABEL

GROUP = "karpenter.k8s.aws"

INSTANCE_HYPERVISOR = f"{GROUP}/instance-hypervisor"
INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED = f"{GROUP}/instance-encryption-in-transit-supported"
INSTANCE_NITRO_ENCLAVES_SUPPORTED = f"{GROUP}/nitro-sandbox"
INSTANCE_CATEGORY = f"{GROUP}/instance-category"
INSTANCE_CAPABILITY_FLEX = f"{GROUP}/instance-capability-flex"
INSTANCE_FAMILY = f"{GROUP}/instance-family"
INSTANCE_GENERATION = f"{GROUP}/instance-generation"
INSTANCE_LOCAL_NVME = f"{GROUP}/instance-local-nvme"
INSTANCE_SIZE = f"{GROUP}/instance-size"
INSTANCE_CPU = f"{GROUP}/instance-cpu"
INSTANCE_CPU_MANUFACTURER = f"{GROUP}/instance-cpu-manufacturer"
INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ = f"{GROUP}/instance-cpu-sustained-clock-speed-mhz"
INSTANCE_MEMORY = f"{GROUP}/instance-memory"
INSTANCE_EBS_BANDWIDTH = f"{GROUP}/instance-ebs-bandwidth"
INSTANCE_NETWORK_BANDWIDTH = f"{GROUP}/instance-network-bandwidth"
INSTANCE_GPU_NAME = f"{GROUP}/instance-gpu-name"
INSTANCE_GPU_MANUFACTURER = f"{GROUP}/instance-gpu-manufacturer"
INSTANCE_GPU_COUNT = f"{GROUP}/instance-gpu-count"
INSTANCE_GPU_MEMORY = f"{GROUP}/instance-gpu-memory"
INSTANCE_ACCELERATOR_NAME = f"{GROUP}/instance-accelerator-name"
INSTANCE_ACCELERATOR_MANUFACTURER = f"{GROUP}/instance-accelerator-manufacturer"
INSTANCE_ACCELERATOR_COUNT = f"{GROUP}/instance-accelerator-count"
INSTANCE_TENANCY = f"{GROUP}/instance-tenancy"
NODECLASS = f"{GROUP}/ec2nodeclass"
TOPOLOGY_ZONE_ID = "topology.k8s.aws/zone-id"

WELL_KNOWN_LABELS = frozenset(
    {
        INSTANCE_HYPERVISOR,
        INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        INSTANCE_NITRO_ENCLAVES_SUPPORTED,
        INSTANCE_CATEGORY,
        INSTANCE_CAPABILITY_FLEX,
        INSTANCE_FAMILY,
        INSTANCE_GENERATION,
        INSTANCE_LOCAL_NVME,
        INSTANCE_SIZE,
        INSTANCE_CPU,
        INSTANCE_CPU_MANUFACTURER,
        INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        INSTANCE_MEMORY,
        INSTANCE_EBS_BANDWIDTH,
        INSTANCE_NETWORK_BANDWIDTH,
        INSTANCE_GPU_NAME,
        INSTANCE_GPU_MANUFACTURER,
        INSTANCE_GPU_COUNT,
        INSTANCE_GPU_MEMORY,
        INSTANCE_ACCELERATOR_NAME,
        INSTANCE_ACCELERATOR_MANUFACTURER,
        INSTANCE_ACCELERATOR_COUNT,
        INSTANCE_TENANCY,
        TOPOLOGY_ZONE_ID,
    }
)
"""The labels the AWS provider adds to Karpenter's well-known set (requirements may name them)."""

# Extended resources an instance type's capacity may hold.
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
AWS_NEURON = "aws.amazon.com/neuron"
AWS_NEURON_CORE = "aws.amazon.com/neuroncore"
HABANA_GAUDI = "habana.ai/gaudi"
AWS_POD_ENI = "vpc.amazonaws.com/pod-eni"
EFA = "vpc.amazonaws.com/efa"
PRIVATE_IPV4_ADDRESS = "vpc.amazonaws.com/PrivateIPv4Address"

AWS_TO_KUBE_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
"""EC2's processor architectures by the `kubernetes.io/arch` value they become."""

ON_DEMAND, SPOT, RESERVED = "on-demand", "spot", "reserved"
