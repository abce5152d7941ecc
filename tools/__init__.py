"""Scripts that write generated documents from the code (`python -m tools.<name>`)."""
