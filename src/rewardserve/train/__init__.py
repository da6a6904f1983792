"""The included GRPO trainer (the ``grpo`` extra): it trains a policy on the service's rewards."""
