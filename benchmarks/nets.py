"""Two more networks as their reference implementations write them, built from the same code
in graphc and in PyTorch (``nn``: ``graphc.nn`` or ``torch.nn``; ``lib``: ``graphc`` or
``torch``), so both systems run literally the same architecture:

- ``convnext``: ConvNeXt's design (Liu et al., 2022, as the authors' and timm's code write it):
  a 4x4 stride-4 patchify stem, stages of blocks (7x7 depthwise convolution, then the result
  permuted channels-last for LayerNorm, a 4x MLP with GELU and a learned layer scale, permuted
  back and added to the residual), downsampling by a channels-first LayerNorm and a 2x2
  stride-2 convolution, global average pooling, LayerNorm and a linear head.
- ``vit``: a Vision Transformer as timm writes it: a 16x16 stride-16 patch-embedding
  convolution, a class token and learned position embeddings, pre-norm blocks whose attention
  splits heads with ``qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)`` and runs
  ``scaled_dot_product_attention``, a GELU MLP, and a linear head on the class token.

Both put their layouts through permutes that convolutions and reductions then read (the
depthwise weight gradient behind a channels-last permute, the bias gradient of the qkv
projection behind the head permute); ``tests/test_nets.py`` checks them against PyTorch.
"""

from __future__ import annotations

from typing import Any

# the ``convnext`` and ``vit`` workloads' configurations (ConvNeXt-T's widths with fewer
# blocks; ViT-Tiny's width and heads with 4 of its 12 blocks), so a step takes about half
# a second on one core
CONVNEXT = {"dims": (96, 192, 384, 768), "depths": (2, 2, 2, 1)}
VIT = {"dim": 192, "depth": 4, "heads": 3, "patch": 16, "image": 224}


def convnext(nn: Any, lib: Any, dims: tuple[int, ...] = CONVNEXT["dims"],
             depths: tuple[int, ...] = CONVNEXT["depths"], in_chans: int = 3,
             num_classes: int = 1000, layer_scale: float = 1e-6) -> Any:
    """ConvNeXt (see the module docstring) in ``nn``; ``layer_scale`` is the blocks'
    initial ``gamma`` (the paper's 1e-6)."""

    class LayerNorm2d(nn.Module):
        """LayerNorm over the channels of an NCHW map, through a channels-last permute."""

        def __init__(self, c: int) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(c, eps=1e-6)

        def forward(self, x: Any) -> Any:
            return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.LayerNorm(c, eps=1e-6)
            self.pwconv1 = nn.Linear(c, 4 * c)
            self.act = nn.GELU()
            self.pwconv2 = nn.Linear(4 * c, c)
            self.gamma = nn.Parameter(lib.full((c,), layer_scale))

        def forward(self, x: Any) -> Any:
            y = self.dwconv(x).permute(0, 2, 3, 1)
            y = self.pwconv2(self.act(self.pwconv1(self.norm(y)))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers = [nn.Conv2d(in_chans, dims[0], 4, stride=4), LayerNorm2d(dims[0])]
            for i, (d, n) in enumerate(zip(dims, depths, strict=True)):
                if i:
                    layers += [LayerNorm2d(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, stride=2)]
                layers += [Block(d) for _ in range(n)]
            self.features = nn.Sequential(*layers)
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
            self.head = nn.Linear(dims[-1], num_classes)

        def forward(self, x: Any) -> Any:
            return self.head(self.norm(self.features(x).mean((2, 3))))

    return ConvNeXt()


def vit(nn: Any, lib: Any, dim: int = VIT["dim"], depth: int = VIT["depth"],
        heads: int = VIT["heads"], patch: int = VIT["patch"], image: int = VIT["image"],
        in_chans: int = 3, num_classes: int = 1000) -> Any:
    """A Vision Transformer (see the module docstring) in ``nn``."""
    F = nn.functional

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x: Any) -> Any:
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            a = F.scaled_dot_product_attention(q, k, v)
            return self.proj(a.transpose(1, 2).reshape(B, N, C))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim, eps=1e-6)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(dim, eps=1e-6)
            self.fc1 = nn.Linear(dim, 4 * dim)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * dim, dim)

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.norm1(x))
            return x + self.fc2(self.act(self.fc1(self.norm2(x))))

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch_embed = nn.Conv2d(in_chans, dim, patch, stride=patch)
            tokens = (image // patch) ** 2
            self.cls_token = nn.Parameter(lib.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(0.02 * lib.randn(1, tokens + 1, dim))
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, num_classes)

        def forward(self, x: Any) -> Any:
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = lib.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
            x = self.norm(self.blocks(x))
            return self.head(x[:, 0])

    return ViT()


def torch_copy(torch: Any, gmodel: Any, build: Any, **kwargs: Any) -> Any:
    """The PyTorch twin of a graphc network from ``build``: same architecture (same keyword
    arguments), the graphc weights loaded through ``state_dict``."""
    import numpy as np

    tm = build(torch.nn, torch, **kwargs)
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                        gmodel.state_dict().items()})
    return tm
