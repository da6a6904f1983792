"""The routes, one module per family: wire shapes in and out, and a call to the use cases
(service/application.py)."""
