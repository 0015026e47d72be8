"""A scripted, Anthropic-Messages-compatible model on loopback for running the real CLI offline."""

from dataplane_agent.offline_model.server import OfflineModel, ReceivedRequest

__all__ = ["OfflineModel", "ReceivedRequest"]
