"""Event contracts: what each service may say happened, as versioned pydantic models."""
