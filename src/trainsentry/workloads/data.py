"""Real text on every machine, no download: byte-level tokens of the Python standard library's sources.

The corpus is the concatenation of every ``.py`` file under the running interpreter's standard
library directory, in sorted path order, as bytes (vocabulary 256). The last 5 % is held out for
validation. Batches are random windows drawn with a seeded generator, so runs are repeatable.
"""

from __future__ import annotations

import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

VAL_FRACTION = 0.05


@lru_cache(maxsize=1)
def corpus(max_bytes: int = 64 * 1024 * 1024) -> np.ndarray:
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            b = path.read_bytes()
        except OSError:
            continue
        chunks.append(b)
        total += len(b)
        if total >= max_bytes:
            break
    data = np.frombuffer(b"\n".join(chunks), dtype=np.uint8)
    if data.size < 1_000_000:
        raise RuntimeError(f"standard library corpus at {root} is only {data.size} bytes")
    return data


def split(name: str) -> np.ndarray:
    data = corpus()
    cut = int(len(data) * (1 - VAL_FRACTION))
    return data[:cut] if name == "train" else data[cut:]


class Batches:
    """Random (input, target) windows of ``seq_len`` tokens from one split."""

    def __init__(self, split_name: str, batch: int, seq_len: int, device, seed: int = 0):
        self.data = torch.from_numpy(split(split_name).astype(np.int64))
        self.batch, self.seq_len, self.device = batch, seq_len, device
        self.gen = torch.Generator().manual_seed(seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        hi = len(self.data) - self.seq_len - 1
        starts = torch.randint(0, hi, (self.batch,), generator=self.gen)
        rows = torch.stack([self.data[s:s + self.seq_len + 1] for s in starts.tolist()])
        rows = rows.to(self.device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]

    def prompts(self, n: int, length: int) -> torch.Tensor:
        """``n`` prompts of ``length`` tokens (for inference workloads)."""
        hi = len(self.data) - length - 1
        starts = torch.randint(0, hi, (n,), generator=self.gen)
        return torch.stack([self.data[s:s + length] for s in starts.tolist()]).to(self.device)
