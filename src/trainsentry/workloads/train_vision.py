"""Training a convolutional image classifier on one GPU (family ``convnet``): training that is neither a
language model nor a transformer, the training-side counterpart of ``infer.vision`` (the same
networks, residual, MobileNetV2 or VGG, the same pool of images from the host), so that the detectors
meet a trainer whose kernels (convolutions, batch normalisation) and data path (uint8 images over PCIe
every step) they never saw.

Each step: the next batch of the pool to the device, normalised, cross-entropy with label smoothing
0.1, backward, SGD with momentum and weight decay 5e-5 (the recipe residual networks are trained with),
bf16 autocast on the GPU, fp32 weights. No augmentation: a mirrored class pattern is another pattern
(the cosines are not symmetric), which at toy size the held-out loss showed the network failing to learn.
The pool is a finite training set, so steps go through epochs of it; ``val_loss`` is the same loss
on held-out images drawn the same way. A "token" of the ledger is an image.
"""

from __future__ import annotations

import torch
from torch import nn

from . import parallel as par
from .base import Context, variants
from .infer_vision import RESNET50, TOY, ImagePool, build, forward_flops


def _model(cfg: dict) -> dict:
    """The ledger's description of the network: its ``arch`` and the keys that shape it (a MobileNet has
    no stage depths; only a residual network has a block type)."""
    arch = str(cfg.get("arch", "resnet"))
    # no attention and no token sequence: ``causal`` False tells the FLOP study there is none to discount
    model = {"arch": arch, "width": int(cfg["width"]), "classes": int(cfg["classes"]), "causal": False}
    if arch in ("resnet", "vgg"):
        model["blocks"] = list(cfg["blocks"])
    if arch == "resnet":
        model["block"] = str(cfg["block"])
    return model


def _record(ctx: Context, cfg: dict, net: nn.Module, images: ImagePool) -> None:
    px = int(cfg["image_px"])
    params = sum(p.numel() for p in net.parameters())
    ctx.ledger.extra.update({
        "model": _model(cfg),
        "params_total": params, "params_local": params, "params_trainable_local": params,
        "analytic_flops_per_token": forward_flops(net, px, training=True),
        "optimizer": cfg.get("optimizer", "sgd"), "batch_per_rank": int(cfg["batch"]), "image_px": px,
        "compute_dtype": str(ctx.dtype) if ctx.is_cuda else "torch.float32",
        "bytes_from_host_per_step": int(cfg["batch"]) * 3 * px * px, "pool_images": images.n * images.batch})
    net.train()


def train_convnet(ctx: Context, cfg: dict) -> None:
    """One GPU: a residual network trained on images from the host with SGD and momentum."""
    from .train import _set_val, _train_loop

    net = build(ctx, cfg)
    batch = int(cfg["batch"])
    images = ImagePool(ctx, cfg, batch)
    _record(ctx, cfg, net, images)
    opts = par.make_optimizers(ctx, net, cfg)
    for opt in opts:
        for group in opt.param_groups:
            group["weight_decay"] = float(cfg["weight_decay"])
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)

    def step():
        x, y = images.next()
        with par.autocast(ctx):
            loss = loss_fn(net(x), y)
        loss.backward()
        par.optimizer_step(opts)
        return loss.detach()

    _train_loop(ctx, cfg, step, batch)

    @torch.no_grad()
    def evaluate() -> float:
        net.eval()
        held = ImagePool(ctx, {**cfg, "pool": batch * int(cfg["val_batches"])}, batch, salt=99)
        losses = []
        for _ in range(held.n):
            x, y = held.next()
            with par.autocast(ctx):
                losses.append(float(loss_fn(net(x), y)))
        net.train()
        return sum(losses) / len(losses)

    _set_val(ctx, evaluate)


# SGD's rate 0.1 per 256 images (Goyal et al. 2017's linear scaling), warmed up over 20 steps
BASE = {**RESNET50, "batch": 256, "pool": 8192, "optimizer": "sgd", "lr_sgd": 0.1, "weight_decay": 5e-5,
        "warmup": 20, "val_batches": 2}

variants("train.convnet", "training", "convnet", train_convnet,
         base=BASE, toy={**TOY, "batch": 16, "pool": 64, "warmup": 2, "val_batches": 2},
         gpus=1, description="a residual convolutional network trained on one GPU on uint8 images from the "
                             "host (SGD with momentum, label smoothing): training that is not a transformer",
         grid={
             "r50_b256": {},                                                # ResNet-50, 224 px
             "r18_px128_b512": {"blocks": [2, 2, 2, 2], "block": "basic", "image_px": 128, "batch": 512,
                                "lr_sgd": 0.2},
             "r101_b128": {"blocks": [3, 4, 23, 3], "batch": 128, "lr_sgd": 0.05},
             # round 2 (recorded after the single-device lead was refitted with the three above)
             "r34_b256": {"blocks": [3, 4, 6, 3], "block": "basic"},         # ResNet-34
             "r152_b64": {"blocks": [3, 8, 36, 3], "batch": 64, "lr_sgd": 0.025},   # ResNet-152
             "r50_px160_b512": {"image_px": 160, "batch": 512, "lr_sgd": 0.2},   # smaller images, larger batches
             "r50_b64": {"batch": 64, "lr_sgd": 0.025},                      # small batches: a fine-tuning's size
             # round 3 (recorded after the lead was refitted with rounds 1 and 2): other networks
             # MobileNetV2 (depthwise convolutions): torchvision's recipe, SGD at 0.036 per 256 images
             "mnv2_b256": {"arch": "mobilenet_v2", "width": 32, "lr_sgd": 0.036, "weight_decay": 4e-5},
             "mnv2_px160_b512": {"arch": "mobilenet_v2", "width": 32, "image_px": 160, "batch": 512,
                                 "lr_sgd": 0.072, "weight_decay": 4e-5},
             "vgg16_b64": {"arch": "vgg", "blocks": [2, 2, 3, 3, 3], "batch": 64,
                           "lr_sgd": 0.01},                                  # VGG-16: 138 M parameters, no shortcuts
             "vgg11_px128_b256": {"arch": "vgg", "blocks": [1, 1, 2, 2, 2], "image_px": 128, "batch": 256,
                                  "lr_sgd": 0.02},                           # VGG-11 on 128-px images
         })
