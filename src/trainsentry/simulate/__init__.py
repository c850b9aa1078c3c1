"""Distributed-evasion simulator: the efficiency and cost model of Rahman (arXiv 2605.29359).

Can frontier-scale training be spread over many nodes that each stay under a registration threshold,
linked only by consumer internet? The modules, in the order a number flows through them:

- ``catalogue``  node types (chips per node, FLOP/s, memory, price) and the memory-cap countermeasure
- ``settings``   the paper's fixed assumptions (MFU, wall time, compression, batch, network)
- ``losslaw``    the Chinchilla loss law, the Chinchilla penalty chi, the replica loss multiplier
- ``efficiency`` the eta factors: sync interval, compression, activation compression, straggler tail
- ``forward``    the vectorised forward model: one configuration (or a million) -> H, eta, chi, cost
- ``search``     the minimum-cost search over node types, modes, model sizes and node counts
- ``traffic``    what each node shows: WAN bursts and in-node interconnect bytes, and who would see it
- ``experiments`` the paper's tables, sensitivities and countermeasure -> results/simulator.json
"""
