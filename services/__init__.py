"""nodewright's services: one package each (relay, watcher, scheduler, disruption, termination,
sim). The `nodewright` command that starts them is the `cli` package, beside this one."""
