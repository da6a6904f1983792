"""Judging: /v1/verify, /v1/rubric, /v1/compare."""
