"""What a service runs with, as facts: a replay (`nodewright explain`, `nodewright whatif`) must
weigh a recorded run by the settings it had, not by those of whoever replays it."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.events.contracts.base import Event


class FeatureGatesObserved(Event):
    """The feature gates a service runs with, recorded when it starts leading and only when they
    differ from what its stream last holds: every gate nodewright knows, by upstream's name
    (`SpotToSpotConsolidation`, `NodeRepair`, `NodeOverlay`, `StaticCapacity`), on or off. One
    stream per service (`featuregates-disruption`), so each says its own."""

    TYPE: ClassVar[str] = "FeatureGatesObserved"
    STREAM_KIND: ClassVar[str] = "featuregates"
    service: str = Field(description="the service that runs with them (disruption)")
    gates: dict[str, bool] = Field(description="every known feature gate by upstream's name, on or off")

    def _stream_key(self) -> str:
        return self.service
