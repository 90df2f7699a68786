"""A small decoder-only transformer for the pretraining stage, with sample-level attention masking.

    embed_tokens → n_layers × [x += attn(attn_norm(x)); x += mlp(mlp_norm(x))] → norm → lm_head

* RMSNorm (learned scale, eps 1e-6) before attention, before the MLP and at the end.
* Attention: separate q_proj / k_proj / v_proj / o_proj (no bias; `n_heads` on the attention module
  so trainer.optim routes W_Q and W_K to head-wise Muon), rotary position embedding (rotate-half,
  θ = 10,000) driven by the packed sequence's position_ids, which restart at 0 in every document.
* Sample-level masking: token i attends to token j only if j ≤ i AND both lie in the same segment
  (document chunk) of the packed sequence: a block-diagonal causal mask built from cu_seqlens /
  segment ids. No attention crosses a document boundary.
* SwiGLU MLP with the clamp at `swiglu_limit` = 10 (GPT-OSS style): with g = gate_proj(x) and
  u = up_proj(x), the MLP is down_proj(silu(min(g, 10)) · clamp(u, −10, 10)): the gate
  pre-activation is clamped from above only (silu is already ≈ 0 below), the up projection on both
  sides. Clamped entries pass no gradient.
* Untied lm_head; embeddings and head are initialised N(0, 0.02), other matrices N(0, 0.02) with
  o_proj and down_proj scaled by 1/sqrt(2·n_layers); norm scales 1.
* Images (`config.vision`, None for text-only shards): a trainer.vision.VisionTower (`vision`: ViT,
  2x2 merge, MLP projector) turns each image into its block of (H/28)·(W/28) embeddings, which replace
  the token embeddings of the block's placeholder ids (`embed`): a scatter at the span's row and
  positions, so a block may start anywhere in a row. The decoder then treats the block like any
  tokens of its segment (causal attention, per-segment positions).

Parameter names match trainer.optim's routing patterns: embed_tokens / lm_head → Sinkhorn,
q_proj / k_proj → head-wise Muon, the other projections → Muon, norm weights → AdamW; the vision
tower's matrices → Muon (q_proj / k_proj head-wise), its norms and biases → AdamW (trainer/vision.py).

Attention backends (`attention=`): "dense" builds the (B, 1, T, T) boolean mask and calls
F.scaled_dot_product_attention once; "segments" calls it once per segment with is_causal=True
(memory O(T) with the flash kernels, and no work spent on masked-out blocks — faster on CPU and for
long sequences); "auto" picks "segments" on CPU or when T > 4096, else "dense". Both compute the
same function (tests compare them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.vision import VisionConfig, VisionTower

__all__ = ["ModelConfig", "Transformer", "segment_ids_from_cu_seqlens", "positions_from_segments",
           "block_causal_mask"]


@dataclass
class ModelConfig:
    vocab_size: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int | None = None  # None: 8/3·d_model rounded up to a multiple of 64
    rope_theta: float = 10000.0
    swiglu_limit: float = 10.0
    norm_eps: float = 1e-6
    init_std: float = 0.02
    vision: VisionConfig | None = None  # a vision tower for image spans; None: text only

    def __post_init__(self) -> None:
        if isinstance(self.vision, dict):  # from to_dict()
            self.vision = VisionConfig(**self.vision)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size")
        if self.d_ff is None:
            self.d_ff = 64 * math.ceil(8 * self.d_model / 3 / 64)

    def to_dict(self) -> dict:
        return asdict(self)


def segment_ids_from_cu_seqlens(cu_seqlens: Tensor, length: int | None = None) -> Tensor:
    """Segment index of each position (0, 0, ..., 1, 1, ...); positions ≥ cu_seqlens[-1] (padding) get −1."""
    cu = torch.as_tensor(cu_seqlens, dtype=torch.long)
    n = int(cu[-1])
    length = n if length is None else length
    seg = torch.full((length,), -1, dtype=torch.long, device=cu.device)
    seg[:n] = torch.repeat_interleave(torch.arange(len(cu) - 1, device=cu.device), cu.diff())
    return seg


def positions_from_segments(segment_ids: Tensor) -> Tensor:
    """Position of each token within its segment (restarting at 0), for (..., T) segment ids."""
    T = segment_ids.size(-1)
    idx = torch.arange(T, device=segment_ids.device).expand_as(segment_ids)
    new = torch.ones_like(segment_ids, dtype=torch.bool)
    new[..., 1:] = segment_ids[..., 1:] != segment_ids[..., :-1]
    start = torch.where(new, idx, torch.zeros_like(idx)).cummax(dim=-1).values
    return idx - start


def block_causal_mask(segment_ids: Tensor) -> Tensor:
    """(B, 1, T, T) boolean mask, True where query i may attend key j: j ≤ i and same segment.

    Padding (segment −1) attends causally to padding only, so no row is empty (no NaN)."""
    T = segment_ids.size(-1)
    causal = torch.ones(T, T, dtype=torch.bool, device=segment_ids.device).tril()
    same = segment_ids.unsqueeze(-1) == segment_ids.unsqueeze(-2)
    return (same & causal).unsqueeze(1)


def segment_bounds(segment_ids: Tensor) -> list[list[tuple[int, int]]]:
    """Per row, the [start, end) of each run of equal segment ids (padding runs included)."""
    out = []
    for row in segment_ids.tolist():
        bounds, start = [], 0
        for i in range(1, len(row) + 1):
            if i == len(row) or row[i] != row[start]:
                bounds.append((start, i))
                start = i
        out.append(bounds)
    return out


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """cos, sin of shape (B, 1, T, head_dim) for (B, T) positions, in float32."""
        angles = position_ids.float().unsqueeze(-1) * self.inv_freq  # (B, T, head_dim/2)
        angles = torch.cat((angles, angles), dim=-1).unsqueeze(1)
        return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads  # read by trainer.optim for head-wise Muon on q_proj / k_proj
        self.head_dim = config.d_model // config.n_heads
        d = config.d_model
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, segment_ids: Tensor, backend: str,
                mask: Tensor | None, bounds: list | None) -> Tensor:
        B, T, _ = x.shape

        def heads(t: Tensor) -> Tensor:
            return t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d_h)

        q = apply_rotary(heads(self.q_proj(x)), cos, sin)
        k = apply_rotary(heads(self.k_proj(x)), cos, sin)
        v = heads(self.v_proj(x))
        if backend == "dense":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # one causal attention per segment: nothing crosses a segment boundary
            rows = []
            for b, spans in enumerate(bounds):
                rows.append(torch.cat([F.scaled_dot_product_attention(q[b:b + 1, :, s:e], k[b:b + 1, :, s:e],
                                                                      v[b:b + 1, :, s:e], is_causal=True)
                                       for s, e in spans], dim=2))
            out = torch.cat(rows, dim=0)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.limit = config.swiglu_limit
        self.gate_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.down_proj = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate = self.gate_proj(x).clamp(max=self.limit)
        up = self.up_proj(x).clamp(-self.limit, self.limit)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, segment_ids: Tensor, backend: str,
                mask: Tensor | None, bounds: list | None) -> Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, segment_ids, backend, mask, bounds)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """Decoder-only transformer; `forward` returns logits (B, T, vocab_size)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.n_heads = config.n_heads
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(config.d_model // config.n_heads, config.rope_theta)
        self.vision = VisionTower(config.vision, config.d_model) if config.vision is not None else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.init_std
        for name, p in self.named_parameters():
            if name.startswith("vision."):
                continue  # the tower has its own rule (biases 0)
            if p.ndim == 1:
                p.fill_(1.0)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.normal_(0.0, std / math.sqrt(2 * self.config.n_layers))
            else:
                p.normal_(0.0, std)
        if self.vision is not None:
            self.vision.reset_parameters()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed(self, input_ids: Tensor, images: list[dict] | None = None) -> Tensor:
        """Input embeddings (B, T, d_model): the token embeddings, with each image's block replaced by
        the vision tower's output for it.

        `images`: one dict per image span, {"row", "pos", "pixels"} (+ "tokens", checked): row of the
        batch, position of the first visual token, uint8 (H, W, 3) pixels (numpy or tensor). Images of
        one size go through the tower as one batch."""
        x = self.embed_tokens(input_ids)
        if not images:
            return x
        if self.vision is None:
            raise ValueError("images given to a model without a vision tower (ModelConfig.vision is None)")
        by_size = defaultdict(list)
        for k, image in enumerate(images):
            by_size[tuple(image["pixels"].shape)].append(k)
        rows, cols, values = [], [], []
        for members in by_size.values():
            pixels = [images[k]["pixels"] for k in members]
            stacked = (torch.from_numpy(np.stack(pixels)) if isinstance(pixels[0], np.ndarray)
                       else torch.stack(pixels))
            out = self.vision(stacked.to(x.device))  # (images, tokens, d_model)
            n = out.size(1)
            for k in members:
                row, pos, tokens = images[k]["row"], images[k]["pos"], images[k].get("tokens", n)
                if tokens != n or not 0 <= pos <= x.size(1) - n:
                    raise ValueError(f"image span at row {row}, position {pos}, {tokens} tokens: its "
                                     f"{tuple(images[k]['pixels'].shape[:2])} pixels give {n} tokens in a row "
                                     f"of {x.size(1)}")
                rows.append(torch.full((n,), row, dtype=torch.long))
                cols.append(torch.arange(pos, pos + n))
            values.append(out.reshape(-1, out.size(-1)))
        index = (torch.cat(rows).to(x.device), torch.cat(cols).to(x.device))
        return x.index_put(index, torch.cat(values).to(x.dtype))  # out of place: gradients reach both

    def hidden(self, input_ids: Tensor, segment_ids: Tensor | None = None, position_ids: Tensor | None = None,
               attention: str = "auto", images: list[dict] | None = None) -> Tensor:
        """Final normed hidden states (B, T, d_model).

        input_ids (B, T) or (T,); segment_ids of the same shape (−1 = padding; None: one segment per
        row); position_ids (None: restart at 0 in each segment, as the shard reader yields them);
        images: the image spans of the batch (see `embed`; row 0 for a 1-D input)."""
        if input_ids.ndim == 1:
            input_ids = input_ids.unsqueeze(0)
            segment_ids = None if segment_ids is None else segment_ids.unsqueeze(0)
            position_ids = None if position_ids is None else position_ids.unsqueeze(0)
        if segment_ids is None:
            segment_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = positions_from_segments(segment_ids)
        T = input_ids.size(1)
        backend = attention
        if backend == "auto":
            backend = "segments" if (input_ids.device.type == "cpu" or T > 4096) else "dense"
        if backend not in ("dense", "segments"):
            raise ValueError(f"attention must be auto, dense or segments, got {attention!r}")
        mask = block_causal_mask(segment_ids) if backend == "dense" else None
        bounds = segment_bounds(segment_ids) if backend == "segments" else None
        cos, sin = self.rotary(position_ids)
        x = self.embed(input_ids, images)
        for layer in self.layers:
            x = layer(x, cos, sin, segment_ids, backend, mask, bounds)
        return self.norm(x)

    def forward(self, input_ids: Tensor, segment_ids: Tensor | None = None, position_ids: Tensor | None = None,
                attention: str = "auto", images: list[dict] | None = None) -> Tensor:
        return self.lm_head(self.hidden(input_ids, segment_ids, position_ids, attention, images))

    def forward_packed(self, input_ids: Tensor, cu_seqlens: Tensor, position_ids: Tensor | None = None,
                       attention: str = "auto") -> Tensor:
        """Logits (T, vocab) of one packed sequence as the shard reader yields it (real tokens only)."""
        segment_ids = segment_ids_from_cu_seqlens(cu_seqlens, input_ids.size(-1)).to(input_ids.device)
        return self.forward(input_ids, segment_ids, position_ids, attention)[0]
