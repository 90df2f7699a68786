"""The vision tower of the pretraining stage: a small ViT with patch 14, a 2x2 spatial merge and the
2-layer MLP projector, turning an image of H x W pixels into (H/28)·(W/28) decoder embeddings — exactly
the visual-token block the packer reserved for it (packing/vision.py: one token per 28 x 28 pixels).

    pixels (B, H, W, 3) uint8
      → scale to [0, 1], normalise with CLIP's mean / std (Radford et al. 2021)
      → patchify: non-overlapping 14 x 14 x 3 patches, row-major, flattened to 588 values
      → patch_proj: Linear(588, d_vit) + 2-D sin-cos position (fixed; any grid)
      → n_layers × pre-norm blocks [x += attn(attn_norm(x)); x += mlp(mlp_norm(x))], bidirectional
        attention over the patches of one image (ViT, Dosovitskiy et al. 2021)
      → norm → 2x2 merge: the features of each 2 x 2 block of neighbouring patches concatenated (4·d_vit)
      → projector: Linear(4·d_vit, d_model) → GELU → Linear(d_model, d_model)
    → (B, (H/28)·(W/28), d_model), merged tokens row-major (row i, column j at i·W/28 + j)

The merge + MLP projector is DeepSeek-VL2's "downsample_mlp_gelu" connector (Wu et al. 2024: 2x2
pixel-shuffle of the ViT grid, then a 2-layer GELU MLP) and Qwen2-VL's PatchMerger (Wang et al. 2024),
which merge 2x2 neighbouring patch features before a 2-layer MLP into the LLM's width.

Patches go through an nn.Linear (a 2-D matrix), not the usual stride-14 Conv2d (a 4-D tensor): the
same function, but a matrix is what trainer.optim routes to Muon. Positions: the 2-D sin-cos embedding
of MAE (He et al. 2022), half of the channels for the row and half for the column, so any H x W grid
works without interpolating a learnt table.

Parameter names follow trainer.optim's patterns: q_proj / k_proj (with `n_heads` on the attention
module) → head-wise Muon, every other 2-D weight (patch_proj, v/o projections, MLP fc1/fc2, projector
fc1/fc2) → Muon, LayerNorm weights → AdamW and biases → AdamW without decay. No name contains "embed",
"output" or "lm_head", which would send a matrix to the Sinkhorn tier of token tables.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["VisionConfig", "VisionTower", "sincos_2d", "patchify", "merge_2x2", "CLIP_MEAN", "CLIP_STD"]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class VisionConfig:
    d_vit: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int | None = None  # None: 4·d_vit (ViT's MLP ratio)
    patch: int = 14
    merge: int = 2
    norm_eps: float = 1e-6
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.d_vit % self.n_heads or self.d_vit % 4:
            raise ValueError(f"d_vit={self.d_vit} must be a multiple of 4 and of n_heads={self.n_heads}")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_vit

    @property
    def unit(self) -> int:
        """Pixels per side of one visual token: patch x merge (28)."""
        return self.patch * self.merge

    def tokens(self, height: int, width: int) -> int:
        return (height // self.unit) * (width // self.unit)

    def to_dict(self) -> dict:
        return asdict(self)


def sincos_2d(rows: int, cols: int, dim: int, device=None) -> Tensor:
    """(rows·cols, dim) fixed position embedding of a row-major grid: the first dim/2 channels are the 1-D
    sin-cos embedding (Vaswani et al. 2017, base 10,000) of the row index, the rest that of the column."""
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float32, device=device) / quarter)

    def one_d(n: int) -> Tensor:
        angles = torch.arange(n, dtype=torch.float32, device=device)[:, None] * omega  # (n, dim/4)
        return torch.cat((angles.sin(), angles.cos()), dim=1)  # (n, dim/2)

    r, c = one_d(rows), one_d(cols)
    return torch.cat((r[:, None, :].expand(rows, cols, -1), c[None, :, :].expand(rows, cols, -1)),
                     dim=-1).reshape(rows * cols, dim)


def patchify(images: Tensor, patch: int) -> Tensor:
    """(B, H, W, C) → (B, H/p · W/p, p·p·C): non-overlapping patches, row-major, each flattened
    (row, column, channel) within the patch."""
    B, H, W, C = images.shape
    x = images.reshape(B, H // patch, patch, W // patch, patch, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (H // patch) * (W // patch), patch * patch * C)


def merge_2x2(x: Tensor, rows: int, cols: int, merge: int = 2) -> Tensor:
    """(B, rows·cols, d) row-major grid → (B, rows/m · cols/m, m·m·d): each m x m block of neighbouring
    features concatenated (top-left, top-right, bottom-left, bottom-right for m = 2), blocks row-major."""
    B, _, d = x.shape
    x = x.reshape(B, rows // merge, merge, cols // merge, merge, d).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (rows // merge) * (cols // merge), merge * merge * d)


class VisionAttention(nn.Module):
    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads  # read by trainer.optim for head-wise Muon on q_proj / k_proj
        self.head_dim = config.d_vit // config.n_heads
        d = config.d_vit
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.o_proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        B, N, _ = x.shape

        def heads(t: Tensor) -> Tensor:
            return t.view(B, N, self.n_heads, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)))
        return self.o_proj(out.transpose(1, 2).reshape(B, N, -1))


class VisionMLP(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, config: VisionConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_vit, eps=config.norm_eps)
        self.attn = VisionAttention(config)
        self.mlp_norm = nn.LayerNorm(config.d_vit, eps=config.norm_eps)
        self.mlp = VisionMLP(config.d_vit, config.d_ff, config.d_vit)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class VisionTower(nn.Module):
    """ViT + 2x2 merge + MLP projector; `forward(pixels)` takes same-size images (B, H, W, 3) uint8 with H
    and W multiples of patch·merge and returns (B, (H/28)·(W/28), d_model)."""

    def __init__(self, config: VisionConfig, d_model: int) -> None:
        super().__init__()
        self.config = config
        self.patch_proj = nn.Linear(config.patch * config.patch * 3, config.d_vit)
        self.blocks = nn.ModuleList([VisionBlock(config) for _ in range(config.n_layers)])
        self.norm = nn.LayerNorm(config.d_vit, eps=config.norm_eps)
        self.projector = VisionMLP(config.merge * config.merge * config.d_vit, d_model, d_model)
        self.register_buffer("mean", torch.tensor(CLIP_MEAN), persistent=False)
        self.register_buffer("std", torch.tensor(CLIP_STD), persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Matrices N(0, init_std) (o_proj and the blocks' fc2 scaled by 1/sqrt(2·n_layers), as the
        decoder's residual outputs), biases 0, LayerNorm scales 1."""
        std = self.config.init_std
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif p.ndim == 1:
                p.fill_(1.0)
            elif name.startswith("blocks.") and name.endswith(("o_proj.weight", "mlp.fc2.weight")):
                p.normal_(0.0, std / math.sqrt(2 * self.config.n_layers))
            else:
                p.normal_(0.0, std)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, pixels: Tensor) -> Tensor:
        if pixels.ndim != 4 or pixels.size(-1) != 3:
            raise ValueError(f"pixels must be (B, H, W, 3), got {tuple(pixels.shape)}")
        B, H, W, _ = pixels.shape
        unit, patch = self.config.unit, self.config.patch
        if H % unit or W % unit or not H or not W:
            raise ValueError(f"image of {H}x{W} px: both sides must be positive multiples of {unit} "
                             f"(patch {patch} x merge {self.config.merge})")
        dtype = self.patch_proj.weight.dtype
        x = (pixels.to(dtype) / 255.0 - self.mean.to(dtype)) / self.std.to(dtype)
        rows, cols = H // patch, W // patch
        x = self.patch_proj(patchify(x, patch))
        x = x + sincos_2d(rows, cols, self.config.d_vit, x.device).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        x = merge_2x2(self.norm(x), rows, cols, self.config.merge)
        return self.projector(x)
