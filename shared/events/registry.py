"""Type names to contracts, and upcasters that lift an old payload to the current schema.

An event is stored with the schema version it was written at and never rewritten. Reading it
runs the upcasters from that version up to the contract's current one, so old logs stay
replayable after a contract changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from shared.events.contracts import CONTRACTS, Event

Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]


class UnknownEventType(LookupError):
    pass


class Registry:
    def __init__(self, contracts: Iterable[type[Event]] = CONTRACTS) -> None:
        self._contracts: dict[str, type[Event]] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        for contract in contracts:
            self.register(contract)

    def register(self, contract: type[Event]) -> None:
        if contract.TYPE in self._contracts and self._contracts[contract.TYPE] is not contract:
            raise ValueError(f"event type {contract.TYPE} is registered twice")
        self._contracts[contract.TYPE] = contract

    def upcaster(self, event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: lift `event_type` payloads from `from_version` to `from_version + 1`."""

        def register(fn: Upcaster) -> Upcaster:
            self.add_upcaster(event_type, from_version, fn)
            return fn

        return register

    def add_upcaster(self, event_type: str, from_version: int, fn: Upcaster) -> None:
        contract = self.contract(event_type)
        if not 1 <= from_version < contract.SCHEMA_VERSION:
            raise ValueError(
                f"{event_type}: an upcaster from version {from_version} makes no sense when the current "
                f"schema version is {contract.SCHEMA_VERSION}"
            )
        self._upcasters[(event_type, from_version)] = fn

    def contract(self, event_type: str) -> type[Event]:
        try:
            return self._contracts[event_type]
        except KeyError:
            raise UnknownEventType(f"unknown event type {event_type!r}") from None

    def types(self) -> list[str]:
        return sorted(self._contracts)

    def upcast(self, event_type: str, schema_version: int, payload: Payload) -> Payload:
        """The payload at the contract's current schema version."""
        current = self.contract(event_type).SCHEMA_VERSION
        if schema_version > current:
            raise ValueError(f"{event_type} v{schema_version} is newer than this build knows (v{current})")
        for version in range(schema_version, current):
            try:
                step = self._upcasters[(event_type, version)]
            except KeyError:
                raise LookupError(f"no upcaster for {event_type} from v{version} to v{version + 1}") from None
            payload = step(dict(payload))
        return payload

    def decode(self, event_type: str, schema_version: int, payload: Payload) -> Event:
        return self.contract(event_type).model_validate(self.upcast(event_type, schema_version, payload))


REGISTRY = Registry()
