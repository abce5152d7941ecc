"""Kubernetes resource quantities as exact decimals.

Parsing is delegated to the Kubernetes client's `parse_quantity`; the schema pattern is the CRD's,
so a value is accepted here exactly when the API server would accept it.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, GetCoreSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from shared.api.bounds import quantity_error, to_nanos


def _client_parser() -> Callable[[Any], Decimal]:
    """The Kubernetes client's `parse_quantity`, its module loaded alone. Imported the usual way
    it runs the `kubernetes` package's `__init__`, which brings the whole API client (requests,
    oauthlib, websocket...): about 30 MB of memory and 0.2 s in every service process, for one
    function that needs only `decimal`."""
    loaded = sys.modules.get("kubernetes.utils.quantity")
    package = importlib.util.find_spec("kubernetes") if loaded is None else None  # finds, runs nothing
    if package is not None and package.submodule_search_locations:
        path = Path(next(iter(package.submodule_search_locations))) / "utils" / "quantity.py"
        spec = importlib.util.spec_from_file_location("nodewright._kubernetes_quantity", path)
        if spec is not None and spec.loader is not None and path.is_file():
            loaded = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(loaded)
    if loaded is None:
        from kubernetes.utils.quantity import parse_quantity

        return parse_quantity
    return loaded.parse_quantity


parse_quantity = _client_parser()

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
    r"|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

_BINARY = [("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)]
_DECIMAL = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]


def parse(text: str | int) -> Decimal:
    """Parse a quantity (`100m`, `1.5`, `1000Gi`, `2k`, `1e3`) into an exact Decimal."""
    if isinstance(text, bool):
        raise ValueError(f"quantity must be an integer or a string, not {text!r}")
    if isinstance(text, int):
        return Decimal(text)
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> Decimal:
    """Memoised: events repeat the same few capacities, and Decimals are immutable."""
    if not _QUANTITY_RE.match(text):
        raise ValueError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    try:
        return Decimal(parse_quantity(text))
    except (ValueError, InvalidOperation) as exc:
        raise ValueError(str(exc)) from exc


@functools.lru_cache(maxsize=65536)
def format_quantity(value: Decimal | int, *, binary: bool = False) -> str:
    """Shortest exact text for a value: `4`, `500m`, `16Gi` (binary) or `2k` (decimal). Memoised:
    counters and recorded limit checks format the same figures over and over."""
    value = Decimal(value)
    if value == value.to_integral_value():
        whole = int(value)
        for suffix, factor in _BINARY if binary else _DECIMAL:
            if whole and whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value.normalize(), "f")


_KNOWN: dict[str, Quantity] = {}
"""Validated quantities by their text: payloads repeat the same few capacities, and a Quantity
is never changed once made, so one object serves every payload that spells it alike."""


class Quantity(str):
    """A quantity that keeps the user's text (for round-trips) and exposes its exact `value`."""

    value: Decimal

    def __new__(cls, text: str | int) -> Quantity:
        value = parse(text)
        obj = super().__new__(cls, str(text))
        obj.value = value
        return obj

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def validate(raw: Any) -> Quantity:
            if isinstance(raw, Quantity):
                return raw
            known = _KNOWN.get(raw) if type(raw) is str else None
            if known is not None:
                return known
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise PydanticCustomError(
                    "quantity_type",
                    "Invalid value: {input}: must be an integer or a quantity string",
                    {"input": repr(raw)},
                )
            try:
                quantity = cls(raw)
            except ValueError as exc:
                raise PydanticCustomError(
                    "quantity", 'Invalid value: "{input}": {reason}', {"input": raw, "reason": str(exc)}
                ) from None
            if type(raw) is str and cls is Quantity:
                if len(_KNOWN) >= 8192:
                    _KNOWN.clear()
                _KNOWN[raw] = quantity
            return quantity

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema, handler: Any) -> dict[str, Any]:
        """How a quantity is written in JSON: a Kubernetes quantity string, or an integer."""
        return {
            "anyOf": [{"type": "string"}, {"type": "integer"}],
            "description": "A Kubernetes quantity (100m, 16Gi, 1e3).",
            "examples": ["100m", "16Gi"],
        }


def _within_bounds(quantity: Quantity) -> Quantity:
    if (problem := quantity_error(str(quantity), quantity.value)) is not None:
        raise ValueError(problem)
    nanos = to_nanos(quantity.value)
    if nanos == quantity.value:
        return quantity
    rounded = Quantity(str(quantity))  # a copy of its own: `_KNOWN` shares the original
    rounded.value = nanos
    return rounded


BoundedQuantity = Annotated[Quantity, AfterValidator(_within_bounds)]
"""A quantity a user writes (a NodePool's limits, a workload's requests): within the API
server's int64 milli-units and rounded up to whole nanos as it stores them (`shared.api.bounds`),
so no sum or difference of them overflows or rounds in the decimal context the scheduler
computes in. Quantities the system records (a pool's usage
in an event) may rightly be larger and stay plain `Quantity`."""
