"""Image classification with a convolutional network (family ``vision``): inference that is neither a
language model nor a transformer, the serving-side counterpart of ``train.convnet`` (the same
``ResNet``, the same images), so that the detectors meet convolutions, batch normalisation and images
arriving from the host, which no other workload runs.

The network is He et al.'s residual network (He, Zhang, Ren and Sun, "Deep Residual Learning for Image
Recognition", CVPR 2016): a 7×7 stride-2 stem and a max pool, four stages of residual blocks (basic:
two 3×3 convolutions; bottleneck: 1×1, 3×3, 1×1 with four times the width out) each halving the side and
doubling the width after the first, global average pooling and one linear layer. ``blocks`` (3, 4, 6, 3)
with bottlenecks is ResNet-50; (2, 2, 2, 2) with basic blocks ResNet-18; (3, 4, 23, 3) ResNet-101.

The images: a pool of ``pool`` seeded uint8 images in page-locked host memory, each of ``classes``
classes a fixed smooth pattern (``train_diffusion.LatentSource``'s cosines, three colour channels, the
image's side) plus a mixture of shared patterns and noise, kept as contiguous batches as a prefetching
data loader hands them over. Every batch crosses PCIe as uint8 (as decoded JPEGs do), is normalised on
the GPU, and, in serving, its top-5 classes go back to the host.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from . import flops as flopcount
from .base import Context, variants
from .infer_common import IdlePause, inference_entry

BLOCKS = {"basic": 1, "bottleneck": 4}      # block type -> expansion of its output width


class Block(nn.Module):
    """One residual block: ``basic`` (3×3, 3×3) or ``bottleneck`` (1×1, 3×3 with the stride, 1×1 × 4);
    a 1×1 projection on the shortcut where the shape changes; the last BN's scale starts at zero, so a
    block starts as the identity (Goyal et al. 2017)."""

    def __init__(self, cin: int, width: int, stride: int, kind: str):
        super().__init__()
        cout = width * BLOCKS[kind]
        shapes = ([(cin, width, 3, stride), (width, width, 3, 1)] if kind == "basic" else
                  [(cin, width, 1, 1), (width, width, 3, stride), (width, cout, 1, 1)])
        layers: list[nn.Module] = []
        for i, (a, b, k, s) in enumerate(shapes):
            layers += [nn.Conv2d(a, b, k, s, k // 2, bias=False), nn.BatchNorm2d(b)]
            if i < len(shapes) - 1:
                layers.append(nn.ReLU(inplace=True))
        nn.init.zeros_(layers[-1].weight)
        self.body = nn.Sequential(*layers)
        self.short = (nn.Identity() if stride == 1 and cin == cout else
                      nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


class ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...], width: int, kind: str, classes: int):
        super().__init__()
        if kind not in BLOCKS:
            raise ValueError(f"block must be one of {sorted(BLOCKS)}, got {kind!r}")
        if len(blocks) != 4 or min(blocks) < 1:
            raise ValueError(f"blocks must be four stage depths of 1 or more, got {blocks}")
        layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        cin = width
        for stage, depth in enumerate(blocks):
            w = width * 2 ** stage
            for i in range(depth):
                layers.append(Block(cin, w, 2 if i == 0 and stage > 0 else 1, kind))
                cin = w * BLOCKS[kind]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def build(ctx: Context, cfg: dict) -> ResNet:
    """The configured network on the run's device, channels-last on a GPU (as cuDNN's fast convolutions
    want)."""
    torch.manual_seed(ctx.seed)
    net = ResNet(tuple(int(b) for b in cfg["blocks"]), int(cfg["width"]), str(cfg["block"]), int(cfg["classes"]))
    net = net.to(ctx.device)
    if not ctx.is_cuda:
        return net
    torch.backends.cudnn.benchmark = True        # the fastest convolution algorithm per shape, as trainers set
    return net.to(memory_format=torch.channels_last)


def forward_flops(net: ResNet, px: int, training: bool = False) -> int:
    """Analytic FLOPs of one ``px``-pixel image: 2 × the multiply-adds of every convolution (output
    positions × input channels / groups × kernel area × output channels) and of the linear head, read
    off the output shapes of one forward pass; normalisation, pooling and additions left out, as
    FlopCounterMode counts them. ``training``: forward and backward, 3 × the forward less the stem's
    input gradient, which nothing needs (the images are not trained)."""
    convs: list[int] = []

    def conv(mod, _inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1]
        convs.append(2 * out.shape[2] * out.shape[3] * out.shape[1] * (mod.in_channels // mod.groups) * k)

    hooks = [m.register_forward_hook(conv) for m in net.modules() if isinstance(m, nn.Conv2d)]
    was_training = net.training
    try:
        with torch.no_grad():
            p = next(net.parameters())
            net.eval()
            # the probe image in the weights' own dtype: a bf16 network refuses an fp32 input
            net(torch.zeros(1, 3, px, px, device=p.device, dtype=p.dtype))
    finally:
        for h in hooks:
            h.remove()
        net.train(was_training)
    forward = sum(convs) + 2 * net.head.in_features * net.head.out_features
    return 3 * forward - convs[0] if training else forward


MEAN, STD = 127.5, 64.0         # uint8 pixels to roughly zero mean, unit spread


class ImagePool:
    """``pool`` seeded uint8 images [3, px, px] with labels, as ``n`` contiguous batches of ``batch`` in
    page-locked host memory (on a GPU run) and a held-out set drawn the same way; ``next()`` hands the
    next batch to the device (an asynchronous copy from page-locked memory) and wraps at the end (an
    epoch)."""

    def __init__(self, ctx: Context, cfg: dict, batch: int, salt: int = 0):
        from .train_diffusion import LatentSource
        px, pool, classes = int(cfg["image_px"]), int(cfg["pool"]), int(cfg["classes"])
        if pool < batch:
            raise ValueError(f"pool ({pool} images) must hold at least one batch of {batch}")
        self.ctx, self.batch, self.n = ctx, batch, pool // batch
        src = LatentSource(classes, 3, px, int(cfg["modes"]), ctx.device, seed=ctx.seed * 7919 + 5)
        src.gen.manual_seed(ctx.seed * 7919 + 6 + salt + 1_000_003 * ctx.rank)
        pin = ctx.is_cuda
        self.images = torch.empty(self.n, batch, 3, px, px, dtype=torch.uint8, pin_memory=pin)
        self.labels = torch.empty(self.n, batch, dtype=torch.long, pin_memory=pin)
        for i in range(self.n):
            x, y = src.batch(batch)
            self.images[i].copy_((x * 48 + MEAN).clamp(0, 255).round().to(torch.uint8))
            self.labels[i].copy_(y)
        self.i = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch on the device: float images (normalised, channels-last on a GPU), labels."""
        i, self.i = self.i, (self.i + 1) % self.n
        x = self.images[i].to(self.ctx.device, non_blocking=True)
        y = self.labels[i].to(self.ctx.device, non_blocking=True)
        x = (x.float() - MEAN) / STD
        if self.ctx.is_cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y


@inference_entry
def run_classify(ctx: Context, cfg: dict) -> None:
    """Batches of images from the host classified by the network; top-5 classes back to the host."""
    batch = int(cfg["batch"])
    net = build(ctx, cfg).to(ctx.dtype).eval()
    images = ImagePool(ctx, cfg, batch)
    pause = IdlePause(ctx, cfg, "exp")

    def one_batch() -> torch.Tensor:
        x, _ = images.next()
        return net(x.to(ctx.dtype)).topk(5, dim=1).indices

    ctx.ledger.flops_per_step = flopcount.measure(one_batch)
    px = int(cfg["image_px"])
    ctx.ledger.extra.update(params=sum(p.numel() for p in net.parameters()), method="flop_counter",
                            analytic_flops_per_image=forward_flops(net, px), image_px=px,
                            bytes_from_host_per_step=batch * 3 * px * px, pool_images=images.n * batch)
    host_sum = 0
    while ctx.keep_going():
        t0 = time.perf_counter()
        top5 = one_batch().to("cpu")                                    # to the clients
        host_sum += int(top5[:, 0].sum())
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch)                # a "token" is an image
        pause.wait()
    ctx.ledger.extra["host_checksum"] = host_sum


RESNET50 = {"blocks": [3, 4, 6, 3], "width": 64, "block": "bottleneck", "classes": 1000, "image_px": 224,
            "modes": 16}
TOY = {"blocks": [1, 1, 1, 1], "width": 8, "image_px": 32, "classes": 10, "modes": 4, "batch": 4, "pool": 16}

variants("infer.vision", "inference", "vision", run_classify,
         base={**RESNET50, "batch": 256, "pool": 4096, "pause_s": 0.0}, toy={**TOY, "pause_s": 0.0},
         gpus=1, description="image classification with a residual convolutional network: uint8 images "
                             "from page-locked host memory, bf16 convolutions, top-5 classes to the host",
         grid={
             "r50_b256": {},                                                # offline batch scoring, back to back
             "r50_b32_gap": {"batch": 32, "pause_s": 0.05},                 # online serving, requests at random
             "r18_px128_b1024": {"blocks": [2, 2, 2, 2], "block": "basic", "image_px": 128, "batch": 1024,
                                 "pool": 8192},                             # small images, large batches
             "r101_b128": {"blocks": [3, 4, 23, 3], "batch": 128},          # deeper, 101 layers
             # round 2 (recorded after the single-device lead was refitted with the four above)
             "r34_b512": {"blocks": [3, 4, 6, 3], "block": "basic", "batch": 512},   # ResNet-34
             "r152_b64": {"blocks": [3, 8, 36, 3], "batch": 64},            # ResNet-152
             "r50_px160_b1024": {"image_px": 160, "batch": 1024, "pool": 8192},   # smaller images, larger batches
             "r18_b64_gap": {"blocks": [2, 2, 2, 2], "block": "basic", "batch": 64,
                             "pause_s": 0.02},                              # online, a small network
         })
