"""Termination as pure rules (upstream's `pkg/controllers/node/termination/`): which pods a drain
may evict, in which tier, which wait and why, which are deleted at the termination grace period, and
what a claim's termination does next. No I/O and no clock: the shell (`services/termination`) passes
the time in."""
