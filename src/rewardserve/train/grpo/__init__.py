"""A small GRPO loop that trains a transformers causal LM on rewards from rewardserve.

    rewardserve grpo --config grpo.yaml

Needs torch and transformers (the ``serve`` extra). Read ``loop.py`` top to bottom for
one training step.
"""
