"""trainsentry: tell LLM training from inference on GPU clusters from the outside.

The data path, in the order data flows (one sub-package each):
telemetry (sources) -> agent -> wire (signed batches) -> collector (store, API)
-> features -> detect (segmentation, detectors, alerting) -> verdicts -> report.
"""

__version__ = "0.1.0"
