"""Workload lab: campaign runner, dataset card, GPU checks."""
