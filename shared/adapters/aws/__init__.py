"""The AWS adapter: EC2 through aiobotocore, decisions in `shared.aws`."""
