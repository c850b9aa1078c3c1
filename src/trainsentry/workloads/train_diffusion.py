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


def train_dit(ctx: Context, cfg: dict) -> None:
    """One GPU: a diffusion transformer trained with the rectified-flow loss, AdamW."""
    from .train import _record_setup, _set_val, _train_loop

    tokens, patch, latent_ch = int(cfg["tokens"]), int(cfg["patch"]), int(cfg["latent_ch"])
    side = latent_side(tokens, patch)
    mcfg = dataclasses.replace(par.model_config(cfg), seq_len=tokens, causal=False)
    torch.manual_seed(ctx.seed)
    with torch.device(ctx.device):
        model = DiT(mcfg, latent_ch * patch * patch)
    model.train()
    _record_setup(ctx, cfg, model, mcfg, dit_flops_per_token(mcfg, latent_ch * patch * patch))
    source = LatentSource(int(cfg["classes"]), latent_ch, side, int(cfg["modes"]), ctx.device,
                          seed=ctx.seed * 7919 + 1)
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 7919 + 2)
    opts = par.make_optimizers(ctx, model, cfg)
    batch, drop = int(cfg["batch"]), float(cfg["class_dropout"])

    def step():
        x0, labels = source.batch(batch)
        labels = torch.where(torch.rand(batch, device=ctx.device, generator=gen) < drop,
                             torch.full_like(labels, CLASSES), labels)
        with par.autocast(ctx):
            loss = flow_loss(model, x0, labels, patch, gen)
        loss.backward()
        par.optimizer_step(opts)
        return loss.detach()

    ctx.ledger.extra.update(classes=int(cfg["classes"]), image_px=8 * side, class_dropout=drop)
    _train_loop(ctx, cfg, step, batch * tokens)

    @torch.no_grad()
    def evaluate():
        model.eval()
        held = LatentSource(int(cfg["classes"]), latent_ch, side, int(cfg["modes"]), ctx.device,
                            seed=ctx.seed * 7919 + 1)          # the same distribution ...
        held.gen.manual_seed(ctx.seed + 99)                     # ... other samples
        vgen = torch.Generator(device=ctx.device).manual_seed(ctx.seed + 98)
        losses = []
        for i in range(int(cfg.get("val_batches", 4))):
            x0, labels = held.batch(batch)
            t = torch.full((batch,), (i + 0.5) / int(cfg.get("val_batches", 4)), device=ctx.device)
            with par.autocast(ctx):
                losses.append(float(flow_loss(model, x0, labels, patch, vgen, t)))
        model.train()
        return sum(losses) / len(losses)

    _set_val(ctx, evaluate)


variants("train.diffusion", "training", "dit", train_dit,
         base={"d_model": 1024, "n_layers": 24, "n_heads": 16, "n_kv_heads": None, "d_ff": None,
               "tokens": 256, "seq_len": 256, "patch": 2, "latent_ch": 4, "batch": 64, "classes": 100,
               "modes": 16, "class_dropout": 0.1, "optimizer": "adamw", "lr": 1e-4, "warmup": 20,
               "val_batches": 4},
         toy={"d_model": 64, "n_layers": 2, "n_heads": 4, "tokens": 16, "seq_len": 16, "batch": 16,
              "classes": 4, "modes": 4, "lr": 3e-3, "warmup": 2, "val_batches": 2},
         gpus=1, description="a diffusion transformer trained on one GPU with the rectified-flow loss "
                             "(class-conditional latents, AdamW): training that is not a language model",
         grid={
             "l-256": {},                                                          # DiT-L/2's shape, 256 px
             "xl-512": {"d_model": 1152, "n_layers": 28, "n_heads": 16, "tokens": 1024, "seq_len": 1024,
                        "batch": 16},                                              # DiT-XL/2's shape, 512 px
             "b-256": {"d_model": 768, "n_layers": 12, "n_heads": 12, "batch": 128},  # DiT-B/2's shape
         })
