"""The book's own example models, written the way real models are written.

Chapter 18 and the package's tests use them as code a backend did not write: a
pre-norm transformer block (LayerNorm, fused QKV projection, scaled dot-product
attention on a head *view*, GELU, dropout) and a ViT-style network whose patch
embedding is a strided convolution. They import torch only, so a test can load
this file by path without importing the book.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TransformerBlock(nn.Module):
    """x: (batch, length, dim) -> same shape."""

    def __init__(self, dim: int = 64, heads: int = 4, mlp_ratio: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads})")
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)
        self.dropout = nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        # (B, L, 3, H, E), split into q, k, v of (B, L, H, E), then viewed as (B, H, L, E):
        # the heads are a transposed view, never a copy, as in every transformer library.
        qkv = self.qkv(x).view(batch, length, 3, self.heads, dim // self.heads)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.norm1(x)))
        return x + self.dropout(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class PatchEmbedding(nn.Module):
    """images (batch, channels, height, width) -> tokens (batch, patches, dim)."""

    def __init__(self, channels: int = 3, dim: int = 64, patch: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.conv(images).flatten(2).transpose(1, 2)


class TinyViT(nn.Module):
    """A patch embedding, a position embedding, transformer blocks and a classifier head."""

    def __init__(
        self,
        image: int = 16,
        channels: int = 3,
        patch: int = 4,
        dim: int = 64,
        heads: int = 4,
        depth: int = 1,
        classes: int = 10,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embed = PatchEmbedding(channels, dim, patch)
        self.position = nn.Parameter(torch.randn(1, (image // patch) ** 2, dim) * 0.02)
        self.blocks = nn.Sequential(*(TransformerBlock(dim, heads, dropout=dropout) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens = self.blocks(self.embed(images) + self.position)
        return self.head(self.norm(tokens).mean(dim=1))
