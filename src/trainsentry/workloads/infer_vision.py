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

``arch`` picks one of three networks (round 3 of the convolutional campaign added the last two, whose
kernels differ from a residual network's): ``resnet`` (above, the default); ``mobilenet_v2``, Sandler,
Howard, Zhu, Zhmoginov and Chen's inverted residuals ("MobileNetV2: Inverted Residuals and Linear
Bottlenecks", CVPR 2018: 1×1 expansion, a depthwise 3×3 convolution, which is memory-bound and runs on
no tensor core, and a linear 1×1 projection; ``width`` scales the channels); and ``vgg``, Simonyan and
Zisserman's plain stacks of 3×3 convolutions with batch normalisation ("Very Deep Convolutional Networks
for Large-Scale Image Recognition", ICLR 2015; ``blocks`` the number of convolutions per stage, (2, 2,
3, 3, 3) being VGG-16) ending in three fully connected layers, most of its 138 M parameters.
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


def _divisible(v: float, by: int = 8) -> int:
    """``v`` rounded to a multiple of ``by``, never below 90 % of it (MobileNet's channel rounding)."""
    out = max(by, int(v + by / 2) // by * by)
    return out + by if out < 0.9 * v else out


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1×1 expansion by ``expand`` (none at 1), depthwise 3×3 with the stride, linear
    1×1 projection; the input added back where the shape allows."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(inplace=True), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


# MobileNetV2's stages: expansion, output channels (at width 32, the published width), blocks, first stride
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    def __init__(self, width: int, classes: int):
        super().__init__()
        scale = width / 32
        cin = _divisible(32 * scale)
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU6(inplace=True)]
        for expand, c, n, s in MOBILENET_V2:
            cout = _divisible(c * scale)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, expand))
                cin = cout
        last = _divisible(1280 * max(1.0, scale))
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class VGG(nn.Module):
    """``blocks[i]`` 3×3 convolutions (with batch normalisation) of width ``width`` × 2^i, capped at 8 ×
    ``width``, then a 2×2 max pool, per stage; the features pooled to 7×7 and three fully connected
    layers (4096 wide at ``width`` 64) with dropout."""

    def __init__(self, blocks: tuple[int, ...], width: int, classes: int):
        super().__init__()
        if not blocks or min(blocks) < 1:
            raise ValueError(f"blocks must be stage depths of 1 or more, got {blocks}")
        layers: list[nn.Module] = []
        cin = 3
        for stage, depth in enumerate(blocks):
            w = width * 2 ** min(stage, 3)
            for _ in range(depth):
                layers += [nn.Conv2d(cin, w, 3, 1, 1), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
                cin = w
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        fc = width * 64
        self.head = nn.Sequential(nn.Linear(cin * 49, fc), nn.ReLU(inplace=True), nn.Dropout(0.5),
                                  nn.Linear(fc, fc), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(fc, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 7), 1))


ARCHS = ("resnet", "mobilenet_v2", "vgg")


def make_net(cfg: dict) -> nn.Module:
    """The network ``cfg`` describes (``arch``, default ``resnet``), on the current default device."""
    arch = str(cfg.get("arch", "resnet"))
    classes, width = int(cfg["classes"]), int(cfg["width"])
    if arch == "resnet":
        return ResNet(tuple(int(b) for b in cfg["blocks"]), width, str(cfg["block"]), classes)
    if arch == "mobilenet_v2":
        return MobileNetV2(width, classes)
    if arch == "vgg":
        return VGG(tuple(int(b) for b in cfg["blocks"]), width, classes)
    raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")


def describe_net(cfg: dict) -> str:
    """A short name of the configured network's shape (the training table's extra column)."""
    arch = str(cfg.get("arch", "resnet"))
    if arch == "mobilenet_v2":
        return f"MobileNetV2, width {cfg['width']}"
    blocks = "-".join(map(str, cfg["blocks"]))
    return f"VGG, convolutions {blocks}" if arch == "vgg" else f"{cfg['block']} blocks {blocks}"


def build(ctx: Context, cfg: dict) -> nn.Module:
    """The configured network on the run's device, channels-last on a GPU (as cuDNN's fast convolutions
    want)."""
    torch.manual_seed(ctx.seed)
    net = make_net(cfg).to(ctx.device)
    if not ctx.is_cuda:
        return net
    torch.backends.cudnn.benchmark = True        # the fastest convolution algorithm per shape, as trainers set
    return net.to(memory_format=torch.channels_last)


def forward_flops(net: nn.Module, px: int, training: bool = False) -> int:
    """Analytic FLOPs of one ``px``-pixel image: 2 × the multiply-adds of every convolution (output
    positions × input channels / groups × kernel area × output channels) and of every linear layer,
    read off the output shapes of one forward pass; normalisation, pooling and additions left out, as
    FlopCounterMode counts them. ``training``: forward and backward, 3 × the forward less the stem's
    input gradient, which nothing needs (the images are not trained)."""
    convs: list[int] = []
    linears: list[int] = []

    def conv(mod, _inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1]
        convs.append(2 * out.shape[2] * out.shape[3] * out.shape[1] * (mod.in_channels // mod.groups) * k)

    def linear(mod, _inp, _out):
        linears.append(2 * mod.in_features * mod.out_features)

    hooks = [m.register_forward_hook(conv) for m in net.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(linear) for m in net.modules() if isinstance(m, nn.Linear)]
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
    forward = sum(convs) + sum(linears)
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
    ctx.ledger.extra.update(arch=str(cfg.get("arch", "resnet")), params=sum(p.numel() for p in net.parameters()),
                            method="flop_counter",
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
             # round 3 (recorded after the lead was refitted with rounds 1 and 2): other networks
             "mnv2_b512": {"arch": "mobilenet_v2", "width": 32, "batch": 512, "pool": 8192},   # MobileNetV2
             "mnv2_b16_gap": {"arch": "mobilenet_v2", "width": 32, "batch": 16,
                              "pause_s": 0.01},                             # online, a phone-sized network
             "vgg16_b64": {"arch": "vgg", "blocks": [2, 2, 3, 3, 3], "batch": 64},   # VGG-16
             "mnv2_px160_b1024": {"arch": "mobilenet_v2", "width": 32, "image_px": 160, "batch": 1024,
                                  "pool": 8192},                             # small images, large batches
             "vgg16_b16_gap": {"arch": "vgg", "blocks": [2, 2, 3, 3, 3], "batch": 16,
                               "pause_s": 0.02},                            # online VGG-16
         })
