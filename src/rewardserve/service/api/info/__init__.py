"""What the service tells about itself: /health, /ready, /metrics, /version, /v1/models, /info."""
