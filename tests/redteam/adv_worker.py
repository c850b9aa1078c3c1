"""torchrun entry point for the red-team tests: the real plan worker with only the adversarial (and
training) workloads registered, so another module's import cost or failure cannot affect them."""

import sys

from trainsentry.workloads import adversarial

sys.modules.setdefault("trainsentry.workloads.registry", adversarial)

from trainsentry.workloads.worker import main  # noqa: E402

if __name__ == "__main__":
    main()
