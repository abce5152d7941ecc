"""One request to the sim's API, as the pure core takes it and the journal keeps it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

READS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Request:
    """One API request, as journaled: what a replay hands `handle` again."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    content_type: str = ""
    accept: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "body": self.body,
            "contentType": self.content_type,
            "accept": self.accept,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Request:
        return cls(
            raw["method"],
            raw["path"],
            dict(raw.get("query") or {}),
            raw.get("body"),
            raw.get("contentType") or "",
            raw.get("accept") or "",
        )

    @property
    def writes(self) -> bool:
        return self.method not in READS
