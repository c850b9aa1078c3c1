"""Workloads: one GPT definition (model.py), real text (data.py), ground truth (flops.py, base.Ledger),
training / inference / other workloads registered as declarative configs, run by worker.py."""
