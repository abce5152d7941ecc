"""The disruption core: which nodes may go, by which method, and why the others stay. Pure: no
I/O, time is a parameter (one module per method, as upstream keeps one file per method)."""
