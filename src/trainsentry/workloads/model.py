"""One GPT-style decoder (and its encoder-only variant) used by every workload.

Parallelism is applied from outside (DDP, FSDP, tensor and pipeline parallel live in the workload
modules); this file only defines the model. Views use ``-1`` for the head count so a tensor-parallel
shard (fewer local heads) runs the same code. Byte-level vocabulary (256).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 512
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: int | None = None      # grouped-query attention when < n_heads
    d_ff: int | None = None            # default 4 * d_model
    seq_len: int = 1024                # maximum positions
    vocab: int = 256
    causal: bool = True                # False: encoder-only (embedding model)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model

    def params(self) -> int:
        """Parameter count (weights and norms; embeddings included)."""
        d, hd = self.d_model, self.head_dim
        attn = d * d + 2 * d * self.kv_heads * hd + d * d
        mlp = 2 * d * self.ff
        per_layer = attn + mlp + 2 * d
        return self.n_layers * per_layer + self.vocab * d + self.seq_len * d + d + d * self.vocab

    def flops_per_token(self, context: int, training: bool = True) -> float:
        """Analytic FLOPs per token: 2 per matmul weight plus attention, forward; ×3 for training.

        Attention counts the full QKᵀ and AV products at this context length (the causal mask is not
        discounted), the convention of torch's FlopCounterMode, so the two can be compared.
        """
        d = self.d_model
        n_matmul = self.params() - self.vocab * d - self.seq_len * d - (2 * self.n_layers + 1) * d
        attn = 2 * 2 * self.n_layers * context * d   # QKᵀ and AV, forward, per token at this context
        fwd = 2 * n_matmul + attn
        return 3 * fwd if training else fwd

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Preallocated keys and values per layer: [batch, kv_heads, max_len, head_dim]."""

    def __init__(self, cfg: ModelConfig, n_layers: int, batch: int, max_len: int, device, dtype, kv_heads=None):
        h = kv_heads or cfg.kv_heads
        shape = (batch, h, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def nbytes(self, upto: int | None = None) -> int:
        n = self.length if upto is None else upto
        k = self.k[0]
        return 2 * len(self.k) * k.shape[0] * k.shape[1] * n * k.shape[3] * k.element_size()


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.kv_heads * hd, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.kv_heads * hd, bias=False)
        self.o = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)

    def forward(self, x, cache: KVCache | None = None, layer: int = 0):
        b, t, _ = x.shape
        hd = self.cfg.head_dim
        q = self.q(x).view(b, t, -1, hd).transpose(1, 2)
        k = self.k(x).view(b, t, -1, hd).transpose(1, 2)
        v = self.v(x).view(b, t, -1, hd).transpose(1, 2)
        causal = self.cfg.causal
        mask = None
        if cache is not None:
            start = cache.length
            cache.k[layer][:, :, start:start + t] = k
            cache.v[layer][:, :, start:start + t] = v
            k = cache.k[layer][:, :, :start + t]
            v = cache.v[layer][:, :, :start + t]
            if causal and t > 1 and start > 0:
                # a chunk appended to a non-empty cache (a conversation's next turn): query i sees the
                # cached keys and the chunk's keys up to its own position
                mask = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(diagonal=start)
            causal = causal and t > 1 and start == 0
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ff, bias=False)
        self.fc2 = nn.Linear(cfg.ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x, cache: KVCache | None = None, layer: int = 0):
        x = x + self.attn(self.ln1(x), cache, layer)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder (or encoder when ``cfg.causal`` is False). ``layers`` is a ModuleDict keyed by index
    string so pipeline stages can delete the layers they do not own and keep the names stable."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm = nn.RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, cache: KVCache | None = None, positions: torch.Tensor | None = None):
        """``idx`` [batch, time] token ids (first stage) or hidden states [batch, time, d] (later
        pipeline stages). Returns logits when this module still has its head, else hidden states.
        ``positions``: every token's position when there is no cache and ``idx`` is not the start of
        the sequence (the chunks a context-parallel rank holds)."""
        if idx.dtype in (torch.int64, torch.int32):
            t = idx.shape[1]
            start = cache.length if cache is not None else 0
            pos = positions if positions is not None else torch.arange(start, start + t, device=idx.device)
            x = self.tok(idx) + self.pos(pos)
        else:
            x = idx
        for i, block in enumerate(self.layers.values()):
            x = block(x, cache, i)
        if cache is not None:
            cache.length += x.shape[1]
        if self.norm is None:
            return x
        x = self.norm(x)
        return self.head(x) if self.head is not None else x

    def embed(self, idx):
        """Encoder-only use: mean-pooled final hidden state per sequence."""
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.layers.values():
            x = block(x)
        return self.norm(x).mean(dim=1)


def loss_fn(logits, targets):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def n_params(module: nn.Module) -> int:
    """Parameters this rank holds (a tensor-parallel DTensor counts its local shard)."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in module.parameters())
