"""rewardserve: reward-model serving for RL training of LLMs and VLMs, and the client trainers call it with.

Packages: ``protocol`` (the wire contract), ``client`` (what a trainer installs), ``train`` (the included
GRPO loop), ``service`` (HTTP), ``models`` (what a reward is), ``cli``.
"""
