"""Inference workloads (class ``inference``) on one GPU or as independent replicas: batched KV-cache
generation, data-parallel replicas, long-context prefill-heavy batches, encoder-only embedding and
input attribution with a frozen model (forward and backward, no update: the hard negative for "a
backward pass means training").

The multi-GPU kinds live beside this module: tensor-parallel, pipeline-parallel and disaggregated
serving in infer_parallel.py, the continuous-batching server in infer_serve.py. Importing this module
registers them all. Configs are sized for 2 × H200 in bf16; the toy override runs on CPU in seconds.
"""

from __future__ import annotations

import time

import torch

from . import flops as flopcount
from . import fp8
from .base import Context, variants
from .infer_common import IdlePause, build_model, generate_rounds, inference_entry, model_config, prompt_source
from .model import loss_fn

TOY = {"model": "toy", "seq_len": 64, "batch": 2, "prompt_len": 8, "gen_len": 4, "pause_s": 0.0}


@inference_entry
def run_generate(ctx: Context, cfg: dict) -> None:
    """Batched generation with a KV cache (prefill, then one token per sequence per step). ``precision:
    fp8`` or ``fp8_delayed`` serves every eligible linear layer's product in float8 (``workloads.fp8``,
    forward only), as FP8 inference servers do."""
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    ctx.ledger.extra["params"] = mcfg.params()
    counting = fp8.setup(ctx.ledger.extra, cfg, model, ctx.device,
                         str(next(model.parameters()).dtype).replace("torch.", ""), serving=True)
    generate_rounds(ctx, model, mcfg, cfg, counting=counting)


variants("infer.generate", "inference", "generate", run_generate,
         base={"model": "gpt350m", "seq_len": 2048, "batch": 64, "prompt_len": 256, "gen_len": 256},
         toy=TOY, gpus=1, grid={
             "s50m_b32": {"model": "gpt50m", "seq_len": 1024, "batch": 32, "prompt_len": 128, "gen_len": 384},
             "m350m_b128": {"batch": 128, "prompt_len": 512, "gen_len": 512},
             "l1b_b256": {"model": "gpt1b", "batch": 256, "prompt_len": 256, "gen_len": 256},
             "xl3b_b64": {"model": "gpt3b", "batch": 64, "prompt_len": 1024, "gen_len": 512},
             "g7b_b16": {"model": "gpt7b", "batch": 16, "prompt_len": 512, "gen_len": 256},
             # Lightly loaded: a few users, long idle gaps between their batches.
             "m350m_b4_light": {"batch": 4, "prompt_len": 64, "gen_len": 128, "pause_s": 2.0},
         })

# Independent copies of the model, one per GPU, each generating for its own users: no inter-GPU traffic.
variants("infer.replicas", "inference", "replicas", run_generate,
         base={"model": "gpt350m", "seq_len": 2048, "batch": 64, "prompt_len": 256, "gen_len": 256},
         toy=TOY, gpus=0, grid={
             "m350m_b64": {},
             "l1b_b128": {"model": "gpt1b", "batch": 128, "prompt_len": 512, "gen_len": 384},
             "s125m_b8_bursty": {"model": "gpt125m", "batch": 8, "prompt_len": 128, "gen_len": 192,
                                 "pause_s": 1.0},
         })

# The same on every GPU of an 8-GPU launch (issue 9); on 2 GPUs use infer.replicas.*.
variants("infer.replicas8", "inference", "replicas", run_generate,
         base={"model": "gpt350m", "seq_len": 2048, "batch": 64, "prompt_len": 256, "gen_len": 256},
         toy=TOY, gpus=0, min_ranks=8, grid={
             "m350m_b64": {},
             "l1b_b128": {"model": "gpt1b", "batch": 128, "prompt_len": 512, "gen_len": 384},
         })

# Prefill-heavy: very long prompts, a handful of output tokens (summarisation, retrieval QA).
variants("infer.prefill", "inference", "prefill", run_generate,
         base={"model": "gpt350m", "seq_len": 8256, "batch": 8, "prompt_len": 8192, "gen_len": 8},
         toy={**TOY, "prompt_len": 40, "gen_len": 2}, gpus=1, grid={
             "m350m_ctx8k": {},
             "l1b_ctx16k": {"model": "gpt1b", "seq_len": 16416, "batch": 4, "prompt_len": 16384,
                            "gen_len": 16},
             "xl3b_ctx32k": {"model": "gpt3b", "seq_len": 32776, "batch": 1, "prompt_len": 32768,
                             "gen_len": 4, "pause_s": 0.5},
         })


# an embedding run's ``weights`` option -> the dtype its model is served in (None: the context's, bf16 on a GPU)
WEIGHTS = {"default": None, "fp32": torch.float32, "fp16": torch.float16}


class ResultSink:
    """Where a service's per-batch results end up: copied to host memory (``to_host``: over PCIe, as a
    service returning them to its clients must) or kept on the device; summed, so the work cannot be
    skipped and the copy is seen (``host_checksum`` is 0 without it)."""

    def __init__(self, n: int, device, to_host: bool):
        self.to_host = to_host
        self.device_sum = torch.zeros(n, device=device, dtype=torch.float32)
        self.host_sum = torch.zeros(n, dtype=torch.float32)

    def add(self, v: torch.Tensor) -> None:
        if self.to_host:
            self.host_sum += v.to("cpu")
        else:
            self.device_sum += v

    def checksum(self) -> float:
        return float((self.device_sum.cpu() + self.host_sum).norm())

    def host_checksum(self) -> float:
        return float(self.host_sum.norm())


@inference_entry
def run_embed(ctx: Context, cfg: dict) -> None:
    """Encoder-only embedding: bidirectional attention over fixed-length texts, mean-pooled.

    With ``to_host`` every batch's normalised vectors are copied to host memory, as a service that
    returns them to its clients must (batch × d_model × 4 bytes per step over PCIe, device to host);
    without it they stay on the GPU (the configurations recorded before 2026-12-01 had no copy).
    ``weights: fp32`` serves the model in full precision (no bf16 cast), as some embedding services do;
    ``weights: fp16`` in half precision (docs/pipes.md: does fp16 serving wake the FP16 pipe?).
    ``pause_s`` idles the GPU after each batch: exactly that long by default (the configurations
    recorded before 2026-12-03), or exponential gaps of that mean with ``pause_dist: exp``."""
    mcfg = model_config(cfg, causal=False)
    weights = cfg.get("weights", "default")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {sorted(WEIGHTS)}, got {weights!r}")
    model = build_model(ctx, mcfg, WEIGHTS[weights])
    # precision fp8 (or fp8_delayed): every eligible product served in float8 (workloads.fp8's recipes,
    # forward only), the benign counterpart of an FP8 trainer
    counting = fp8.setup(ctx.ledger.extra, cfg, model, ctx.device,
                         str(next(model.parameters()).dtype).replace("torch.", ""), serving=True)
    batch, length = int(cfg["batch"]), int(cfg["text_len"])
    pause = IdlePause(ctx, cfg, "const")
    to_host = bool(cfg.get("to_host", False))
    src = prompt_source(ctx, salt=ctx.rank)
    texts = src.prompts(batch, length)
    with counting():
        ctx.ledger.flops_per_step = flopcount.measure(lambda: model.embed(texts))
    ctx.ledger.extra.update(params=mcfg.params(), method="flop_counter", weights_dtype=str(next(model.parameters()).dtype),
                            bytes_to_host_per_step=batch * mcfg.d_model * 4 if to_host else 0)
    sink = ResultSink(mcfg.d_model, ctx.device, to_host)
    while ctx.keep_going():
        texts = src.prompts(batch, length)
        t0 = time.perf_counter()
        vecs = model.embed(texts)
        unit = torch.nn.functional.normalize(vecs.float(), dim=-1)
        sink.add(unit.sum(0))   # with to_host, what the clients receive
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * length)
        pause.wait()
    ctx.ledger.extra["embedding_checksum"] = sink.checksum()
    ctx.ledger.extra["host_checksum"] = sink.host_checksum()   # what reached host memory (0 without to_host)


variants("infer.embed", "inference", "embed", run_embed,
         base={"model": "gpt125m", "seq_len": 512, "batch": 256, "text_len": 512},
         toy={"model": "toy", "seq_len": 64, "batch": 4, "text_len": 16, "pause_s": 0.0}, gpus=1, grid={
             "s125m_b256_l512": {},
             "s50m_b1024_l128": {"model": "gpt50m", "seq_len": 128, "batch": 1024, "text_len": 128},
             "m350m_b32_l2048": {"model": "gpt350m", "seq_len": 2048, "batch": 32, "text_len": 2048,
                                 "pause_s": 0.2},
             # a 5.6 B embedding model: memory held near a single-GPU trainer's, vectors to the host
             "g7b_b64_l512_host": {"model": "gpt7b", "batch": 64, "to_host": True},
         })
variants("infer.embed", "inference", "embed", run_embed,
         base={"model": "gpt1b", "seq_len": 1024, "batch": 128, "text_len": 1024},
         toy={"model": "toy", "seq_len": 64, "batch": 4, "text_len": 16, "pause_s": 0.0}, gpus=0, grid={
             "l1b_b128_l1024_x2": {},
         })

def weight_versions(model: torch.nn.Module) -> list[int]:
    """Every parameter's in-place write counter (autograd's ``_version``): any optimizer step, any
    in-place update of a weight, even one that leaves a checksum unchanged, moves it."""
    return [p._version for p in model.parameters()]


def weights_written(model: torch.nn.Module, versions: list[int]) -> bool:
    return weight_versions(model) != versions


ATTRIBUTION_METHODS = ("saliency", "ig", "pgd")


def run_attribute(ctx: Context, cfg: dict) -> None:
    """Gradients with respect to the input of a frozen model, three ways (``method``):

    - ``saliency`` (default): gradient × input. Each batch of texts is scored (next-token
      cross-entropy), the loss is differentiated with respect to the input embeddings only, and every
      token gets ``(∂loss/∂x · x)`` summed over the hidden dimension;
    - ``ig``: integrated gradients (Sundararajan et al., 2017) from a zero baseline, ``ig_steps``
      interpolation points per text (midpoint rule), one forward and backward pass per point, the
      token's score ``x · mean(∂loss/∂x)``;
    - ``pgd``: adversarial-example search in embedding space (projected gradient ascent on the loss,
      as in Madry et al., 2018): ``pgd_iters`` signed-gradient steps of ``pgd_eps / 4`` on a
      perturbation kept within ±``pgd_eps``; the score is each token's perturbation norm, and
      ``pgd_loss_gain`` records how much the search raised the loss (the run's ground truth that the
      search is real).

    Interpretability, data-auditing and robustness teams run exactly this on models they do not
    change: forward and backward passes every step, at the power cap, yet no weight gradient, no
    optimizer and no update. The ground truth says so: ``weight_grads`` (parameters holding a gradient
    at the end) and ``weights_changed`` (any parameter written in place during the run, from its
    version counter; the runs recorded on 2026-12-01 compared a sum over all weights instead). With
    ``to_host`` the scores go to host memory (batch × text_len × 4 bytes per step, ``host_checksum``),
    as a service returning them must. ``pause_s`` idles the GPU after each batch (``IdlePause``: a fixed
    gap unless ``pause_dist: exp``).

    FLOPs per step come from the FLOP counter on one real step: about twice the forward's per pass
    (the backward computes activation gradients, not weight gradients), against three times for
    training; ``ig`` and ``pgd`` make ``ig_steps`` and ``pgd_iters`` passes per step (``pgd`` one more
    forward, the loss the search reached)."""
    method = str(cfg.get("method", "saliency"))
    if method not in ATTRIBUTION_METHODS:
        raise ValueError(f"unknown attribution method {method!r}; known: {ATTRIBUTION_METHODS}")
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    for p in model.parameters():
        p.requires_grad_(False)
    versions = weight_versions(model)
    batch, length = int(cfg["batch"]), int(cfg["text_len"])
    if length > mcfg.seq_len:
        raise ValueError(f"text_len {length} exceeds seq_len {mcfg.seq_len}")
    passes = {"saliency": 1, "ig": int(cfg.get("ig_steps", 16)), "pgd": int(cfg.get("pgd_iters", 8))}[method]
    if passes < 1:
        raise ValueError(f"{method} needs at least one pass, got {passes}")
    eps = float(cfg.get("pgd_eps", 0.05))
    pause = IdlePause(ctx, cfg, "const")
    to_host = bool(cfg.get("to_host", False))
    src = prompt_source(ctx, salt=ctx.rank)
    pos = torch.arange(length, device=ctx.device)
    gain = []   # pgd: loss after the search minus loss before, per step

    def grad_at(x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, float]:
        x = x.detach().requires_grad_(True)
        loss = loss_fn(model(x), targets)
        loss.backward()   # only x needs a gradient: no weight gradient is formed
        return x.grad, float(loss.detach()) if method == "pgd" else 0.0

    def attribute(tokens: torch.Tensor) -> torch.Tensor:
        x0, targets = (model.tok(tokens[:, :-1]) + model.pos(pos)).detach(), tokens[:, 1:]
        if method == "saliency":
            g, _ = grad_at(x0, targets)
            return (g.float() * x0.float()).sum(-1)   # [batch, length]: one score per token
        if method == "ig":
            total = torch.zeros_like(x0, dtype=torch.float32)
            for k in range(passes):
                g, _ = grad_at(x0 * ((k + 0.5) / passes), targets)
                total += g.float()
            return (x0.float() * total / passes).sum(-1)
        delta = torch.zeros_like(x0)
        first = None
        for _ in range(passes):
            g, loss = grad_at(x0 + delta, targets)
            first = loss if first is None else first
            delta = (delta + (eps / 4) * g.sign()).clamp(-eps, eps)
        with torch.no_grad():
            gain.append(float(loss_fn(model(x0 + delta), targets)) - first)
        return delta.float().norm(dim=-1)

    ctx.ledger.flops_per_step = flopcount.measure(lambda: attribute(src.prompts(batch, length + 1)))
    gain.clear()
    ctx.ledger.extra.update(params=mcfg.params(), method="flop_counter", weights_dtype=str(next(model.parameters()).dtype),
                            attribution_method=method, passes_per_step=passes,
                            bytes_to_host_per_step=batch * length * 4 if to_host else 0)
    sink = ResultSink(length, ctx.device, to_host)
    while ctx.keep_going():
        tokens = src.prompts(batch, length + 1)
        t0 = time.perf_counter()
        sink.add(attribute(tokens).abs().sum(0))
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * length)
        pause.wait()
    ctx.ledger.extra.update(attribution_checksum=sink.checksum(),
                            host_checksum=sink.host_checksum(),   # what reached host memory (0 without to_host)
                            weights_changed=weights_written(model, versions),
                            weight_grads=sum(p.grad is not None for p in model.parameters()))
    if method == "pgd":
        ctx.ledger.extra.update(pgd_eps=eps, pgd_loss_gain=sum(gain) / max(len(gain), 1))


variants("infer.attribute", "inference", "attribute", run_attribute,
         base={"model": "gpt1b", "seq_len": 1025, "batch": 16, "text_len": 1024},
         toy={"model": "toy", "seq_len": 64, "batch": 2, "text_len": 16, "pause_s": 0.0, "ig_steps": 3, "pgd_iters": 3},
         gpus=1, description="gradients with respect to the input of a frozen model (saliency, integrated "
                             "gradients, adversarial search): forward and backward, no update", grid={
             "l1b_b16_l1024": {},
             "s125m_b64_l512": {"model": "gpt125m", "seq_len": 513, "batch": 64, "text_len": 512},
             "xl3b_b4_l2048_host": {"model": "gpt3b", "seq_len": 2049, "batch": 4, "text_len": 2048, "to_host": True},
             "l1b_b4_l1024_ig16": {"batch": 4, "method": "ig", "ig_steps": 16},
             "l1b_b16_l1024_pgd8": {"method": "pgd", "pgd_iters": 8},
             "xl3b_b2_l2048_ig8": {"model": "gpt3b", "seq_len": 2049, "batch": 2, "text_len": 2048, "method": "ig",
                                   "ig_steps": 8},
         })

from . import (infer_agent, infer_cp, infer_diffusion, infer_kvswap, infer_md, infer_moe, infer_offload,  # noqa: E402,F401
               infer_parallel, infer_rag, infer_serve, infer_specdec, infer_vision)  # (register agent, cp, diffusion, kvswap, md, ep, offload, tp, pp, disagg, rag, serve, specdec, vision)
