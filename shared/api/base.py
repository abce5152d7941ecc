"""The base of every API model: camelCase on the wire, unknown fields refused (a strict API server)."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class APIModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        validate_default=False,
    )

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server would return it: camelCase, defaults filled, nulls omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)
