"""Red-team scoring: the adversary's cost (cost.py) and its evasion of the frozen detectors (evasion.py)."""
