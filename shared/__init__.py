"""nodewright's shared library: the NodePool API, pure policy, and (later) the store, bus and ports."""
