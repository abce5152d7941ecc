"""Kubernetes label syntax and Karpenter's label restrictions.

The syntax rules mirror apimachinery's `IsQualifiedName` / `IsValidLabelValue`; the restriction
rules mirror both the CRD's CEL rules and Karpenter's runtime `IsRestrictedLabel`, because a
NodePool must pass both to become Ready upstream.
"""

from __future__ import annotations

import re

KARPENTER_DOMAIN = "karpenter.sh"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
INITIALIZED_LABEL = "karpenter.sh/initialized"
REGISTERED_LABEL = "karpenter.sh/registered"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"
WINDOWS_BUILD_LABEL = "node.kubernetes.io/windows-build"

DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
TERMINATION_TIMESTAMP_ANNOTATION = "karpenter.sh/nodeclaim-termination-timestamp"
EXCLUDE_FROM_LOAD_BALANCERS_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
TERMINATION_FINALIZER = "karpenter.sh/termination"
NODEPOOL_HASH_ANNOTATION = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION_ANNOTATION = "karpenter.sh/nodepool-hash-version"
MIN_VALUES_RELAXED_ANNOTATION = "karpenter.sh/nodeclaim-min-values-relaxed"
NODECLASS_LABEL_PREFIX = "karpenter.k8s.aws"

CAPACITY_TYPES = frozenset({"on-demand", "spot", "reserved"})

WELL_KNOWN_LABELS = frozenset(
    {
        NODEPOOL_LABEL,
        ZONE_LABEL,
        REGION_LABEL,
        INSTANCE_TYPE_LABEL,
        ARCH_LABEL,
        OS_LABEL,
        CAPACITY_TYPE_LABEL,
        WINDOWS_BUILD_LABEL,
    }
)

# Aliased keys that pods and requirements may still use; they mean the stable label.
NORMALIZED_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": ZONE_LABEL,
    "failure-domain.beta.kubernetes.io/region": REGION_LABEL,
    "beta.kubernetes.io/arch": ARCH_LABEL,
    "beta.kubernetes.io/os": OS_LABEL,
    "beta.kubernetes.io/instance-type": INSTANCE_TYPE_LABEL,
}

# Values a well-known requirement may take; a requirement with none of them can never match.
WELL_KNOWN_VALUES = {CAPACITY_TYPE_LABEL: CAPACITY_TYPES}

_NAME_FMT = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(rf"^{_NAME_FMT}$")
_DNS1123_LABEL_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = rf"{_DNS1123_LABEL_FMT}(\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_SUBDOMAIN_FMT}$")
_LABEL_VALUE_FMT = rf"({_NAME_FMT})?"
_LABEL_VALUE_RE = re.compile(rf"^{_LABEL_VALUE_FMT}$")

# The CRD's own key pattern (used by the schema for taint keys/values and requirement keys).
QUALIFIED_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"

_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError: the rule, examples, and the regular expression it checks."""
    shown = "".join(f"{' or ' if i else ''}'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    """apimachinery's IsDNS1123Subdomain, with its messages."""
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """apimachinery's IsQualifiedName: an optional DNS-subdomain prefix, a slash, and a name."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {e}" for e in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _NAME_RE.match(name):
        errs.append("name part " + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    """apimachinery's IsValidLabelValue, with its messages."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(value):
        message = f"a valid label must be an empty string or {_NAME_MSG.removeprefix('must ')}"
        errs.append(_regex_error(message, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
"""apimachinery's TotalAnnotationSizeLimitB: keys and values of an object's annotations together."""


def label_errors(labels: dict[str, str]) -> list[tuple[str, str]]:
    """apimachinery's ValidateLabels: (the refused key or value, why) for each problem. Keys are
    qualified names; values at most 63 characters of the label-value charset."""
    errs = []
    for key, value in labels.items():
        errs += [(key, e) for e in is_qualified_name(key)]
        errs += [(value, e) for e in is_valid_label_value(value)]
    return errs


def annotation_errors(annotations: dict[str, str]) -> tuple[list[tuple[str, str]], int]:
    """apimachinery's ValidateAnnotations: (the refused key, why) for each key that is not a
    qualified name (case does not matter), and the total size of keys and values in bytes,
    which may not pass TOTAL_ANNOTATION_SIZE_LIMIT."""
    errs = [(key, e) for key in annotations for e in is_qualified_name(key.lower())]
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    return errs, size


def label_domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def normalize_key(key: str) -> str:
    return NORMALIZED_LABELS.get(key, key)


def cel_label_key_errors(key: str, *, allow_nodepool: bool = False) -> list[str]:
    """The CRD's CEL rules on label and requirement keys, with upstream's messages."""
    errs = []
    head = key.split("/", 1)[0]
    if key not in (CAPACITY_TYPE_LABEL, NODEPOOL_LABEL) and head.endswith(KARPENTER_DOMAIN):
        errs.append('label domain "karpenter.sh" is restricted')
    if key == NODEPOOL_LABEL and not allow_nodepool:
        errs.append('label "karpenter.sh/nodepool" is restricted')
    if key == HOSTNAME_LABEL:
        errs.append('label "kubernetes.io/hostname" is restricted')
    return errs


def restricted_label_error(key: str) -> str | None:
    """Karpenter's runtime IsRestrictedLabel: well-known labels pass, the karpenter.sh domain does not."""
    if key in WELL_KNOWN_LABELS:
        return None
    domain = label_domain(key)
    if domain == KARPENTER_DOMAIN or domain.endswith("." + KARPENTER_DOMAIN) or key == HOSTNAME_LABEL:
        return (
            f"using label {key} is not allowed as it might interfere with the internal provisioning logic; "
            f"specify a well known label: {sorted(WELL_KNOWN_LABELS)}, or a custom label that does not use "
            f"a restricted domain: ['{KARPENTER_DOMAIN}']"
        )
    return None
