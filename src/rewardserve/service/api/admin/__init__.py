"""The admin API: sleep, wake, load, weights, canary, rollback, promote; ?async=true operations."""
