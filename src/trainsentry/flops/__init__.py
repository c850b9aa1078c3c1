"""Training-FLOP estimation from outside telemetry (issue 5).

features.py turns a trace interval into per-run inputs (net energy, DRAM and NVLink bytes,
tensor activity); estimators.py and mlp.py hold the estimators behind one fit/predict contract;
evaluate.py runs the seed study's 200-split protocol; report.py writes the results and figures,
markdown.py the docs;
live.py is the collector's entry point (``estimate_so_far``).
"""
