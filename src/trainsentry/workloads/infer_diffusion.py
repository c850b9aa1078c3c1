"""Image generation with a diffusion transformer (family ``diffusion``): a benign inference service
whose GPU runs the same dense forward pass of a bidirectional transformer over every latent token of an
image, tens of times per request, at a fixed rhythm. No KV cache and no token-by-token decode: each
denoising step is compute-bound like the forward pass of a training step and recurs as training steps
do, so it is a plausible false positive for a detector that reads intensity and periodicity, and a
family no detector was fitted on when it was added (2026-12-03).

The model is a diffusion transformer (Peebles & Xie 2023, "Scalable Diffusion Models with
Transformers", arXiv:2212.09748): the image's latent (``latent_ch`` channels at 1/8 of the pixel side)
cut into ``patch`` × ``patch`` patches, one token each, run through the lab's transformer blocks with
bidirectional attention. It is conditioned on the timestep and the class by adding their embeddings to
every token (simpler than the paper's adaLN-Zero, whose modulation adds little matmul work). Sampling
follows a rectified flow (Liu et al. 2022, arXiv:2209.03003) in the time convention of Esser et al. 2024
(arXiv:2403.03206): noise at t = 1, the image at t = 0 (Liu et al. run time the other way), ``steps``
Euler steps between them, and classifier-free guidance (Ho & Salimans 2022, arXiv:2207.12598) at scale
``guidance``: the conditional and unconditional halves run as one batch of twice the requests,
v = v_u + guidance · (v_c − v_u); ``guidance`` 1 runs the conditional half alone (a guidance-distilled
model), and a scale below 1 is refused. A convolutional decoder (``decoder_width`` channels, three 2× upsamplings, the
role of a latent diffusion model's VAE decoder) turns the latent into pixels, and the uint8 images are
copied to host memory, as a service returning them must (batch × 3 × side² bytes per batch over PCIe,
device to host). The weights are random, as every lab model's are: the work, not the pictures, is what
the telemetry sees. ``pause_s`` idles the GPU after each batch (``pause_dist``: ``exp`` by default,
requests arriving at random).

Video (family ``video``, ``infer.video.*``, added 2026-12-03): the same sampler over ``frames`` latent
frames of ``tokens`` patches each, all in one sequence with bidirectional attention across space and time
(full spatio-temporal attention, as video diffusion transformers such as Wan, arXiv:2503.20314, attend),
every frame decoded on its own and the uint8 frames copied to the host. The sequence is ``frames`` times
an image's, so attention, quadratic in it, takes a larger share of each denoising step than in an image.

Ledger: one step per batch of requests (every denoising step and the decode), its FLOPs counted once
on a whole batch; tokens the latent tokens through the transformer (requests × guidance halves × frames ×
tokens × steps). Extra: the FLOPs per denoising step, the frames, the bytes to host per batch and their
checksum.
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from . import flops as flopcount
from .base import Context, variants
from .infer_common import IdlePause, inference_entry, model_config
from .model import Block, ModelConfig

CLASSES = 1000          # class-conditional, as ImageNet models are; index CLASSES is "no class"
FREQ_DIM = 256          # sinusoidal timestep features


def timestep_features(t: torch.Tensor, dim: int = FREQ_DIM) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1], scaled to 0–1000 (the range of the discrete timesteps DiT was
    trained on, as flow-model code scales its continuous time), [n, dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = (t.float() * 1000.0)[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class DiT(nn.Module):
    """Patch tokens in, velocity per patch out; the blocks are the lab's transformer blocks with
    bidirectional attention (``cfg.causal`` False)."""

    def __init__(self, cfg: ModelConfig, patch_dim: int):
        super().__init__()
        if cfg.causal:
            raise ValueError("a diffusion transformer attends both ways: build it with causal=False")
        d = cfg.d_model
        self.cfg, self.patch_dim = cfg, patch_dim
        self.inp = nn.Linear(patch_dim, d)
        self.pos = nn.Parameter(torch.randn(1, cfg.seq_len, d) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(FREQ_DIM, d), nn.SiLU(), nn.Linear(d, d))
        self.label = nn.Embedding(CLASSES + 1, d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(d)
        self.out = nn.Linear(d, patch_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cond = self.t_mlp(timestep_features(t).to(x.dtype)) + self.label(labels)
        h = self.inp(x) + self.pos[:, :x.shape[1]] + cond[:, None]
        for block in self.blocks:
            h = block(h)
        return self.out(self.norm(h))


class PixelDecoder(nn.Module):
    """Latent [n, latent_ch, s, s] -> image [n, 3, 8s, 8s] in [-1, 1]: three 2x upsamplings with a 3x3
    convolution after each, the shape of a latent diffusion model's VAE decoder at a smaller width."""

    def __init__(self, latent_ch: int, width: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(latent_ch, width, 3, padding=1), nn.SiLU()]
        for _ in range(3):
            layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(width, width, 3, padding=1), nn.SiLU()]
        layers += [nn.Conv2d(width, 3, 3, padding=1), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


def patchify(z: torch.Tensor, patch: int) -> torch.Tensor:
    """[n, c, s, s] -> [n, (s/p)², c·p²]."""
    n, c, s, _ = z.shape
    g = s // patch
    return z.reshape(n, c, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, g * g, c * patch * patch)


def unpatchify(x: torch.Tensor, channels: int, patch: int) -> torch.Tensor:
    """[n, g², c·p²] -> [n, c, g·p, g·p]; the inverse of ``patchify``."""
    n, tokens, _ = x.shape
    g = math.isqrt(tokens)
    return x.reshape(n, g, g, channels, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(n, channels, g * patch, g * patch)


def guided_velocity(model: DiT, x: torch.Tensor, t: float, labels: torch.Tensor, guidance: float) -> torch.Tensor:
    """The model's velocity at time ``t``: with guidance (> 1) the conditional and unconditional halves
    in one batch and v_u + guidance · (v_c − v_u); otherwise the conditional half alone."""
    n = x.shape[0]
    if guidance > 1.0:
        tt = torch.full((2 * n,), t, device=x.device)
        v = model(torch.cat([x, x]), tt, torch.cat([labels, torch.full_like(labels, CLASSES)]))
        vc, vu = v.chunk(2)
        return vu + guidance * (vc - vu)
    return model(x, torch.full((n,), t, device=x.device), labels)


def sample(model: DiT, decoder: PixelDecoder, noise: torch.Tensor, labels: torch.Tensor, steps: int,
           guidance: float, latent_ch: int, patch: int, frames: int = 1) -> torch.Tensor:
    """Euler steps of the rectified flow from ``noise`` (t = 1) to t = 0, then the decoder: images in
    [-1, 1], [n, 3, px, px], or with ``frames`` > 1 (a video's latent frames one after another in the
    sequence) every frame decoded alone, [n · frames, 3, px, px]."""
    x = noise
    ts = torch.linspace(1.0, 0.0, steps + 1).tolist()
    for t0, t1 in zip(ts[:-1], ts[1:]):
        x = x + (t1 - t0) * guided_velocity(model, x, t0, labels, guidance)
    n, seq, dim = x.shape
    return decoder(unpatchify(x.reshape(n * frames, seq // frames, dim), latent_ch, patch))


def latent_side(tokens: int, patch: int) -> int:
    g = math.isqrt(tokens)
    if g * g != tokens:
        raise ValueError(f"tokens must be a square number of patches, got {tokens}")
    return g * patch


@inference_entry
def run_diffusion(ctx: Context, cfg: dict) -> None:
    tokens, patch, latent_ch = int(cfg["tokens"]), int(cfg["patch"]), int(cfg["latent_ch"])
    frames = int(cfg.get("frames", 1))
    if frames < 1:
        raise ValueError(f"frames must be 1 (an image) or more (a video), got {frames}")
    if frames * tokens > int(cfg["seq_len"]):
        raise ValueError(f"frames x tokens ({frames} x {tokens}) exceed the model's positions (seq_len {cfg['seq_len']})")
    side = latent_side(tokens, patch)
    batch, steps, guidance = int(cfg["batch"]), int(cfg["steps"]), float(cfg["guidance"])
    if guidance < 1.0:
        raise ValueError(f"guidance must be 1 (no guidance) or more, got {guidance}")
    mcfg = model_config(cfg, causal=False)
    torch.manual_seed(ctx.seed)
    with torch.device(ctx.device):
        model = DiT(mcfg, latent_ch * patch * patch)
        decoder = PixelDecoder(latent_ch, int(cfg["decoder_width"]))
    model, decoder = model.to(ctx.dtype).eval(), decoder.to(ctx.dtype).eval()
    pause = IdlePause(ctx, cfg, "exp")
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 7919 + ctx.rank)

    def requests() -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn(batch, frames * tokens, latent_ch * patch * patch, device=ctx.device, dtype=ctx.dtype,
                            generator=gen)
        labels = torch.randint(0, CLASSES, (batch,), device=ctx.device, generator=gen)
        return noise, labels

    def one_batch(noise, labels) -> torch.Tensor:
        return sample(model, decoder, noise, labels, steps, guidance, latent_ch, patch, frames)

    halves = 2 if guidance > 1.0 else 1
    noise, labels = requests()
    ctx.ledger.flops_per_step = flopcount.measure(lambda: one_batch(noise, labels))
    denoise_flops = flopcount.measure(lambda: guided_velocity(model, noise, 0.5, labels, guidance))
    pixels = 8 * side
    ctx.ledger.extra.update(params=sum(p.numel() for p in model.parameters()), method="flop_counter",
                            decoder_params=sum(p.numel() for p in decoder.parameters()),
                            flops_per_denoising_step=denoise_flops, image_px=pixels, steps_per_image=steps,
                            guidance=guidance, frames=frames, bytes_to_host_per_step=batch * frames * 3 * pixels * pixels)
    host_sum = 0.0
    while ctx.keep_going():
        noise, labels = requests()
        t0 = time.perf_counter()
        images = one_batch(noise, labels)
        u8 = ((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).to("cpu")   # to the clients
        host_sum += float(u8.sum(dtype=torch.float64))
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * halves * frames * tokens * steps)
        pause.wait()
    ctx.ledger.extra["host_checksum"] = host_sum


variants("infer.diffusion", "inference", "diffusion", run_diffusion,
         base={"model": "gpt350m", "tokens": 256, "seq_len": 256, "patch": 2, "latent_ch": 4, "batch": 32,
               "steps": 50, "guidance": 4.0, "decoder_width": 128, "pause_s": 0.0},
         toy={"model": "toy", "tokens": 16, "seq_len": 16, "batch": 2, "steps": 3, "decoder_width": 8,
              "pause_s": 0.0},
         gpus=1, description="class-conditional image generation with a diffusion transformer: tens of "
                             "identical dense forward passes per request, guidance doubling the batch, "
                             "images to the host", grid={
             "m350m_t256_b32": {},                      # 256 px; DiT-L's width, depth and heads with 4 KV heads: 0.27 B
             "l1b_t1024_b8": {"model": "gpt1b", "tokens": 1024, "seq_len": 1024, "batch": 8, "steps": 28,
                              "guidance": 4.5},                                       # 512 px
             "xl3b_t4096_b1": {"model": "gpt3b", "tokens": 4096, "seq_len": 4096, "batch": 1, "steps": 28,
                               "guidance": 3.5},                                      # 1024 px
             "m350m_t256_b64_nocfg": {"batch": 64, "steps": 25, "guidance": 1.0},     # distilled: no guidance
         })

variants("infer.video", "inference", "video", run_diffusion,
         base={"model": "gpt350m", "frames": 16, "tokens": 256, "seq_len": 4096, "patch": 2, "latent_ch": 4,
               "batch": 2, "steps": 30, "guidance": 5.0, "decoder_width": 128, "pause_s": 0.0},
         toy={"model": "toy", "frames": 3, "tokens": 16, "seq_len": 48, "batch": 2, "steps": 3, "decoder_width": 8,
              "pause_s": 0.0},
         gpus=1, description="class-conditional video generation with a diffusion transformer: "
                             "full attention over every frame's patches, tens of dense forward passes per "
                             "clip, frames to the host", grid={
             "m350m_f16_t256_b2": {},                                                 # 16 latent frames at 256 px
             "m350m_f16_t256_b2_gap": {"pause_s": 2.0},                               # clips requested at random
             "l1b_f8_t1024_b1": {"model": "gpt1b", "frames": 8, "tokens": 1024, "seq_len": 8192,
                                 "batch": 1},                                         # 8 latent frames at 512 px
             "xl3b_f16_t1024_b1_nocfg": {"model": "gpt3b", "frames": 16, "tokens": 1024, "seq_len": 16384,
                                         "batch": 1, "steps": 8, "guidance": 1.0},    # distilled, 16k tokens
         })
