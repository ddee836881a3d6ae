"""Long prompt chunks' attention on the CPU (model/cpu_sdpa.py): a chunk after a cached prefix computed as two
unmasked flash calls merged by log-sum-exp equals SDPA with the causal window's mask, and large calls take the
engine's ceiling of threads for that call only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from strata.model import cpu_sdpa


def masked_reference(chunk, k, v, num_computed, scale):
    """SDPA with the explicit causal window mask: query i sees keys 0 .. num_computed + i."""
    n, kv_len = chunk.shape[2], k.shape[2]
    mask = torch.arange(kv_len)[None, :] <= (num_computed + torch.arange(n))[:, None]
    return F.scaled_dot_product_attention(chunk.float(), k.float(), v.float(), attn_mask=mask, scale=scale,
                                          enable_gqa=True)


@pytest.mark.parametrize("heads, kv_heads, n, num_computed", [(9, 3, 70, 130), (4, 4, 33, 1), (8, 2, 17, 500),
                                                              (6, 3, 129, 64), (2, 1, 5, 3)])
def test_a_chunk_after_its_prefix_equals_the_masked_attention(heads, kv_heads, n, num_computed):
    g = torch.Generator().manual_seed(n + num_computed)
    chunk = torch.randn(1, heads, n, 64, generator=g)
    k, v = (torch.randn(1, kv_heads, num_computed + n, 64, generator=g) * 2 for _ in range(2))
    got = cpu_sdpa.attend_after_prefix(chunk, k, v, num_computed, 0.125)
    assert got.shape == chunk.shape and got.dtype == chunk.dtype
    torch.testing.assert_close(got, masked_reference(chunk, k, v, num_computed, 0.125), rtol=1e-5, atol=1e-6)


def test_bfloat16_and_the_masked_fallback_agree_with_the_reference(monkeypatch):
    g = torch.Generator().manual_seed(1)
    chunk = torch.randn(1, 4, 40, 64, generator=g).bfloat16()
    k, v = (torch.randn(1, 2, 100, 64, generator=g).bfloat16() for _ in range(2))
    ref = masked_reference(chunk, k, v, 60, 0.125)
    torch.testing.assert_close(cpu_sdpa.attend_after_prefix(chunk, k, v, 60, 0.125).float(), ref,
                               rtol=2e-2, atol=2e-2)
    monkeypatch.setattr(cpu_sdpa, "_flash_with_lse", lambda: None)  # a torch without the CPU flash op's outputs
    chunk32, k32, v32 = chunk.float(), k.float(), v.float()
    torch.testing.assert_close(cpu_sdpa.attend_after_prefix(chunk32, k32, v32, 60, 0.125),
                               masked_reference(chunk32, k32, v32, 60, 0.125), rtol=1e-6, atol=1e-6)


@pytest.fixture
def one_thread():
    threads, ceiling = torch.get_num_threads(), cpu_sdpa.large_op_ceiling()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    cpu_sdpa.set_large_op_threads(ceiling)


def test_only_a_large_op_takes_the_ceiling_and_the_count_comes_back(one_thread):
    cpu_sdpa.set_large_op_threads(3)
    with cpu_sdpa.large_op_threads(cpu_sdpa.LARGE_OP_MACS - 1):
        assert torch.get_num_threads() == 1
    with cpu_sdpa.large_op_threads(cpu_sdpa.LARGE_OP_MACS):
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 1
    with pytest.raises(RuntimeError, match="inside"), cpu_sdpa.large_op_threads(cpu_sdpa.LARGE_OP_MACS):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 1
    big_chunk = torch.empty(1, 8, 2048, 64)  # 2,048 queries x 2,048 keys: ~2 G multiply-adds
    with cpu_sdpa.attention_threads(big_chunk, 2048, causal=True):
        assert torch.get_num_threads() == 3
    cpu_sdpa.set_large_op_threads(0)  # an explicit --torch-threads: every op keeps it
    with cpu_sdpa.attention_threads(big_chunk, 2048, causal=True):
        assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="integer >= 0"):
        cpu_sdpa.set_large_op_threads(-1)
