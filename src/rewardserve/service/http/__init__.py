"""What every request passes before its route: keys and tenants, open-request caps, the
request log, the body read and parsed under limits."""
