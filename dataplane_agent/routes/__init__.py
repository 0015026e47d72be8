"""How a sandbox reaches the outside world, always through the agent: the model route (egress later)."""
