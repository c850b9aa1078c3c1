"""ZeRO-Offload's optimizer (Ren et al., 2021) for single-GPU training (family ``zero-offload``): the fp32
master weights and the AdamW state live in host memory and the update runs on the CPU.

The GPU keeps only bf16 weights and computes the forward and backward passes. Every step its bf16
gradients go to pinned host buffers (device to host over PCIe), the CPU's AdamW updates the fp32 master
weights, and the updated weights, cast to bf16, come back (host to device): as many bytes each way, once
per step. A model whose optimizer state does not fit next to it on the GPU trains this way, and for a
verifier it is a different sight from the training in the corpus: the optimizer step is gone from the
GPU, which waits for the CPU, and PCIe carries a symmetric exchange.

``offload_overlap`` is the paper's delayed parameter update: after ``offload_overlap_after`` ordinary
steps (10), the CPU's update of step t runs in a thread while the GPU computes step t + 1 on the weights
of step t − 1, so the GPU no longer waits, at the price of gradients one step stale; update t is joined
and its weights uploaded at the end of GPU step t + 1 (before update t + 1 starts), and GPU step t + 2
runs on them. The update uses ``host_threads`` CPU threads (default: every core this process may run
on).
"""

from __future__ import annotations

import threading

import torch

from .base import Context, use_host_threads


class _StepsWithUpdate:
    """HostAdamW's ``warmup``: the learning-rate schedule advances with each host update instead."""

    def step(self) -> None:
        pass


class HostAdamW:
    """AdamW over fp32 master copies of ``params`` in host memory; the interface of the optimizers of
    ``parallel.make_optimizers`` (``step``, ``zero_grad``, a ``warmup`` scheduler)."""

    def __init__(self, ctx: Context, params, cfg: dict):
        if cfg.get("optimizer", "adamw") != "adamw":
            raise ValueError("the offloaded optimizer is AdamW (ZeRO-Offload's CPU Adam)")
        self.ctx = ctx
        self.params = [p for p in params if p.requires_grad]
        pin = ctx.is_cuda
        self.master = [p.detach().to("cpu", torch.float32, copy=True) for p in self.params]
        for m in self.master:
            m.grad = torch.zeros_like(m)
        # the transfer buffers, pinned so the copies run on the copy engines asynchronously
        self.grads_host = [torch.empty(p.shape, dtype=p.dtype, pin_memory=pin) for p in self.params]
        self.weights_host = [torch.empty(p.shape, dtype=p.dtype, pin_memory=pin) for p in self.params]
        # the host's cores do the update, as ZeRO-Offload's CPU Adam does (a launcher may have set 1)
        use_host_threads(cfg)
        fused = {"fused": True} if _cpu_fused_adamw() else {"foreach": True}
        self.opt = torch.optim.AdamW(self.master, lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.1, **fused)
        warmup = max(1, int(cfg.get("warmup", 1)))
        # stepped by the host with each update (in the update's thread when it overlaps), so the
        # training loop's warm-up call is a no-op here
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda step: min(1.0, (step + 1) / warmup))
        self.warmup = _StepsWithUpdate()
        self.overlap = bool(cfg.get("offload_overlap", False))
        # the paper starts the delayed update after some ordinary steps: stale gradients at the start of
        # training, while the learning rate warms up, hurt the loss
        self.overlap_after = int(cfg.get("offload_overlap_after", 10))
        self.pending: threading.Thread | None = None
        self.bytes_each_way = sum(p.numel() * p.element_size() for p in self.params)
        self.updates = self.uploads = self.downloads = 0
        ctx.ledger.extra.update(optimizer_location="host", optimizer_impl="fused" if fused.get("fused") else "foreach",
                                host_threads=torch.get_num_threads(), offload_overlap=self.overlap,
                                offload_overlap_after=self.overlap_after if self.overlap else None,
                                offload_bytes_each_way_per_step=self.bytes_each_way)

    def _update_on_host(self) -> None:
        for m, g in zip(self.master, self.grads_host):
            m.grad.copy_(g)
        self.opt.step()
        self.schedule.step()
        for h, m in zip(self.weights_host, self.master):
            h.copy_(m)   # fp32 -> bf16 on the CPU, into the pinned buffer
        self.updates += 1

    def _upload(self) -> None:
        with torch.no_grad():
            for p, h in zip(self.params, self.weights_host):
                p.copy_(h, non_blocking=True)   # stream-ordered before the next forward's kernels
        self.uploads += 1
        self._count()

    def _count(self) -> None:
        self.ctx.ledger.extra.update(offload_bytes_d2h=self.downloads * self.bytes_each_way,
                                     offload_bytes_h2d=self.uploads * self.bytes_each_way,
                                     host_updates=self.updates)

    def step(self) -> None:
        if self.pending is not None:   # overlap: step t-1's update is done by now or we wait for it
            self.pending.join()
            self.pending = None
            self._upload()
        for h, p in zip(self.grads_host, self.params):
            h.copy_(p.grad, non_blocking=True)
        self.ctx.sync()   # the gradients are in host memory before the CPU reads them
        self.downloads += 1
        if self.overlap and self.downloads > self.overlap_after:
            self.pending = threading.Thread(target=self._update_on_host, name="host-adamw", daemon=True)
            self.pending.start()
        else:
            self._update_on_host()
            self._upload()
        self._count()

    def finish(self) -> None:
        """Apply an update still running (overlap) so the final weights are the last step's."""
        if self.pending is not None:
            self.pending.join()
            self.pending = None
            self._upload()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None



def _cpu_fused_adamw() -> bool:
    """Whether this torch has the fused AdamW kernel for CPU tensors (2.4 and later)."""
    try:
        p = torch.zeros(2, requires_grad=True)
        p.grad = torch.zeros(2)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except (RuntimeError, TypeError):
        return False
