"""packed_mm (few-row projections over packed GGUF blocks on the tensor cores) against its contract: gguf's
dequantization rounded to x's 16-bit type, then float32 sums (packed_mm_ref), on blocks of every type it reads."""

from __future__ import annotations

import pytest
import torch

from strata.kernels.packed_gemv import BLOCK_LAYOUT, Q4_K, Q6_K, Q8_0
from strata.kernels.packed_mm import packed_mm, packed_mm_ref, supports
from test_packed_gemv import SMALL_BLOCK_TYPES, random_blocks

gpu = pytest.mark.gpu


def test_ref_is_dequantize_then_a_16_bit_weight():
    """The reference rounds the dequantized weight to x's dtype once: on Q8_0 blocks, exactly x @ W16.T."""
    blocks = random_blocks(Q8_0, 6, 64, seed=3)
    x = torch.randn(3, 64).to(torch.bfloat16)
    from gguf.quants import dequantize

    weight = torch.from_numpy(dequantize(blocks.numpy(), Q8_0).reshape(6, 64)).to(torch.bfloat16).float()
    torch.testing.assert_close(packed_mm_ref(x, blocks, Q8_0, 64), x.float() @ weight.t())
    assert supports(Q4_K, 512) and not supports(Q4_K, 320) and supports(Q8_0, 640)


def check_packed_mm(qtype: int, rows: int, n: int, k: int, dtype: torch.dtype, device: str, config=None) -> None:
    blocks = random_blocks(qtype, n, k, seed=rows * n + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    expected = packed_mm_ref(x, blocks, qtype, k)
    out = packed_mm(x.to(device), blocks.to(device), qtype, n, k, config=config)
    # float32 sums in another order than the reference matmul
    scale = (x.float().abs() @ packed_mm_ref(torch.eye(k, dtype=dtype), blocks, qtype, k).abs()).clamp_min(1.0)
    assert ((out.cpu() - expected).abs() / scale).max() < 1e-5
    # into a wider output's columns, in the output's dtype
    wide = torch.zeros(rows, n + 5, dtype=dtype, device=device)
    packed_mm(x.to(device), blocks.to(device), qtype, n, k, config=config, out=wide[:, 2:2 + n])
    torch.testing.assert_close(wide[:, 2:2 + n].cpu().float(), out.cpu().to(dtype).float(), rtol=0, atol=0)
    assert not wide[:, :2].any() and not wide[:, 2 + n:].any()


@gpu
@pytest.mark.parametrize("qtype", sorted(BLOCK_LAYOUT))
@pytest.mark.parametrize("rows, n, k", [(1, 33, 256), (4, 130, 2048), (8, 64, 512), (16, 7, 768), (5, 200, 2560)])
def test_packed_mm_matches_ref(qtype, rows, n, k):
    check_packed_mm(qtype, rows, n, k, torch.bfloat16, "cuda")


@gpu
@pytest.mark.parametrize("qtype", SMALL_BLOCK_TYPES)
@pytest.mark.parametrize("rows, n, k", [(3, 33, 640), (16, 64, 96)])
def test_packed_mm_partial_chunks(qtype, rows, n, k):
    """Rows of 32-value blocks that 256 does not divide (Qwen4-Exp's 640-wide down rows): the last chunk masked."""
    check_packed_mm(qtype, rows, n, k, torch.float16, "cuda")


@gpu
@pytest.mark.parametrize("config", [dict(BLOCK_N=32, SUPERBLOCKS=2, num_warps=4), dict(BLOCK_N=128, SUPERBLOCKS=1, num_warps=8)])
def test_packed_mm_tilings(config):
    check_packed_mm(Q6_K, 8, 300, 2048, torch.bfloat16, "cuda", config)
