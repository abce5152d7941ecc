"""The sim's catalog as the what-if rebuilds it from a log: generated at the recorded run's seed
(`shared.whatif.sim`: 0 when the log's source does not say it), at the run's size when known,
else the smallest that holds every instance type the log names. Apart from the runner, so
`explain` prices with it without loading every service."""

from __future__ import annotations

from collections.abc import Collection

from services.sim.catalog import InstanceType, generate_catalog
from shared.api.scenario import DEFAULT_INSTANCE_TYPES, DEFAULT_ZONES
from shared.whatif.sim import UNKNOWN, SimSettings

CATALOG_MOST = 5000
"""The largest sim catalog a scenario may ask for (`CloudSpec.instance_types`)."""


def catalog_for(
    instance_types: Collection[str], zones: Collection[str], sim: SimSettings = UNKNOWN
) -> list[InstanceType]:
    """The sim's generated catalog at `sim.seed`, in `sim.zones` (else `zones`, else the sim's
    default ones): the run's own when its size is known and holds every one of `instance_types`,
    else cut to the smallest that does; `with_catalog`'s, and what `explain` prices with."""
    in_zones = list(sim.zones) or sorted(zones) or list(DEFAULT_ZONES)
    if sim.instance_types is not None:
        catalog = generate_catalog(sim.seed, sim.instance_types, in_zones)
        if {t.name for t in catalog} >= set(instance_types):
            return catalog
    count = DEFAULT_INSTANCE_TYPES
    while True:  # the catalog's order does not depend on its size: grow it until every type is in
        catalog = generate_catalog(sim.seed, count, in_zones)
        index = {t.name: i for i, t in enumerate(catalog)}
        if count >= CATALOG_MOST or all(n in index for n in instance_types):
            break
        count = min(count * 4, CATALOG_MOST)
    found = [index[n] for n in instance_types if n in index]
    return catalog[: max(found, default=DEFAULT_INSTANCE_TYPES - 1) + 1]
