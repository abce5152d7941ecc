"""Capacity, overhead, allocatable and labels of real instance types, each figure worked out by
hand from upstream's formulas (aws/karpenter-provider-aws `instancetype/types.go`):

    pods      = ENIs on the default card * (IPv4 per ENI - 1) + 2     (AL2023 and AL2)
    memory    = (MiB - 64 if Graviton) - ceil(that * 0.075)  Mi
    kube cpu  = 6% of the 1st core + 1% of the 2nd + 0.5% of the 3rd-4th + 0.25% of the rest
    kube mem  = 11 * ENI-limited pods + 255  Mi;  eviction memory = 100Mi
    storage   = 20Gi; kube-reserved 1Gi; eviction 10% of it
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from shared.aws import labels as L
from shared.aws.instance_types import instance_type_entry
from shared.aws.pricing import PriceBook
from shared.aws.settings import NodeClassSettings
from shared.scheduling.claims import instance_option
from tests.unit.aws.ec2_entries import (
    C6G_XLARGE,
    G4DN_XLARGE,
    INF2_XLARGE,
    M5_LARGE,
    P3_2XLARGE,
    P4D_24XLARGE,
    T3_MICRO,
)

Mi, Gi = 2**20, 2**30
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
PRICES = PriceBook({"m5.large": 0.096, "t3.micro": 0.0104, "c6g.xlarge": 0.136, "p3.2xlarge": 3.06})
STORAGE = {"ephemeral-storage": Decimal(20 * Gi)}
STORAGE_ALLOCATABLE = Decimal(20 * Gi - 1 * Gi - 2 * Gi)  # 20Gi - 1Gi kube-reserved - ceil(20Gi * 10%) = 17Gi


def _entry(raw, settings=None, prices=PRICES, offered=ZONES):
    return instance_type_entry(
        raw, region="us-east-1", offered_zones=offered, all_zones=ZONES, prices=prices, settings=settings
    )


CASES = {
    # name: (entry, capacity, allocatable)
    "m5.large": (
        M5_LARGE,
        # pods 3*(10-1)+2 = 29; memory 8192 - ceil(8192*0.075 = 614.4) = 8192 - 615 = 7577Mi
        {"cpu": 2, "memory": 7577 * Mi, "pods": 29},
        # cpu 2000m - (60 + 10) = 1930m; memory 7577 - (11*29+255 = 574) - 100 = 6903Mi
        {"cpu": Decimal("1.93"), "memory": 6903 * Mi, "pods": 29},
    ),
    "t3.micro": (
        T3_MICRO,
        # pods 2*(2-1)+2 = 4; memory 1024 - ceil(76.8) = 1024 - 77 = 947Mi
        {"cpu": 2, "memory": 947 * Mi, "pods": 4},
        # memory 947 - (11*4+255 = 299) - 100 = 548Mi
        {"cpu": Decimal("1.93"), "memory": 548 * Mi, "pods": 4},
    ),
    "c6g.xlarge (Graviton)": (
        C6G_XLARGE,
        # pods 4*(15-1)+2 = 58; memory (8192 - 64 = 8128) - ceil(8128*0.075 = 609.6) = 8128 - 610 = 7518Mi
        {"cpu": 4, "memory": 7518 * Mi, "pods": 58},
        # cpu 4000m - (60 + 10 + 2000*0.005 = 10) = 3920m; memory 7518 - (11*58+255 = 893) - 100 = 6525Mi
        {"cpu": Decimal("3.92"), "memory": 6525 * Mi, "pods": 58},
    ),
    "p3.2xlarge (GPU)": (
        P3_2XLARGE,
        # memory 62464 - ceil(4684.8) = 62464 - 4685 = 57779Mi; one V100
        {"cpu": 8, "memory": 57779 * Mi, "pods": 58, L.NVIDIA_GPU: 1},
        # cpu 8000m - (60 + 10 + 10 + 4000*0.0025 = 10) = 7910m; memory 57779 - 893 - 100 = 56786Mi
        {"cpu": Decimal("7.91"), "memory": 56786 * Mi, "pods": 58, L.NVIDIA_GPU: 1},
    ),
    "inf2.xlarge (Neuron)": (
        INF2_XLARGE,
        # memory 16384 - ceil(1228.8) = 16384 - 1229 = 15155Mi; 1 device x 2 cores
        {"cpu": 4, "memory": 15155 * Mi, "pods": 58, L.AWS_NEURON: 1, L.AWS_NEURON_CORE: 2},
        {"cpu": Decimal("3.92"), "memory": (15155 - 893 - 100) * Mi, "pods": 58, L.AWS_NEURON: 1, L.AWS_NEURON_CORE: 2},
    ),
    "p4d.24xlarge (EFA, 8 GPUs)": (
        P4D_24XLARGE,
        # pods on card 0 only: 15*(50-1)+2 = 737; memory 1179648 - ceil(88473.6) = 1091174Mi
        {"cpu": 96, "memory": 1091174 * Mi, "pods": 737, L.NVIDIA_GPU: 8, L.EFA: 4},
        # cpu 96000m - (60 + 10 + 10 + 92000*0.0025 = 230) = 95690m; memory - (11*737+255 = 8362) - 100
        {"cpu": Decimal("95.69"), "memory": (1091174 - 8362 - 100) * Mi, "pods": 737, L.NVIDIA_GPU: 8, L.EFA: 4},
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_capacity_and_allocatable_follow_upstreams_formulas(case):
    raw, capacity, allocatable = CASES[case]
    entry = _entry(raw)
    assert dict(entry.capacity) == {k: Decimal(v) for k, v in {**capacity, **STORAGE}.items()}
    assert dict(entry.allocatable) == {
        k: Decimal(v) for k, v in {**allocatable, "ephemeral-storage": STORAGE_ALLOCATABLE}.items()
    }


SETTINGS = {
    # name: (node class, pods, kube-reserved memory MiB, eviction memory bytes)
    "maxPods 110 on AL2023: kube-reserved memory still from ENI-limited pods (29)": (
        {"kubelet": {"maxPods": 110}},
        110,
        11 * 29 + 255,
        100 * Mi,
    ),
    "maxPods 110 on Bottlerocket: kube-reserved memory from maxPods": (
        {"amiFamily": "Bottlerocket", "kubelet": {"maxPods": 110}},
        110,
        11 * 110 + 255,
        100 * Mi,
    ),
    "podsPerCore 10: min(10 * 2 vCPU, 29) = 20": ({"kubelet": {"podsPerCore": 10}}, 20, 574, 100 * Mi),
    "podsPerCore is ignored on Bottlerocket": (
        {"amiFamily": "Bottlerocket", "kubelet": {"podsPerCore": 10}},
        29,
        11 * 29 + 255,
        100 * Mi,
    ),
    "reservedENIs 1: (3-1)*(10-1)+2 = 20 pods, memory overhead unchanged": ({"reservedENIs": 1}, 20, 574, 100 * Mi),
    "evictionHard memory.available 5%: ceil(7577Mi * 5 / 100)": (
        {"kubelet": {"evictionHard": {"memory.available": "5%"}}},
        29,
        574,
        -(-7577 * Mi * 5 // 100),
    ),
    "evictionHard memory.available 100% disables it": (
        {"kubelet": {"evictionHard": {"memory.available": "100%"}}},
        29,
        574,
        0,
    ),
    "evictionHard memory.available 1Gi": ({"kubelet": {"evictionHard": {"memory.available": "1Gi"}}}, 29, 574, Gi),
}


@pytest.mark.parametrize("case", SETTINGS, ids=list(SETTINGS))
def test_the_node_class_changes_pods_and_overhead(case):
    spec, pods, kube_memory_mib, eviction = SETTINGS[case]
    entry = _entry(M5_LARGE, NodeClassSettings.model_validate(spec))
    assert entry.capacity["pods"] == pods
    assert entry.overhead["memory"] == kube_memory_mib * Mi + eviction
    assert entry.allocatable["memory"] == 7577 * Mi - kube_memory_mib * Mi - eviction


def test_reserved_resources_and_storage_settings_add_up():
    spec = {
        "kubelet": {
            "kubeReserved": {"cpu": "200m", "memory": "1Gi"},
            "systemReserved": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "2Gi"},
            "evictionHard": {"nodefs.available": "5%"},
        },
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "100Gi"}}],
    }
    entry = _entry(M5_LARGE, NodeClassSettings.model_validate(spec))
    assert entry.capacity["ephemeral-storage"] == 100 * Gi
    assert entry.allocatable["cpu"] == Decimal("1.7")  # 2 - 0.2 kube - 0.1 system
    assert entry.allocatable["memory"] == (7577 - 1024 - 512 - 100) * Mi
    # 100Gi - 1Gi kube - 2Gi system - 5Gi eviction (5% of 100Gi)
    assert entry.allocatable["ephemeral-storage"] == (100 - 1 - 2 - 5) * Gi


def test_raid0_instance_store_is_the_ephemeral_storage():
    entry = _entry(G4DN_XLARGE, NodeClassSettings(instanceStorePolicy="RAID0"))
    assert entry.capacity["ephemeral-storage"] == 125 * 10**9  # TotalSizeInGB is decimal gigabytes


LABELS = {
    "m5.large": (
        M5_LARGE,
        {
            L.INSTANCE_TYPE_LABEL: "m5.large",
            L.ARCH_LABEL: "amd64",
            L.OS_LABEL: "linux",
            L.REGION_LABEL: "us-east-1",
            L.INSTANCE_CATEGORY: "m",
            L.INSTANCE_GENERATION: "5",
            L.INSTANCE_FAMILY: "m5",
            L.INSTANCE_SIZE: "large",
            L.INSTANCE_CPU: "2",
            L.INSTANCE_MEMORY: "8192",
            L.INSTANCE_CPU_MANUFACTURER: "intel",
            L.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: "3100",
            L.INSTANCE_HYPERVISOR: "nitro",
            L.INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: "false",
            L.INSTANCE_NITRO_ENCLAVES_SUPPORTED: "false",
            L.INSTANCE_CAPABILITY_FLEX: "false",
            L.INSTANCE_NETWORK_BANDWIDTH: "750",
            L.INSTANCE_EBS_BANDWIDTH: "4750",
        },
    ),
    "c6g.xlarge": (
        C6G_XLARGE,
        {
            L.ARCH_LABEL: "arm64",
            L.INSTANCE_CATEGORY: "c",
            L.INSTANCE_GENERATION: "6",
            L.INSTANCE_FAMILY: "c6g",
            L.INSTANCE_CPU_MANUFACTURER: "aws",
            L.INSTANCE_NITRO_ENCLAVES_SUPPORTED: "true",
            L.INSTANCE_NETWORK_BANDWIDTH: "1250",
        },
    ),
    "p3.2xlarge": (
        P3_2XLARGE,
        {
            L.INSTANCE_GPU_NAME: "v100",
            L.INSTANCE_GPU_MANUFACTURER: "nvidia",
            L.INSTANCE_GPU_COUNT: "1",
            L.INSTANCE_GPU_MEMORY: "16384",
            L.INSTANCE_HYPERVISOR: "xen",
            L.INSTANCE_EBS_BANDWIDTH: "1750",
        },
    ),
    "inf2.xlarge": (
        INF2_XLARGE,
        {
            L.INSTANCE_ACCELERATOR_NAME: "inferentia2",
            L.INSTANCE_ACCELERATOR_MANUFACTURER: "aws",
            L.INSTANCE_ACCELERATOR_COUNT: "1",
            L.INSTANCE_CPU_MANUFACTURER: "amd",
        },
    ),
    "g4dn.xlarge": (G4DN_XLARGE, {L.INSTANCE_LOCAL_NVME: "125", L.INSTANCE_GPU_NAME: "t4"}),
}


@pytest.mark.parametrize("case", LABELS, ids=list(LABELS))
def test_well_known_labels(case):
    raw, expected = LABELS[case]
    labels = _entry(raw).labels
    assert {k: labels.get(k) for k in expected} == expected


def test_a_label_the_type_lacks_is_absent():
    labels = _entry(M5_LARGE).labels
    for absent in (L.INSTANCE_GPU_NAME, L.INSTANCE_LOCAL_NVME, L.INSTANCE_ACCELERATOR_NAME):
        assert absent not in labels


def test_offerings_per_zone_and_capacity_type_with_prices_and_availability():
    spot = PriceBook(PRICES.on_demand, {}, spot_refreshed=False)
    entry = _entry(M5_LARGE, prices=spot, offered=("us-east-1a", "us-east-1b"))
    got = {(o.zone, o.capacity_type): (o.price, o.available) for o in entry.offerings}
    assert got == {
        ("us-east-1a", "on-demand"): (0.096, True),
        ("us-east-1a", "spot"): (0.096, True),  # before the first spot refresh, spot costs on-demand
        ("us-east-1b", "on-demand"): (0.096, True),
        ("us-east-1b", "spot"): (0.096, True),
        ("us-east-1c", "on-demand"): (0.096, False),  # the type is not offered in that zone
        ("us-east-1c", "spot"): (0.096, False),
    }


def test_a_type_without_a_price_offers_nothing_available():
    entry = _entry(M5_LARGE, prices=PriceBook({}))
    assert entry.offerings and not any(o.available for o in entry.offerings)


def test_only_the_capacity_types_ec2_sells_and_karpenter_launches():
    kinds = {o.capacity_type for o in _entry(P4D_24XLARGE).offerings}
    assert kinds == {"on-demand", "spot"}  # capacity-block is not one of them


def test_the_port_shape_is_what_the_scheduler_reads():
    port = _entry(M5_LARGE, offered=("us-east-1a",)).as_port()
    assert port["allocatable"] == {"cpu": "1930m", "memory": "6903Mi", "ephemeral-storage": "17Gi", "pods": "29"}
    assert [(o["zone"], o["capacityType"], o["available"]) for o in port["offerings"]] == [
        ("us-east-1a", "on-demand", True),
        ("us-east-1a", "spot", True),
        ("us-east-1b", "on-demand", False),  # every offering is said, flagged: drift asks if one exists
        ("us-east-1b", "spot", False),
        ("us-east-1c", "on-demand", False),
        ("us-east-1c", "spot", False),
    ]
    option = instance_option(port)
    assert option.name == "m5.large"
    assert [(o.zone, o.capacity_type) for o in option.offers] == [("us-east-1a", "on-demand"), ("us-east-1a", "spot")]
    assert {o.zone for o in option.unavailable} == {"us-east-1b", "us-east-1c"}  # never planned into
    assert option.allocatable["memory"] == 6903 * Mi


BAD = {
    "no vCPU figure": ({**M5_LARGE, "VCpuInfo": {}}, "VCpuInfo.DefaultVCpus"),
    "negative memory": ({**M5_LARGE, "MemoryInfo": {"SizeInMiB": -1}}, "MemoryInfo.SizeInMiB"),
    "no network info": ({k: v for k, v in M5_LARGE.items() if k != "NetworkInfo"}, "NetworkInfo"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_malformed_entry_fails_naming_the_field(case):
    raw, field = BAD[case]
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        _entry(raw)


def test_an_unknown_architecture_fails_naming_it():
    raw = {**M5_LARGE, "ProcessorInfo": {"SupportedArchitectures": ["i386"]}}
    with pytest.raises(ValueError, match="SupportedArchitectures"):
        _entry(raw)


BAD_SETTINGS = {
    "kubeReserved of an unknown resource": ({"kubelet": {"kubeReserved": {"gpu": "1"}}}, "kubeReserved"),
    "negative systemReserved": ({"kubelet": {"systemReserved": {"cpu": "-1"}}}, "systemReserved"),
    "unknown eviction signal": ({"kubelet": {"evictionHard": {"memory.free": "1Gi"}}}, "evictionHard"),
    "eviction percentage over 100": ({"kubelet": {"evictionHard": {"memory.available": "120%"}}}, "evictionHard"),
    "eviction value not a quantity": ({"kubelet": {"evictionHard": {"memory.available": "lots"}}}, "evictionHard"),
    "unknown AMI family": ({"amiFamily": "Gentoo"}, "amiFamily"),
    "overhead percent of 1": ({"vmMemoryOverheadPercent": 1}, "vmMemoryOverheadPercent"),
    "negative maxPods": ({"kubelet": {"maxPods": -1}}, "maxPods"),
}


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=list(BAD_SETTINGS))
def test_bad_node_class_settings_fail_naming_the_field(case):
    spec, field = BAD_SETTINGS[case]
    with pytest.raises(ValidationError, match=field):
        NodeClassSettings.model_validate(spec)
