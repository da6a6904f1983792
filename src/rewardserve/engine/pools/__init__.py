"""The rule and code calls' process pools, shared fairly between tenants."""
