"""torchrun entry point for the training tests: the real plan worker with only training workloads.

The worker imports ``registry``, which imports every workload module (training, inference, other).
The training tests should not fail or slow down because of another module, so this entry point
stands the training module in for the registry before the worker is imported; everything else
(process group, plan, ledger merge, truth files) is the real worker.
"""

import sys

from trainsentry.workloads import train

sys.modules.setdefault("trainsentry.workloads.registry", train)

from trainsentry.workloads.worker import main  # noqa: E402

if __name__ == "__main__":
    main()
