"""Window features of a node's telemetry: one module for offline evaluation and the live path."""

from .windows import (DEFAULT_HZ, DEFAULT_STRIDE_S, DEFAULT_WINDOW_S, FEATURE_VERSION, feature_names,
                      sliding_windows, window_features)

__all__ = ["sliding_windows", "window_features", "feature_names", "FEATURE_VERSION",
           "DEFAULT_HZ", "DEFAULT_WINDOW_S", "DEFAULT_STRIDE_S"]
