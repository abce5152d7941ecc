"""The `nodewright` command."""
