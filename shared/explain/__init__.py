"""Why a NodeClaim was or was not disrupted at an instant, method by method: the disruption core
(`shared.disruption`) asked about one claim of a `World`, and its answer told. Pure."""
