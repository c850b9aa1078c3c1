"""Generation with the weights in host memory (family ``offload``, class inference), as FlexGen
(Sheng et al., 2023), Hugging Face Accelerate's CPU offload and ZeRO-Inference serve a model larger
than the GPU: every transformer block's weights stay in pinned host memory and are copied into one of
two device buffers just before the block runs, the next block's copy overlapping this block's compute.
Embeddings, the final norm, the output head and the KV cache stay on the device (each block's own
norms travel with it).

Why it is in the benign corpus: it loads PCIe as nothing else in the corpus does, with the whole
model's block weights crossing host to device at every forward (a prefill or one decode step), and its
training counterpart is ZeRO-Offload (train_offload.py), whose PCIe traffic goes both ways. A verifier
must not read "heavy PCIe" as training, nor miss the training whose optimizer moved to the host.

Ground truth: ``forwards`` and ``bytes_to_device``, forwards × the blocks' bytes (every forward copies
every block once); ``bytes_to_device_all``, every copy this code issued, counted where it issues it (the
FLOP fit's forwards and the copy made in advance included; a test checks the two agree). FLOPs as for
``generate`` (the same model, the same arithmetic).
"""

from __future__ import annotations

import torch

from .base import Context, variants
from .infer_common import build_model, generate_rounds, inference_entry, model_config
from .model import GPT


class StreamedBlocks:
    """Keep ``model``'s blocks in host memory and stream each into a device buffer before it runs.

    Two device buffers, used alternately by consecutive block executions; a forward pre-hook on each
    block waits for its copy, points the block's parameters at the buffer, and issues the copy of the
    block that runs next (forwards run every block in order) into the other buffer, once the block
    that last used that buffer has run."""

    def __init__(self, ctx: Context, model: GPT):
        self.ctx = ctx
        self.blocks = list(model.layers.values())
        params = [list(b.parameters()) for b in self.blocks]
        shapes = [tuple(p.shape) for p in params[0]]
        if any([tuple(p.shape) for p in ps] != shapes for ps in params):
            raise ValueError("streaming needs blocks of one shape")
        n = sum(p.numel() for p in params[0])
        dtype = params[0][0].dtype
        pin = ctx.is_cuda
        self.host = []
        for ps in params:   # one flat host buffer per block; the device copies are dropped below
            flat = torch.cat([p.detach().reshape(-1) for p in ps]).to("cpu")
            self.host.append(flat.pin_memory() if pin else flat)
        self.slots = [torch.empty(n, dtype=dtype, device=ctx.device) for _ in range(2)]
        self.views = []
        for slot in self.slots:
            views, off = [], 0
            for p in params[0]:
                views.append(slot[off:off + p.numel()].view(p.shape))
                off += p.numel()
            self.views.append(views)
        for ps in params:
            for p, v in zip(ps, self.views[0]):
                p.data = v   # the block's own device memory is released
        self.params = params
        self.block_bytes = n * self.slots[0].element_size()
        self.stream = torch.cuda.Stream(ctx.device) if ctx.is_cuda else None
        self.ready: list = [None, None]
        self.runs = 0            # block executions so far
        self.bytes = 0
        for i, block in enumerate(self.blocks):
            block.register_forward_pre_hook(self._hook(i))
        self._prefetch(0, 0)

    def _prefetch(self, block: int, slot: int) -> None:
        if self.stream is None:
            self.slots[slot].copy_(self.host[block])
        else:
            freed = torch.cuda.Event()
            freed.record(torch.cuda.current_stream(self.ctx.device))   # the slot's last user has run
            with torch.cuda.stream(self.stream):
                self.stream.wait_event(freed)
                self.slots[slot].copy_(self.host[block], non_blocking=True)
                done = torch.cuda.Event()
                done.record(self.stream)
            self.ready[slot] = done
        self.bytes += self.block_bytes

    def _hook(self, i: int):
        def before(module, args):
            slot = self.runs % 2
            if self.ready[slot] is not None:
                torch.cuda.current_stream(self.ctx.device).wait_event(self.ready[slot])
            for p, v in zip(self.params[i], self.views[slot]):
                p.data = v
            self.runs += 1
            self._prefetch((i + 1) % len(self.blocks), self.runs % 2)
        return before

    @property
    def forwards(self) -> int:
        return self.runs // len(self.blocks)


@inference_entry
def run_offload(ctx: Context, cfg: dict) -> None:
    """Batched generation (as ``generate``) with every block's weights streamed from host memory."""
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    stream = StreamedBlocks(ctx, model)
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    ctx.ledger.extra.update(params=mcfg.params(), block_bytes=stream.block_bytes, blocks=len(stream.blocks),
                            weights_streamed_per_forward=stream.block_bytes * len(stream.blocks))
    generate_rounds(ctx, model, mcfg, cfg)
    # the fit's forwards (before the run) are not part of it: bytes of the run's forwards only
    ctx.ledger.extra.update(forwards=ctx.ledger.steps,
                            bytes_to_device=ctx.ledger.steps * stream.block_bytes * len(stream.blocks),
                            bytes_to_device_all=stream.bytes)


variants("infer.offload", "inference", "offload", run_offload,
         base={"model": "gpt7b", "seq_len": 1024, "batch": 256, "prompt_len": 512, "gen_len": 64},
         toy={"model": "toy", "seq_len": 64, "batch": 2, "prompt_len": 8, "gen_len": 4, "pause_s": 0.0},
         gpus=1, description="generation with every block's weights streamed from host memory over PCIe", grid={
             "g7b_b256": {},
             "xl3b_b128": {"model": "gpt3b", "seq_len": 2048, "batch": 128, "prompt_len": 1024, "gen_len": 128},
             "l1b_b32_light": {"model": "gpt1b", "batch": 32, "prompt_len": 256, "gen_len": 128, "pause_s": 1.0},
         })
