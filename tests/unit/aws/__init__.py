"""AWS provider tests."""
