"""Random GGUF blocks for the packed-MoE A/B scripts (prompt_moe_ab.py, grouped_block_m.py)."""
import sys

import torch

sys.path.insert(0, "tests/kernels")  # by name: an installed `kernels` package shadows tests/kernels
from test_packed_gemv import random_blocks  # noqa: E402


def blocks(qtype: int, n: int, k: int, seed: int) -> torch.Tensor:
    """uint8 [n, row bytes] of valid blocks: random_blocks, but Q8_0 as random quants with small f16 scales (gguf's
    quantize of 0.8 G floats is slow)."""
    if qtype != 8:
        return random_blocks(qtype, n, k, seed)
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(0, 256, (n, k // 32, 34), dtype=torch.uint8, generator=g)
    scale = (torch.rand(n, k // 32, generator=g) * 0.02 + 1e-3).half()
    out[:, :, :2] = scale.view(torch.uint8).view(n, k // 32, 2)
    return out.view(n, -1)
