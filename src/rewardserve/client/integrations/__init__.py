"""Plug-ins for trainers: TRL reward functions, verl compute_score, OpenRLHF reward_func,
and the agent-trajectory helper. Each needs only the client."""
