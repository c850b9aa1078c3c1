"""Training a diffusion transformer on one GPU (family ``dit``): training of a model that is not a
language model, the training-side counterpart of ``infer.diffusion`` (the same ``DiT``, the same
rectified flow), so that the detectors meet a trainer whose architecture and loss they never saw.

Data: class-conditional latents (``latent_ch`` channels, ``patch`` × √``tokens`` on a side: the latent
``infer.diffusion`` decodes into an image 8 times wider) drawn from a distribution with structure to learn:
each of ``classes`` classes owns a fixed smooth pattern (a sum of low-frequency cosines with seeded
frequencies and phases), every sample adds a random mixture of ``modes`` smooth patterns shared by all
classes and a little white noise, scaled to unit variance. No image corpus is needed, and the loss
falls only as far as the model learns the class means and the shared subspace.

Each step: a batch of latents x₀ and labels (a ``class_dropout`` share of labels replaced by "no
class", as guidance-trained models are), times t ~ U(0, 1), noise ε, x_t = (1 − t)·x₀ + t·ε, and the
mean squared error of the model's velocity against ε − x₀ (the flow ``infer_diffusion.sample``
integrates from t = 1 to 0); backward, AdamW. bf16 autocast on the GPU, fp32 weights, as the LLM
trainers. The ledger is the trainers' (loss per step, FLOPs counted on one real step, tokens = latent
patches per step); ``val_loss`` is the same loss on held-out samples at fixed times.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch

from . import parallel as par
from .base import Context, variants
from .infer_diffusion import CLASSES, DiT, latent_side, patchify
from .model import ModelConfig


class LatentSource:
    """Seeded class-conditional latents [n, latent_ch, side, side] with unit variance."""

    def __init__(self, classes: int, latent_ch: int, side: int, modes: int, device, seed: int):
        if not 0 < classes <= CLASSES:
            raise ValueError(f"classes must be between 1 and {CLASSES}, got {classes}")
        g = torch.Generator().manual_seed(seed)
        self.classes, self.device = classes, device
        self.means = self._smooth(classes, latent_ch, side, g).to(device)
        self.shared = self._smooth(modes, latent_ch, side, g).to(device)
        self.gen = torch.Generator(device=device).manual_seed(seed + 1)
        self.scale = 1.0 / math.sqrt(1.0 + 0.5 ** 2 + 0.1 ** 2)     # class pattern, mixture, noise: unit variance

    @staticmethod
    def _smooth(n: int, ch: int, side: int, g: torch.Generator) -> torch.Tensor:
        """n patterns of unit variance per channel: sums of 3 cosines of frequencies 1-3 cycles per side."""
        axis = torch.arange(side, dtype=torch.float32) / side * 2 * math.pi
        yy, xx = torch.meshgrid(axis, axis, indexing="ij")
        out = torch.zeros(n, ch, side, side)
        for _ in range(3):
            fy, fx = torch.randint(1, 4, (2, n, ch, 1, 1), generator=g).float()
            phase = torch.rand(n, ch, 1, 1, generator=g) * 2 * math.pi
            out += torch.cos(fy * yy + fx * xx + phase)
        return out / out.std(dim=(2, 3), keepdim=True)

    def batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.randint(0, self.classes, (n,), device=self.device, generator=self.gen)
        mix = torch.randn(n, self.shared.shape[0], device=self.device, generator=self.gen) / math.sqrt(self.shared.shape[0])
        x = (self.means[labels] + 0.5 * torch.einsum("nm,mchw->nchw", mix, self.shared)
             + 0.1 * torch.randn(n, *self.means.shape[1:], device=self.device, generator=self.gen))
        return x * self.scale, labels


def flow_loss(model: DiT, x0: torch.Tensor, labels: torch.Tensor, patch: int, gen: torch.Generator,
              t: torch.Tensor | None = None) -> torch.Tensor:
    """Rectified-flow loss of one batch of latents (``t`` drawn uniformly unless given)."""
    n = x0.shape[0]
    tokens0 = patchify(x0, patch)
    eps = torch.randn(tokens0.shape, device=x0.device, generator=gen)
    if t is None:
        t = torch.rand(n, device=x0.device, generator=gen)
    xt = (1 - t)[:, None, None] * tokens0 + t[:, None, None] * eps
    v = model(xt, t, labels)
    return torch.nn.functional.mse_loss(v.float(), (eps - tokens0).float())


def dit_flops_per_token(mcfg: ModelConfig, patch_dim: int) -> float:
    """Analytic training FLOPs per patch token, as ``ModelConfig.flops_per_token`` counts a GPT's, with
    the patch projections in and out (d × patch_dim each) where a GPT has its vocabulary head; the
    timestep and class embeddings are once per sample, not per token, and left out."""
    fwd = mcfg.flops_per_token(mcfg.seq_len, training=False) - 2 * mcfg.vocab * mcfg.d_model + 2 * 2 * mcfg.d_model * patch_dim
    return 3 * fwd


RANK_STREAM = 1_000_003     # seed offset between ranks' sample streams


class DitReplica:
    """One GPU's diffusion transformer, its AdamW and its stream of latents: ``train_dit``'s step body
    behind the interface of ``adversarial_core.Replica`` (``forward_backward``, ``apply``, ``val_loss``,
    ``tokens_per_micro``, ``model``/``net``), so that the red team's per-step strategies
    (``adversarial_step.ddp_replica`` with ``arch: dit``) train this model exactly as ``train_dit`` does.
    Not a subclass: it has no ``params``, ``grads`` or ``param_bytes``, so only the strategies that step
    through ``forward_backward`` and ``apply`` (throttle, split, shape) can take it."""

    def __init__(self, ctx: Context, cfg: dict):
        from .train import _record_setup

        self.ctx, self.cfg = ctx, cfg
        self.tokens, self.patch, self.latent_ch = int(cfg["tokens"]), int(cfg["patch"]), int(cfg["latent_ch"])
        self.side = latent_side(self.tokens, self.patch)
        self.mcfg = dataclasses.replace(par.model_config(cfg), seq_len=self.tokens, causal=False)
        torch.manual_seed(ctx.seed)
        with torch.device(ctx.device):
            self.model = DiT(self.mcfg, self.latent_ch * self.patch * self.patch)
        self.model.train()
        self.net = self.model
        # the DiT has no token embedding or head, which a GPT's count would add: its own count (replicated
        # whole on every rank, so the local count is the total)
        _record_setup(ctx, cfg, self.model, self.mcfg,
                      dit_flops_per_token(self.mcfg, self.latent_ch * self.patch * self.patch),
                      params_total=sum(p.numel() for p in self.model.parameters()))
        # the same latent distribution on every rank (the class and shared patterns), each rank its own
        # samples, labels and noise (as the GPT replica's own batches); rank 0's streams are train_dit's
        self.source = self._source()
        stream = ctx.seed * 7919 + 2 + RANK_STREAM * ctx.rank
        self.source.gen.manual_seed(stream)
        self.gen = torch.Generator(device=ctx.device).manual_seed(stream)
        self.opts = par.make_optimizers(ctx, self.model, cfg)
        self.batch, self.drop = int(cfg["batch"]), float(cfg["class_dropout"])
        self.tokens_per_micro = self.batch * self.tokens
        ctx.ledger.extra.update(classes=int(cfg["classes"]), image_px=8 * self.side, class_dropout=self.drop,
                                sample_stream_seed=stream)

    def _source(self) -> LatentSource:
        return LatentSource(int(self.cfg["classes"]), self.latent_ch, self.side, int(self.cfg["modes"]),
                            self.ctx.device, seed=self.ctx.seed * 7919 + 1)

    def forward_backward(self, micro: int = 1) -> torch.Tensor:
        """The flow loss of ``micro`` batches through ``net``, their gradients accumulated in ``p.grad``
        (a DDP ``net`` all-reduces on the last micro-batch only, as ``Replica``'s does)."""
        total = 0.0
        for i in range(micro):
            quiet = i < micro - 1 and hasattr(self.net, "no_sync")
            x0, labels = self.source.batch(self.batch)
            labels = torch.where(torch.rand(self.batch, device=self.ctx.device, generator=self.gen) < self.drop,
                                 torch.full_like(labels, CLASSES), labels)
            with self.net.no_sync() if quiet else contextlib.nullcontext():
                with par.autocast(self.ctx):
                    loss = flow_loss(self.net, x0, labels, self.patch, self.gen) / micro
                loss.backward()
            total = total + loss.detach()
        return total

    def apply(self) -> None:
        """One AdamW step on the accumulated gradients (unclipped, as ``train_dit`` trains)."""
        par.optimizer_step(self.opts)

    @torch.no_grad()
    def evaluate(self) -> float:
        """The same loss on held-out samples of the same distribution at fixed times."""
        self.model.eval()
        held = self._source()                                   # the same distribution ...
        held.gen.manual_seed(self.ctx.seed + 99)                # ... other samples
        vgen = torch.Generator(device=self.ctx.device).manual_seed(self.ctx.seed + 98)
        n, losses = int(self.cfg.get("val_batches", 4)), []
        for i in range(n):
            x0, labels = held.batch(self.batch)
            t = torch.full((self.batch,), (i + 0.5) / n, device=self.ctx.device)
            with par.autocast(self.ctx):
                losses.append(float(flow_loss(self.model, x0, labels, self.patch, vgen, t)))
        self.model.train()
        return sum(losses) / len(losses)

    def val_loss(self) -> None:
        from .train import _set_val
        _set_val(self.ctx, self.evaluate)


def train_dit(ctx: Context, cfg: dict) -> None:
    """One GPU: a diffusion transformer trained with the rectified-flow loss, AdamW."""
    from .train import _train_loop

    rep = DitReplica(ctx, cfg)

    def step():
        loss = rep.forward_backward()
        rep.apply()
        return loss

    _train_loop(ctx, cfg, step, rep.tokens_per_micro)
    rep.val_loss()


# the registered configuration; the red team's DiT settings (workloads/adversarial.py) start from it too
BASE = {"d_model": 1024, "n_layers": 24, "n_heads": 16, "n_kv_heads": None, "d_ff": None,
        "tokens": 256, "seq_len": 256, "patch": 2, "latent_ch": 4, "batch": 64, "classes": 100,
        "modes": 16, "class_dropout": 0.1, "optimizer": "adamw", "lr": 1e-4, "warmup": 20,
        "val_batches": 4}
TOY = {"d_model": 64, "n_layers": 2, "n_heads": 4, "tokens": 16, "seq_len": 16, "batch": 16,
       "classes": 4, "modes": 4, "lr": 3e-3, "warmup": 2, "val_batches": 2}
B256 = {"d_model": 768, "n_layers": 12, "n_heads": 12, "batch": 128}        # DiT-B/2's shape


variants("train.diffusion", "training", "dit", train_dit,
         base=BASE, toy=TOY,
         gpus=1, description="a diffusion transformer trained on one GPU with the rectified-flow loss "
                             "(class-conditional latents, AdamW): training that is not a language model",
         grid={
             "l-256": {},                                                          # DiT-L/2's shape, 256 px
             "xl-512": {"d_model": 1152, "n_layers": 28, "n_heads": 16, "tokens": 1024, "seq_len": 1024,
                        "batch": 16},                                              # DiT-XL/2's shape, 512 px
             "b-256": B256,
         })
