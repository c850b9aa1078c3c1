"""The node agent: sample sources on a fixed schedule, batch, sign, spool durably, send, expose.

Modules, in the order data flows: :mod:`.sampler` (the schedule), :mod:`.spool` (encoded+signed
batches and the chain state on disk), :mod:`.sender` (HTTP to the collector), :mod:`.exporter`
(Prometheus text), :mod:`.node` (wires them together), :mod:`.record` (local traces, no collector).

Nothing here imports torch, pyarrow or the collector's packages at module level: the agent must
run on a bare node with the standard library, nvidia-ml-py and prometheus-client.
"""
