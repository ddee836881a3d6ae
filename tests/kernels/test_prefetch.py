"""L2 prefetches (strata.kernels.prefetch) are hints: a launch that asks L2 for a weight gives bit for bit
what it gives without; the prefetch is on only for CUDA launches of contiguous, 16-byte-aligned weights."""

from __future__ import annotations

import pytest
import torch

from strata.kernels.prefetch import prefetch_args

gpu = pytest.mark.gpu


def test_prefetch_is_off_without_a_weight_or_off_cuda():
    weight = torch.zeros(64, 32, dtype=torch.bfloat16)
    x = torch.zeros(4, 32)
    assert prefetch_args(None, x)[1:] == (0, False)
    assert prefetch_args(weight, x)[1:] == (0, False)   # a CPU launch


@gpu
def test_prefetch_argument_spans_the_weight_and_skips_unaligned_ones():
    weight = torch.zeros(64, 32, dtype=torch.bfloat16, device="cuda")
    x = torch.zeros(4, 32, device="cuda")
    ptr, num_bytes, on = prefetch_args(weight, x)
    assert on and ptr is weight and num_bytes == 64 * 32 * 2
    assert not prefetch_args(weight.view(-1)[1:], x)[2]    # 2-byte aligned
    assert not prefetch_args(weight[:, :16], x)[2]         # not contiguous


@gpu
@pytest.mark.parametrize("windows", [[(0, 1)], [(300, 1)], [(40, 4), (2, 1)]])
def test_paged_attention_with_a_prefetch_gives_the_same_output(windows):
    from strata.kernels.paged_attention import paged_attention
    from tests.kernels.test_kernels import paged_problem

    generator = torch.Generator().manual_seed(1)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
        windows, 16, 32, 4, 128, torch.bfloat16, "cuda", generator)
    weight = torch.randn(2048, 4096, dtype=torch.bfloat16, device="cuda")  # an o_proj's shape (16 MiB)
    args = (q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.08)
    plain = paged_attention(*args, max_query_len=max(n for _, n in windows))
    assert torch.equal(paged_attention(*args, max_query_len=max(n for _, n in windows), prefetch=weight), plain)


@gpu
def test_norms_with_a_prefetch_give_the_same_output():
    from strata.kernels.rms_norm import rms_norm, rms_norm_topk_sum

    gen = torch.Generator(device="cuda").manual_seed(2)
    x, residual = (torch.randn(3, 2048, device="cuda", generator=gen).bfloat16() for _ in range(2))
    weight = torch.randn(2048, device="cuda", generator=gen).bfloat16()
    partials = torch.randn(3, 8, 2048, device="cuda", generator=gen)
    qkv = torch.randn(5120, 2048, dtype=torch.bfloat16, device="cuda")
    for prefetch in (None, qkv):
        out = rms_norm(x, weight, 1e-6, False, residual, prefetch)
        out_sum = rms_norm_topk_sum(partials, None, weight, 1e-6, False, residual, torch.bfloat16, prefetch)
        if prefetch is None:
            expected, expected_sum = out, out_sum
    assert all(torch.equal(a, b) for a, b in zip(out, expected))
    assert all(torch.equal(a, b) for a, b in zip(out_sum, expected_sum))


@gpu
@pytest.mark.parametrize("num_tokens", [1, 3])
def test_routing_with_prefetches_gives_the_same_layout(num_tokens):
    """route_and_align asking L2 for a weight in every program and, one token, for the picked experts'
    down projections in its last program: the same ids, weights and layout as without."""
    from strata.kernels.routing import route_and_align

    gen = torch.Generator(device="cuda").manual_seed(3)
    hidden = torch.randn(num_tokens, 2048, device="cuda", generator=gen).bfloat16()
    gate = (torch.randn(128, 2048, device="cuda", generator=gen) / 45).bfloat16()
    w2 = torch.empty(128, 2048, 768, dtype=torch.bfloat16, device="cuda")
    qkv = torch.empty(5120, 2048, dtype=torch.bfloat16, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    plain = route_and_align(hidden, gate, 8, True, 16, counter)
    fetched = route_and_align(hidden, gate, 8, True, 16, counter, prefetch=qkv, prefetch_experts=w2)
    assert counter.item() == 0
    assert all(torch.equal(a, b) for a, b in zip(fetched, plain))
