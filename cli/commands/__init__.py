"""The `nodewright` commands, one module per group of them. Each module's `register` adds its
commands (and its sub-app, if it has one) to the app `cli.main` builds; the work itself is in
the modules of `cli` beside this package, so a command here only parses, calls and prints."""
