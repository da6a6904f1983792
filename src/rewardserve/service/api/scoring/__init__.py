"""Scoring: /v1/score, /v1/score/steps, /v1/score/turns, /pooling."""
