"""The EC2NodeClass CRD's markers: descriptions and CEL rules, keyed by model and wire name.

The rules are the API server's form of what `shared.api.nodeclass_validation` checks, with the
same messages (upstream's), so a real API server and nodewright refuse an EC2NodeClass alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from shared.api.ec2nodeclass import (
    AMI,
    AMIFamily,
    AMIRequirement,
    AMISelectorTerm,
    BlockDevice,
    BlockDeviceMapping,
    CapacityReservation,
    CapacityReservationSelectorTerm,
    ConnectionTracking,
    CPUOptions,
    EC2NodeClass,
    EC2NodeClassSpec,
    EC2NodeClassStatus,
    KubeletConfiguration,
    MetadataOptions,
    NetworkInterface,
    PlacementGroupSelector,
    SecurityGroup,
    SecurityGroupSelectorTerm,
    Subnet,
    SubnetSelectorTerm,
)
from shared.api.nodeclass_validation import (
    ALIAS_FAMILIES,
    CLUSTER_TAG_PREFIX,
    EVICTION_SIGNALS,
    RESERVED_RESOURCES,
    RESTRICTED_TAGS,
    WINDOWS_ALIASES,
)
from shared.kube.marker import Marker, Rules

_SELECTOR_TAGS = "Tags the resource must carry, key to value, all of them; a value of '*' matches any value of the key."
_NO_EMPTY_TAGS: Rules = (("self.all(k, k != '' && self[k] != '')", "empty tag keys or values aren't supported"),)


def _one_of(fields: tuple[str, ...]) -> tuple[str, str]:
    """Every term sets at least one of `fields`."""
    listed = ", ".join(f"'{f}'" for f in fields)
    return f"self.all(x, {' || '.join(f'has(x.{f})' for f in fields)})", f"expected at least one, got none, [{listed}]"


def _alone(field: str, others: tuple[str, ...], message: str, *, every: bool) -> tuple[str, str]:
    """`field` set with none of `others`: upstream's `!self.all(...)` or `!self.exists(...)` form."""
    quantifier = "all" if every else "exists"
    return f"!self.{quantifier}(x, has(x.{field}) && ({' || '.join(f'has(x.{o})' for o in others)}))", message


def _quoted(values: Any) -> str:
    return "[" + ",".join(f"'{v}'" for v in values) + "]"


def _family_rule(alias: str, family: AMIFamily) -> tuple[str, str]:
    name = str(family)
    article = "an" if name.startswith("A") else "a"
    return (
        f"!has(self.amiFamily) || !self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == "
        f"'{alias}') || self.amiFamily in ['Custom', '{family}']",
        f"if set, amiFamily must be '{family}' or 'Custom' when using {article} {name} alias",
    )


_SPEC_RULES: Rules = (
    (
        "has(self.role) != has(self.instanceProfile)",
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    *(_family_rule(alias, family) for alias, family in ALIAS_FAMILIES.items()),
    (
        "self.amiSelectorTerms.exists(x, has(x.alias)) || has(self.amiFamily)",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
)
_SIGNAL_KEYS = _quoted(EVICTION_SIGNALS)


def _signals(field: str) -> Marker:
    return Marker(
        f"The kubelet's {field} thresholds, by eviction signal.",
        validations=((f"self.all(x, x in {_SIGNAL_KEYS})", f"valid keys for {field} are {_SIGNAL_KEYS}"),),
    )


def _reserved(field: str, what: str) -> Marker:
    return Marker(
        f"Resources reserved for {what}, by resource name.",
        validations=(
            (
                f"self.all(x, x in {_quoted(RESERVED_RESOURCES)})",
                f"valid keys for {field} are {_quoted(RESERVED_RESOURCES)}",
            ),
            ("self.all(x, !string(self[x]).startsWith('-'))", f"{field} value cannot be a negative resource quantity"),
        ),
    )


NODECLASS_TYPES: dict[type[Any], str] = {
    EC2NodeClass: "An EC2NodeClass says how the AWS provider launches a NodePool's nodes.",
    EC2NodeClassSpec: "The desired launch configuration: network, image, identity and instance settings.",
    EC2NodeClassStatus: "What the provider resolved the selectors to, and the EC2NodeClass's conditions.",
    SubnetSelectorTerm: "One way to select subnets; the fields of a term are ANDed, the terms ORed.",
    SecurityGroupSelectorTerm: "One way to select security groups; fields ANDed, terms ORed.",
    CapacityReservationSelectorTerm: "One way to select capacity reservations; fields ANDed, terms ORed.",
    AMISelectorTerm: "One way to select AMIs; fields ANDed, terms ORed (an alias stands alone).",
}

NODECLASS_FIELDS: dict[tuple[type[BaseModel], str], Marker] = {
    (EC2NodeClass, "apiVersion"): Marker("The versioned schema this object is written in."),
    (EC2NodeClass, "kind"): Marker("The REST resource this object represents, in CamelCase."),
    (EC2NodeClass, "spec"): Marker("The EC2NodeClass's desired state.", validations=_SPEC_RULES),
    (EC2NodeClass, "status"): Marker("The EC2NodeClass's observed state, written by the provider."),
    # --- selectors -----------------------------------------------------------------------------
    (EC2NodeClassSpec, "subnetSelectorTerms"): Marker(
        "The subnets nodes launch in: those any term selects.",
        validations=(
            ("self.size() != 0", "subnetSelectorTerms cannot be empty"),
            _one_of(("tags", "id")),
            _alone(
                "id",
                ("tags",),
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet "
                "selector term",
                every=True,
            ),
        ),
    ),
    (EC2NodeClassSpec, "securityGroupSelectorTerms"): Marker(
        "The security groups nodes get: those any term selects.",
        validations=(
            ("self.size() != 0", "securityGroupSelectorTerms cannot be empty"),
            _one_of(("tags", "id", "name")),
            _alone(
                "id",
                ("tags", "name"),
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a security "
                "group selector term",
                every=True,
            ),
            _alone(
                "name",
                ("tags", "id"),
                "'name' is mutually exclusive, cannot be set with a combination of other fields in a security "
                "group selector term",
                every=True,
            ),
        ),
    ),
    (EC2NodeClassSpec, "capacityReservationSelectorTerms"): Marker(
        "The capacity reservations nodes may launch into: those any term selects.",
        validations=(
            _one_of(("tags", "id", "instanceMatchCriteria")),
            _alone(
                "id",
                ("tags", "ownerID", "instanceMatchCriteria"),
                "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation "
                "selector term",
                every=True,
            ),
        ),
    ),
    (EC2NodeClassSpec, "amiSelectorTerms"): Marker(
        "The AMIs nodes may boot: those any term selects, or the one an alias names.",
        validations=(
            _one_of(("tags", "id", "name", "alias", "ssmParameter")),
            _alone(
                "id",
                ("alias", "tags", "name", "owner"),
                "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                every=False,
            ),
            _alone(
                "alias",
                ("id", "tags", "name", "owner"),
                "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                every=False,
            ),
            (
                "!self.exists(x, has(x.alias)) || self.size() == 1",
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            ),
        ),
    ),
    (SubnetSelectorTerm, "tags"): Marker(_SELECTOR_TAGS, validations=_NO_EMPTY_TAGS),
    (SubnetSelectorTerm, "id"): Marker("The subnet's ID (subnet-...)."),
    (SecurityGroupSelectorTerm, "tags"): Marker(_SELECTOR_TAGS, validations=_NO_EMPTY_TAGS),
    (SecurityGroupSelectorTerm, "id"): Marker("The security group's ID (sg-...)."),
    (SecurityGroupSelectorTerm, "name"): Marker("The security group's name (its GroupName, not a Name tag)."),
    (CapacityReservationSelectorTerm, "tags"): Marker(_SELECTOR_TAGS, validations=_NO_EMPTY_TAGS),
    (CapacityReservationSelectorTerm, "id"): Marker("The capacity reservation's ID (cr-...)."),
    (CapacityReservationSelectorTerm, "ownerID"): Marker("The AWS account that owns the reservation."),
    (CapacityReservationSelectorTerm, "instanceMatchCriteria"): Marker(
        "open: any matching instance may use the reservation; targeted: only instances that name it."
    ),
    (AMISelectorTerm, "alias"): Marker(
        "An AMI family and version, family@version (al2023@latest, al2@v20240807); stands alone.",
        validations=(
            (
                "self.matches('^[a-zA-Z0-9]+@.+$')",
                "'alias' is improperly formatted, must match the format 'family@version'",
            ),
            (
                f"self.split('@')[0] in {_quoted(ALIAS_FAMILIES)}",
                "family is not supported, must be one of the following: " + ", ".join(f"'{f}'" for f in ALIAS_FAMILIES),
            ),
            (
                f"!(self.split('@')[0] in {_quoted(sorted(WINDOWS_ALIASES))}) || self.split('@')[1] == 'latest'",
                "windows families may only specify version 'latest'",
            ),
        ),
    ),
    (AMISelectorTerm, "tags"): Marker(_SELECTOR_TAGS, validations=_NO_EMPTY_TAGS),
    (AMISelectorTerm, "id"): Marker("The AMI's ID (ami-...)."),
    (AMISelectorTerm, "name"): Marker("The AMI's name; may hold wildcards."),
    (AMISelectorTerm, "owner"): Marker("The AMI's owner: an account ID or an alias (self, amazon)."),
    (AMISelectorTerm, "ssmParameter"): Marker("An SSM parameter whose value is the AMI's ID."),
    (EC2NodeClassSpec, "amiFamily"): Marker(
        "Which bootstrap the user data is written for; required unless an alias implies it."
    ),
    (EC2NodeClassSpec, "placementGroupSelector"): Marker(
        "The placement group nodes launch in, by name or ID.",
        validations=(
            ("has(self.name) || has(self.id)", "expected at least one, got none, ['name', 'id']"),
            ("!(has(self.name) && has(self.id))", "'name' and 'id' are mutually exclusive"),
        ),
    ),
    (PlacementGroupSelector, "name"): Marker("The placement group's name."),
    (PlacementGroupSelector, "id"): Marker("The placement group's ID (pg-...)."),
    # --- identity and instance -----------------------------------------------------------------
    (EC2NodeClassSpec, "associatePublicIPAddress"): Marker(
        "Whether nodes get a public IPv4 address; unset: the subnet's setting."
    ),
    (EC2NodeClassSpec, "ipPrefixCount"): Marker("How many IPv4 prefixes the primary interface gets."),
    (EC2NodeClassSpec, "userData"): Marker("User data merged with (or, for Custom, instead of) the bootstrap."),
    (EC2NodeClassSpec, "role"): Marker(
        "The IAM role nodes run as; the provider manages its instance profile. Exclusive with instanceProfile.",
        validations=(("self != ''", "role cannot be empty"),),
    ),
    (EC2NodeClassSpec, "instanceProfile"): Marker(
        "An instance profile you manage, instead of a role.",
        validations=(("self != ''", "instanceProfile cannot be empty"),),
    ),
    (EC2NodeClassSpec, "tags"): Marker(
        "Tags put on every instance, volume and launch template the provider makes.",
        validations=(
            ("self.all(k, k != '')", "empty tag keys aren't supported"),
            (
                f"self.all(k, k != '{RESTRICTED_TAGS[0]}')",
                f"tag contains a restricted tag matching {RESTRICTED_TAGS[0]}",
            ),
            (
                f"self.all(k, !k.startsWith('{CLUSTER_TAG_PREFIX}'))",
                f"tag contains a restricted tag matching {CLUSTER_TAG_PREFIX}/",
            ),
            *(
                (f"self.all(k, k != '{key}')", f"tag contains a restricted tag matching {key}")
                for key in RESTRICTED_TAGS[1:]
            ),
        ),
    ),
    (EC2NodeClassSpec, "kubelet"): Marker(
        "Kubelet settings for the nodes. The fields listed are checked and read by nodewright; any "
        "other KubeletConfiguration field is kept and passed through, as upstream does.",
        preserve_unknown_fields=True,
        validations=(
            (
                "!has(self.imageGCHighThresholdPercent) || !has(self.imageGCLowThresholdPercent) || "
                "self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent",
                "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
            ),
            (
                "!has(self.evictionSoft) || self.evictionSoft.all(e, has(self.evictionSoftGracePeriod) && "
                "e in self.evictionSoftGracePeriod)",
                "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            ),
            (
                "!has(self.evictionSoftGracePeriod) || self.evictionSoftGracePeriod.all(e, has(self.evictionSoft) && "
                "e in self.evictionSoft)",
                "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            ),
        ),
    ),
    (KubeletConfiguration, "clusterDNS"): Marker("The DNS server addresses the kubelet gives pods."),
    (KubeletConfiguration, "maxPods"): Marker("The most pods a node runs, overriding the instance type's figure."),
    (KubeletConfiguration, "podsPerCore"): Marker("Pods per CPU core; never more than maxPods."),
    (KubeletConfiguration, "systemReserved"): _reserved("systemReserved", "the OS's daemons and kernel"),
    (KubeletConfiguration, "kubeReserved"): _reserved("kubeReserved", "Kubernetes' own components"),
    (KubeletConfiguration, "evictionHard"): _signals("evictionHard"),
    (KubeletConfiguration, "evictionSoft"): _signals("evictionSoft"),
    (KubeletConfiguration, "evictionSoftGracePeriod"): _signals("evictionSoftGracePeriod"),
    (KubeletConfiguration, "evictionMaxPodGracePeriod"): Marker(
        "The longest grace period (seconds) a pod evicted for a soft threshold gets."
    ),
    (KubeletConfiguration, "imageGCHighThresholdPercent"): Marker(
        "Disk usage (percent) above which image garbage collection always runs."
    ),
    (KubeletConfiguration, "imageGCLowThresholdPercent"): Marker(
        "Disk usage (percent) image garbage collection frees down to."
    ),
    (KubeletConfiguration, "cpuCFSQuota"): Marker("Whether CPU limits are enforced with CFS quota."),
    (EC2NodeClassSpec, "blockDeviceMappings"): Marker(
        "The volumes nodes launch with; unset: the AMI family's root volume.",
        validations=(
            (
                "self.filter(x, has(x.rootVolume) && x.rootVolume).size() <= 1",
                "must have only one blockDeviceMappings with rootVolume",
            ),
        ),
    ),
    (BlockDeviceMapping, "deviceName"): Marker("The device name (/dev/xvda)."),
    (BlockDeviceMapping, "ebs"): Marker(
        "The EBS volume to attach.",
        validations=(
            ("has(self.snapshotID) || has(self.volumeSize)", "snapshotID or volumeSize must be defined"),
            (
                "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
                "snapshotID must be set when volumeInitializationRate is set",
            ),
        ),
    ),
    (BlockDeviceMapping, "rootVolume"): Marker("Whether this volume is the kubelet's root directory."),
    (BlockDevice, "deleteOnTermination"): Marker("Whether the volume goes with the instance."),
    (BlockDevice, "encrypted"): Marker("Whether the volume is encrypted."),
    (BlockDevice, "iops"): Marker("Provisioned IOPS (io1, io2, gp3)."),
    (BlockDevice, "kmsKeyID"): Marker("The KMS key that encrypts the volume."),
    (BlockDevice, "snapshotID"): Marker("The snapshot the volume is made from."),
    (BlockDevice, "throughput"): Marker("Throughput in MiB/s (gp3)."),
    (BlockDevice, "volumeInitializationRate"): Marker(
        "MiB/s at which a volume from a snapshot is initialized.", format="int32"
    ),
    (BlockDevice, "volumeSize"): Marker("The volume's size, at most 64T."),
    (BlockDevice, "volumeType"): Marker("The EBS volume type."),
    (EC2NodeClassSpec, "networkInterfaces"): Marker(
        "The network interfaces nodes launch with; unset: one primary interface.",
        validations=(
            (
                "self.size() == 0 || self.exists(x, x.networkCardIndex == 0 && x.deviceIndex == 0 && "
                "x.interfaceType == 'interface')",
                "networkInterfaces must include a primary interface with interfaceType='interface'",
            ),
            (
                "self.all(x, self.filter(y, y.networkCardIndex == x.networkCardIndex && y.deviceIndex == "
                "x.deviceIndex).size() == 1) && self.all(x, x.interfaceType != 'efa-only' || self.filter(y, "
                "y.interfaceType == 'efa-only' && y.networkCardIndex == x.networkCardIndex).size() == 1)",
                "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can "
                "have at most one efa device per network card",
            ),
        ),
    ),
    (NetworkInterface, "networkCardIndex"): Marker("The network card the interface is on."),
    (NetworkInterface, "deviceIndex"): Marker("The interface's position on its card."),
    (NetworkInterface, "interfaceType"): Marker("interface (ENA, with IP addresses) or efa-only."),
    (EC2NodeClassSpec, "instanceStorePolicy"): Marker(
        "What to do with instance-store disks: RAID0 makes them one volume for the kubelet and containers."
    ),
    (EC2NodeClassSpec, "detailedMonitoring"): Marker("Whether instances have one-minute CloudWatch metrics."),
    (EC2NodeClassSpec, "metadataOptions"): Marker(
        "The instance metadata service's options; the defaults require IMDSv2 tokens and one hop."
    ),
    (MetadataOptions, "httpEndpoint"): Marker("Whether the metadata endpoint answers."),
    (MetadataOptions, "httpProtocolIPv6"): Marker("Whether the metadata endpoint answers on IPv6."),
    (MetadataOptions, "httpPutResponseHopLimit"): Marker(
        "How many network hops a token response travels.", format="int64"
    ),
    (MetadataOptions, "httpTokens"): Marker("required: IMDSv2 only; optional: IMDSv1 too."),
    (EC2NodeClassSpec, "context"): Marker("The reserved-capacity or fleet context ID passed to CreateFleet."),
    (EC2NodeClassSpec, "connectionTracking"): Marker(
        "Connection-tracking timeouts for the primary interface.",
        validations=(
            (
                "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
                "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
            ),
        ),
    ),
    (ConnectionTracking, "tcpEstablishedTimeout"): Marker("Seconds an idle TCP connection is tracked.", format="int32"),
    (ConnectionTracking, "udpStreamTimeout"): Marker("Seconds an idle UDP stream is tracked.", format="int32"),
    (ConnectionTracking, "udpTimeout"): Marker("Seconds an idle one-way UDP flow is tracked.", format="int32"),
    (EC2NodeClassSpec, "cpuOptions"): Marker("CPU options of the launched instances."),
    (CPUOptions, "nestedVirtualization"): Marker("Whether instances may run nested virtual machines."),
    # --- status --------------------------------------------------------------------------------
    (EC2NodeClassStatus, "subnets"): Marker("The subnets the selectors resolved to."),
    (EC2NodeClassStatus, "securityGroups"): Marker("The security groups the selectors resolved to."),
    (EC2NodeClassStatus, "capacityReservations"): Marker("The capacity reservations the selectors resolved to."),
    (EC2NodeClassStatus, "amis"): Marker("The AMIs the selectors resolved to, with what each needs of an instance."),
    (EC2NodeClassStatus, "instanceProfile"): Marker("The instance profile nodes launch with."),
    (EC2NodeClassStatus, "conditions"): Marker("The EC2NodeClass's conditions (Ready and what it is made of)."),
    (Subnet, "id"): Marker("The subnet's ID."),
    (Subnet, "zone"): Marker("The subnet's availability zone."),
    (Subnet, "zoneID"): Marker("The subnet's availability zone ID."),
    (SecurityGroup, "id"): Marker("The security group's ID."),
    (SecurityGroup, "name"): Marker("The security group's name."),
    (AMI, "id"): Marker("The AMI's ID."),
    (AMI, "name"): Marker("The AMI's name."),
    (AMI, "requirements"): Marker("What an instance type must satisfy to boot this AMI."),
    (AMI, "deprecated"): Marker("Whether the AMI is deprecated."),
    (AMIRequirement, "key"): Marker("The label key."),
    (AMIRequirement, "operator"): Marker("How the key relates to the values."),
    (AMIRequirement, "values"): Marker("The values.", list_type="atomic"),
    (CapacityReservation, "availabilityZone"): Marker("The reservation's availability zone."),
    (CapacityReservation, "id"): Marker("The reservation's ID."),
    (CapacityReservation, "instanceMatchCriteria"): Marker("open or targeted."),
    (CapacityReservation, "instanceType"): Marker("The instance type reserved."),
    (CapacityReservation, "ownerID"): Marker("The account that owns the reservation."),
    (CapacityReservation, "endTime"): Marker("When the reservation ends, if it does."),
    (CapacityReservation, "interruptible"): Marker("Whether the reservation's capacity may be reclaimed."),
    (CapacityReservation, "reservationType"): Marker("default (on-demand reservation) or capacity-block."),
    (CapacityReservation, "state"): Marker("active, or expiring (a capacity block near its end)."),
}
