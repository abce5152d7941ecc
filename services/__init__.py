"""nodewright's services: one package each (watcher, scheduler, disruption, termination, sim) and the CLI."""
