"""The CPU decode path's cheaper forms give the bits of the reference forms they replace: torch's fused
rms_norm against rms_norm_ref (the HF form), the flipped-halves rotary against HF's rotate_half, and
short-window attention against one SDPA call per window on contiguous copies (bit for bit for a lone
window, the decode step of one stream)."""

import pytest
import torch
import torch.nn.functional as F

from strata.kernels.rms_norm import rms_norm_ref
from strata.model import cpu_ops, ops
from strata.model.rotary import RotaryEmbedding


def randn(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


@pytest.mark.parametrize("rows,dim", [(1, 576), (3, 64), (5, 17), (2, 2048)])
@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("with_residual", [False, True])
def test_cpu_float32_rms_norm_is_rms_norm_ref_bit_for_bit(rows, dim, zero_centered, with_residual):
    for seed in range(20):
        x, weight = randn(rows, dim, seed=seed, scale=1 + seed), randn(dim, seed=seed + 100)
        residual = randn(rows, dim, seed=seed + 200) if with_residual else None
        out, new_residual = ops.rms_norm(x, weight, 1e-6, zero_centered, residual)
        ref, ref_residual = rms_norm_ref(x, weight, 1e-6, zero_centered, residual)
        assert torch.equal(out, ref)
        assert (new_residual is None) == (ref_residual is None)
        if with_residual:
            assert torch.equal(new_residual, ref_residual)


def rotate_half_hf(x, cos, sin):
    # transformers' apply_rotary_pos_emb on the first rot_dim dims, cos / sin [T, 1, rot_dim / 2] halves
    rot = cos.shape[-1] * 2
    x_rot = x[..., :rot]
    x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2:]
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    rotated = x_rot * cos + torch.cat((-x2, x1), -1) * sin
    return torch.cat((rotated, x[..., rot:]), -1)


@pytest.mark.parametrize("head_dim,rot_dim", [(64, 64), (32, 16)])
def test_rotary_equals_hf_rotate_half_bit_for_bit_and_shares_step_rows(head_dim, rot_dim):
    rotary = RotaryEmbedding(head_dim, rot_dim, 512, 10000.0)
    positions = torch.tensor([0, 5, 17, 511])
    q, k = randn(4, 6, head_dim, seed=1, scale=3), randn(4, 2, head_dim, seed=2, scale=3)
    step_rows = {}
    q_out, k_out = rotary(positions, q, k, step_rows)
    cos, sin = rotary.cos[positions][:, None], rotary.sin[positions][:, None]
    assert torch.equal(q_out, rotate_half_hf(q, cos, sin)) and torch.equal(k_out, rotate_half_hf(k, cos, sin))
    rows = step_rows["torch"]
    other = RotaryEmbedding(head_dim, rot_dim, 512, 10000.0)  # a later layer of equal tables reuses the rows
    assert other.rows(positions, step_rows) is rows


def attend_one_by_one(q, k_cache, v_cache, tables, windows, scale):
    """Each window alone: SDPA over contiguous copies of its context, the causal window masked."""
    block_size, out, start = k_cache.shape[1], [], 0
    for table, (done, n) in zip(tables, windows):
        length = done + n
        rows = torch.tensor(table)[torch.arange(length) // block_size] * block_size + torch.arange(length) % block_size
        k = k_cache.flatten(0, 1)[rows].transpose(0, 1).contiguous()[None]  # [1, Hkv, L, D]
        v = v_cache.flatten(0, 1)[rows].transpose(0, 1).contiguous()[None]
        mask = torch.arange(length)[None, :] <= (done + torch.arange(n))[:, None]  # [n, L]
        o = F.scaled_dot_product_attention(q[start:start + n].transpose(0, 1).contiguous()[None], k, v,
                                           attn_mask=mask, scale=scale, enable_gqa=True)
        out.append(o[0].transpose(0, 1))
        start += n
    return torch.cat(out)


@pytest.mark.parametrize("windows", [[(0, 1)], [(37, 1)], [(5, 1), (100, 1), (33, 1)], [(10, 3), (20, 3)],
                                     [(40, 4), (0, 7), (2, 1), (63, 16)]])
@pytest.mark.parametrize("path", ["native", "torch"])
def test_short_window_attention_equals_sdpa_per_window(windows, path, monkeypatch):
    """The native kernel (kernels/cpu_attention.py) within float32 rounding of SDPA on each window; the torch
    batch (its fallback) bit for bit on a lone window."""
    from strata.model.attention import paged_attention
    from strata.runner.inputs import build_inputs
    from strata.types import ScheduledSlot

    block_size, num_blocks = 8, 40
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(3)).tolist()
    tables, used = [], 0
    for done, n in windows:
        count = -(-(done + n) // block_size)
        tables.append(order[used:used + count])
        used += count
    scheduled = [ScheduledSlot(slot_id=i, num_computed_tokens=c, num_new_tokens=n, new_block_ids=[], token_ids=[0] * n)
                 for i, (c, n) in enumerate(windows)]
    ctx = build_inputs(scheduled, dict(enumerate(tables)), block_size, {}, {}, "cpu").ctx
    k_cache, v_cache = randn(num_blocks, block_size, 2, 16, seed=4), randn(num_blocks, block_size, 2, 16, seed=5)
    q = randn(sum(n for _, n in windows), 6, 16, seed=6)
    native = cpu_ops.native_attention()
    if path == "torch":
        monkeypatch.setattr(cpu_ops, "native_attention", lambda: None)
    elif native is None:
        pytest.skip("no C compiler for the native kernel")
    calls = []
    if native is not None:
        kernel = native.paged_attention
        monkeypatch.setattr(native, "paged_attention", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    out = paged_attention(q, k_cache, v_cache, ctx, 0.25)
    assert bool(calls) == (path == "native")
    expected = attend_one_by_one(q, k_cache, v_cache, tables, windows, 0.25)
    if len(windows) == 1 and path == "torch":  # a lone window: the same SDPA call but for strided operands, no padding
        assert torch.equal(out, expected)
    else:  # native: its own sums; torch padded to the longest context: masked keys add exact zeros, but SDPA's
        # blocking may change
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
