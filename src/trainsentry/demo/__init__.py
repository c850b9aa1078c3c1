"""The demo behind `make demo`: collector, a replaying H200 agent and a live agent on one machine."""
