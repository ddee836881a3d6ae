"""The small fused kernels of the decode path (RMSNorm + residual, qk-norm + rotary + KV write, MoE
routing) against their torch refs (GPU, `-m gpu`), and each ref against the model code it replaces
(CPU). Tolerances: outputs in bf16 may differ from the ref by one rounding step (2^-8 relative);
integer outputs (expert ids) and cache slots written must match exactly."""

from __future__ import annotations

import copy

import pytest
import torch

from strata.config import ModelConfig
from strata.kernels.rms_norm import rms_norm_ref
from strata.kernels.rope_kv import qk_norm_rope_kv_ref
from strata.kernels.routing import fold_step_ref, record_routing_ref, softmax_topk_ref
from strata.model.rotary import RotaryEmbedding

gpu = pytest.mark.gpu


def randn(*shape, dtype=torch.float32, device="cpu", seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


def close(actual, expected, dtype):
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(actual.float(), expected.float(), rtol=tol, atol=tol)


# ---- refs vs the model's torch code (CPU) --------------------------------------------------------

def test_rope_kv_ref_matches_model_rotary_and_kv_write():
    rotary = RotaryEmbedding(32, 16, 64, 10000.0)  # partial rotary: 16 of 32 dims
    q, k, v = randn(5, 4, 32, seed=1), randn(5, 2, 32, seed=2), randn(5, 2, 32, seed=3)
    positions = torch.tensor([0, 3, 7, 8, 63])
    slots = torch.tensor([4, 9, 0, 13, 2])
    k_cache, v_cache = torch.zeros(4, 4, 2, 32), torch.zeros(4, 4, 2, 32)
    out = qk_norm_rope_kv_ref(q, k, v, None, None, 0.0, False, rotary.cos, rotary.sin, positions, k_cache,
                              v_cache, slots)
    q_ref, k_ref = rotary(positions, q, k)
    torch.testing.assert_close(out, q_ref)
    torch.testing.assert_close(k_cache.view(-1, 2, 32)[slots], k_ref)
    torch.testing.assert_close(v_cache.view(-1, 2, 32)[slots], v)


def test_routing_ref_matches_the_moe_block():
    from strata.model.moe import MoEBlock

    cfg = ModelConfig(architecture="Qwen3MoeForCausalLM", vocab_size=8, hidden_size=16, intermediate_size=8,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      num_experts=12, num_experts_per_tok=3, moe_intermediate_size=4)
    block = MoEBlock(cfg)
    torch.nn.init.normal_(block.gate.weight)
    hidden = randn(6, 16, seed=4)
    ids, weights = block.route(hidden)
    ref_ids, ref_weights = softmax_topk_ref(block.gate(hidden), 3, True, hidden.dtype)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights, ref_weights)


def test_fold_step_ref_counts_distinct_experts_and_steps_that_routed():
    touched = torch.tensor([[1, 0, 1], [0, 0, 0]])
    total, steps = torch.tensor([4, 2]), torch.tensor([7])
    fold_step_ref(touched, total, steps)
    assert total.tolist() == [6, 2] and steps.tolist() == [8] and not touched.any()
    fold_step_ref(touched, total, steps)  # a step that routed nothing (padding only) is not counted
    assert total.tolist() == [6, 2] and steps.tolist() == [8]


# ---- kernels vs refs (GPU) ------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dim", [64, 2048, 5120])
@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_ref(dtype, dim, zero_centered, with_residual):
    from strata.kernels.rms_norm import rms_norm

    x, w = randn(37, dim, dtype=dtype, device="cuda", seed=1), randn(dim, dtype=dtype, device="cuda", seed=2)
    residual = randn(37, dim, dtype=dtype, device="cuda", seed=3) if with_residual else None
    out, new_residual = rms_norm(x, w, 1e-6, zero_centered, residual)
    ref, ref_residual = rms_norm_ref(x, w, 1e-6, zero_centered, residual)
    close(out, ref, dtype)
    if with_residual:
        assert torch.equal(new_residual, ref_residual)  # one rounding of x + residual, like torch's add
    else:
        assert new_residual is None


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(32, 4, 128, 128), (16, 2, 256, 64), (4, 4, 64, 64)])  # H, Hkv, D, rot_dim
@pytest.mark.parametrize("qk_norm, zero_centered", [(False, False), (True, False), (True, True)])
def test_qk_norm_rope_kv_matches_ref(dtype, shape, qk_norm, zero_centered):
    from strata.kernels.rope_kv import qk_norm_rope_kv

    heads, kv_heads, head_dim, rot_dim = shape
    rotary = RotaryEmbedding(head_dim, rot_dim, 4096, 1e6).to("cuda")
    tokens = 9
    # q as a strided view, like the fused projection's (and gated attention's [q | gate]) output
    qkv = randn(tokens, (2 * heads + 2 * kv_heads) * head_dim, dtype=dtype, device="cuda", seed=5)
    q = qkv[:, :2 * heads * head_dim].view(tokens, heads, 2 * head_dim)[..., :head_dim]
    k = qkv[:, 2 * heads * head_dim:].view(tokens, 2 * kv_heads, head_dim)[:, :kv_heads]
    v = qkv[:, 2 * heads * head_dim:].view(tokens, 2 * kv_heads, head_dim)[:, kv_heads:]
    weights = [randn(head_dim, dtype=dtype, device="cuda", seed=s) for s in (6, 7)] if qk_norm else [None, None]
    positions = torch.tensor([0, 1, 5, 100, 4095, 7, 8, 9, 1000], device="cuda")
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(0))[:tokens].to("cuda")
    caches = [torch.zeros(16, 4, kv_heads, head_dim, dtype=dtype, device="cuda") for _ in range(4)]
    out = qk_norm_rope_kv(q, k, v, *weights, 1e-6, zero_centered, rotary.cos, rotary.sin, positions, caches[0],
                          caches[1], slots)
    ref = qk_norm_rope_kv_ref(q, k, v, *weights, 1e-6, zero_centered, rotary.cos, rotary.sin, positions,
                              caches[2], caches[3], slots)
    close(out, ref, dtype)
    close(caches[0], caches[2], dtype)
    assert torch.equal(caches[1], caches[3])  # v is copied as is
    assert caches[0].view(-1, kv_heads, head_dim)[slots].abs().sum() > 0


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(32, 4, 128, 128), (16, 2, 256, 64), (6, 2, 80, 40)])  # H, Hkv, D, rot_dim
@pytest.mark.parametrize("qk_norm, zero_centered", [(False, False), (True, True)])
def test_qk_norm_rope_kv_writes_int8_kv(dtype, shape, qk_norm, zero_centered):
    """int8 KV: the kernel quantizes the rotated k and the v it writes as write_kv_ref does (kv_quant.py): v's
    int8 values and scales bit for bit (the same values in, correctly rounded divisions), k's within one step
    and a rounding of its scale where the kernel's norm and rotation round apart from the ref's (`close` on
    16-bit caches). Passed under TRITON_INTERPRET=1 on the CPU (float32, and float16 in place of bfloat16)."""
    from strata.kernels.rope_kv import qk_norm_rope_kv

    heads, kv_heads, head_dim, rot_dim = shape
    rotary = RotaryEmbedding(head_dim, rot_dim, 4096, 1e6).to("cuda")
    tokens = 9
    q = randn(tokens, heads, head_dim, dtype=dtype, device="cuda", seed=5)
    k, v = (randn(tokens, kv_heads, head_dim, dtype=dtype, device="cuda", seed=s) * 4 for s in (6, 7))
    weights = [randn(head_dim, dtype=dtype, device="cuda", seed=s) for s in (8, 9)] if qk_norm else [None, None]
    positions = torch.tensor([0, 1, 5, 100, 4095, 7, 8, 9, 1000], device="cuda")
    slots = torch.randperm(64, generator=torch.Generator().manual_seed(0))[:tokens].to("cuda")
    caches = [torch.zeros(16, 4, kv_heads, head_dim, dtype=torch.int8, device="cuda") for _ in range(4)]
    scales = [torch.zeros(16, 4, kv_heads, device="cuda") for _ in range(4)]
    out = qk_norm_rope_kv(q, k, v, *weights, 1e-6, zero_centered, rotary.cos, rotary.sin, positions, caches[0],
                          caches[1], slots, kv_scales=(scales[0], scales[1]))
    ref = qk_norm_rope_kv_ref(q, k, v, *weights, 1e-6, zero_centered, rotary.cos, rotary.sin, positions,
                              caches[2], caches[3], slots, kv_scales=(scales[2], scales[3]))
    close(out, ref, dtype)
    assert torch.equal(caches[1], caches[3]) and torch.equal(scales[1], scales[3])
    assert (caches[0].int() - caches[2].int()).abs().max() <= 1
    close(scales[0], scales[2], dtype)
    written = caches[0].view(-1, kv_heads, head_dim)[slots]                # [T, Hkv, D]
    assert written.abs().amax(-1).eq(127).all() and scales[0].view(-1, kv_heads)[slots].gt(0).all()
    assert scales[0].count_nonzero() == tokens * kv_heads                  # only the tokens' slots


@gpu
@pytest.mark.parametrize("rot_dim", [128, 64])
def test_layers_share_the_forwards_cos_sin_rows(rot_dim):
    """With step_rows, the first launch stores the tokens' cos / sin rows as it looks them up and a
    later launch reads them: both give bit for bit the output and cache rows of a launch without."""
    from strata.kernels.rope_kv import qk_norm_rope_kv

    rotary = RotaryEmbedding(128, rot_dim, 4096, 1e6).to("cuda")
    tokens, heads, kv_heads = 5, 8, 2
    q = randn(tokens, heads, 128, dtype=torch.bfloat16, device="cuda", seed=1)
    k, v = (randn(tokens, kv_heads, 128, dtype=torch.bfloat16, device="cuda", seed=s) for s in (2, 3))
    weights = [randn(128, dtype=torch.bfloat16, device="cuda", seed=s) for s in (4, 5)]
    positions = torch.tensor([3, 0, 4095, 17, 1000], device="cuda")
    slots = torch.tensor([9, 2, 40, 33, 7], device="cuda")
    caches = [torch.zeros(16, 4, kv_heads, 128, dtype=torch.bfloat16, device="cuda") for _ in range(6)]
    step_rows = {}
    outs = [qk_norm_rope_kv(q, k, v, *weights, 1e-6, False, rotary.cos, rotary.sin, positions, caches[2 * i],
                            caches[2 * i + 1], slots, rows) for i, rows in enumerate([None, step_rows, step_rows])]
    cos_rows, sin_rows = step_rows["rows"]
    assert torch.equal(cos_rows, rotary.cos[positions]) and torch.equal(sin_rows, rotary.sin[positions])
    for i in (1, 2):
        assert torch.equal(outs[i], outs[0])
        assert torch.equal(caches[2 * i], caches[0]) and torch.equal(caches[2 * i + 1], caches[1])


@gpu
@pytest.mark.parametrize("num_experts, top_k", [(8, 2), (128, 8), (512, 10), (60, 4)])
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_softmax_topk_matches_ref(num_experts, top_k, renormalize, dtype):
    from strata.kernels.routing import softmax_topk

    logits = randn(67, num_experts, dtype=dtype, device="cuda", seed=num_experts) * 3
    ids, weights = softmax_topk(logits, top_k, renormalize, dtype)
    ref_ids, ref_weights = softmax_topk_ref(logits, top_k, renormalize, dtype)
    assert ids.dtype == torch.int64 and weights.dtype == dtype
    # bf16 logits can tie; then either expert is a correct pick, so compare the picked probabilities
    probs = torch.softmax(logits.float(), dim=-1)
    assert torch.equal(probs.gather(1, ids), probs.gather(1, ref_ids))
    assert all(len(set(row)) == top_k for row in ids.tolist())
    if dtype == torch.float32:
        assert torch.equal(ids, ref_ids)
    close(weights, ref_weights, dtype)
    empty_ids, _ = softmax_topk(logits[:0], top_k, renormalize, dtype)
    assert empty_ids.shape == (0, top_k)


@gpu
def test_softmax_topk_records_routing_statistics():
    from strata.kernels.routing import softmax_topk

    logits = randn(37, 64, device="cuda", seed=9)
    counts, touched = torch.full((64,), 5, dtype=torch.long, device="cuda"), torch.zeros(64, dtype=torch.long, device="cuda")
    ids, _ = softmax_topk(logits, 4, True, torch.float32, counts, touched)
    ref_counts, ref_touched = torch.full_like(counts, 5), torch.zeros_like(touched)
    record_routing_ref(ids, ref_counts, ref_touched)
    assert torch.equal(counts, ref_counts) and torch.equal(touched, ref_touched)
    assert counts.sum().item() == 5 * 64 + 37 * 4
    real_rows = torch.tensor([20], device="cuda")  # rows 20.. are padding
    ids, _ = softmax_topk(logits, 4, True, torch.float32, counts, touched.zero_(), real_rows)
    record_routing_ref(ids, ref_counts, ref_touched.zero_(), real_rows)
    assert torch.equal(counts, ref_counts) and torch.equal(touched, ref_touched)
    assert counts.sum().item() == 5 * 64 + 37 * 4 + 20 * 4


def _check_layout(ids, sorted_ids, block_expert, block_m):
    """fused_moe's row layout for ids [T, K]: every pair once, grouped by expert, blocks tagged."""
    num_pairs = ids.numel()
    sorted_ids, block_expert = sorted_ids.cpu(), block_expert.cpu()
    assert sorted(sorted_ids[sorted_ids < num_pairs].tolist()) == list(range(num_pairs))
    flat = ids.flatten().cpu()
    for block, expert in zip(sorted_ids.view(-1, block_m).tolist(), block_expert.tolist()):
        pairs = [p for p in block if p < num_pairs]
        assert (expert < 0) == (not pairs)
        assert all(flat[p] == expert for p in pairs)


@gpu
@pytest.mark.parametrize("num_tokens, num_experts, dim, top_k", [(1, 128, 2048, 8), (1, 8, 64, 2), (1, 512, 256, 10),
                                                                 (5, 60, 200, 4), (64, 512, 256, 10), (17, 8, 64, 2)])
@pytest.mark.parametrize("renormalize", [False, True])
def test_route_and_align_matches_ref(num_tokens, num_experts, dim, top_k, renormalize):
    """The router projection, routing, statistics and row layout of one launch against the router's
    linear layer + softmax_topk_ref + moe_align_ref; twice, so the program counter's reset is checked.
    One token lays out its rows from registers (8 experts pad that tail to 16 rows), more tokens through
    global memory."""
    from strata.kernels.fused_moe import default_config
    from strata.kernels.routing import route_and_align, route_and_align_ref

    dtype = torch.bfloat16
    hidden = randn(num_tokens, dim, dtype=dtype, device="cuda", seed=num_tokens)
    gate = (randn(num_experts, dim, device="cuda", seed=num_experts) * 3 / dim ** 0.5).to(dtype)
    block_m = default_config(num_tokens * top_k, num_experts)["BLOCK_M"]
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    counts = torch.full((num_experts,), 2, dtype=torch.long, device="cuda")
    touched = torch.zeros(num_experts, dtype=torch.long, device="cuda")
    ref_ids, ref_weights, _, _ = route_and_align_ref(hidden, gate, top_k, renormalize, block_m)
    probs = torch.softmax((hidden @ gate.T).float(), dim=-1)  # bf16 logits, as the router's linear layer
    for _ in range(2):
        ids, weights, sorted_ids, block_expert = route_and_align(hidden, gate, top_k, renormalize, block_m, counter,
                                                                 counts, touched)
        assert counter.item() == 0
        assert all(len(set(row)) == top_k for row in ids.tolist())
        # summation order differs from cuBLAS: a near-tie may pick the other expert, never a worse one
        torch.testing.assert_close(probs.gather(1, ids), probs.gather(1, ref_ids), rtol=2e-2, atol=1e-3)
        close(weights, ref_weights, dtype)
        _check_layout(ids, sorted_ids, block_expert, block_m)
    ref_counts = torch.full_like(counts, 2)
    ref_touched = torch.zeros_like(touched)
    for _ in range(2):
        record_routing_ref(ids, ref_counts, ref_touched)
    assert torch.equal(counts, ref_counts) and torch.equal(touched, ref_touched)


@gpu
@pytest.mark.parametrize("num_tokens, num_experts, top_k", [(1, 128, 8), (1, 512, 10), (5, 60, 4), (16, 128, 8)])
def test_route_and_align_without_layout_picks_the_same(num_tokens, num_experts, top_k):
    """layout=False (packed experts read the ids as they are): the same ids and weights as with the layout,
    no layout returned, the counter left at 0."""
    from strata.kernels.routing import route_and_align

    hidden = randn(num_tokens, 2048, dtype=torch.bfloat16, device="cuda", seed=num_tokens)
    gate = (randn(num_experts, 2048, device="cuda", seed=num_experts) * 3 / 2048 ** 0.5).to(torch.bfloat16)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    ids, weights, _, _ = route_and_align(hidden, gate, top_k, True, 16, counter)
    bare_ids, bare_weights, no_rows, no_blocks = route_and_align(hidden, gate, top_k, True, 16, counter, layout=False)
    assert torch.equal(bare_ids, ids) and torch.equal(bare_weights, weights) and no_rows is None and no_blocks is None
    assert counter.item() == 0


@gpu
@pytest.mark.parametrize("num_tokens", [1, 7, 32, 33])
def test_moe_block_fused_routing_matches_the_unfused_path(num_tokens):
    """MoEBlock on CUDA routes decode-sized steps in one launch; a zero routing bias forces the unfused
    path (router linear + softmax_topk + fused_moe): both give the same block output. 33 tokens over
    64 experts is past where the fused launch pays (both unfused)."""
    from strata.model.moe import MoEBlock

    cfg = ModelConfig(architecture="Qwen3MoeForCausalLM", vocab_size=8, hidden_size=256, intermediate_size=8,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      num_experts=64, num_experts_per_tok=6, moe_intermediate_size=128)
    block = MoEBlock(cfg)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.05)
    block = block.to(device="cuda", dtype=torch.bfloat16)
    hidden = randn(num_tokens, 256, dtype=torch.bfloat16, device="cuda", seed=3)
    assert block._routes_fused(hidden) == (num_tokens <= 32)
    fused = block(hidden)
    block.routing_bias = torch.zeros(64, dtype=torch.bfloat16, device="cuda")
    assert not block._routes_fused(hidden)
    unfused = block(hidden)
    # rows whose logits round differently (summation order) at a near-tie may route to another
    # expert; every other row must agree to rounding
    ids, _ = block.route(hidden)
    fused_ids = block_ids(block, hidden) if num_tokens <= 32 else ids
    same = [i for i, row in enumerate(fused_ids.tolist()) if set(row) == set(ids[i].tolist())]
    assert len(same) >= 0.9 * num_tokens
    close(fused[same], unfused[same], torch.bfloat16)


def block_ids(block, hidden):
    """The expert ids the fused routing picks for hidden [T, D] (a separate launch of route_and_align)."""
    from strata.kernels.routing import route_and_align

    counter = torch.zeros(1, dtype=torch.int32, device=hidden.device)
    return route_and_align(hidden, block.gate.weight, block.top_k, block.norm_topk_prob, 16, counter)[0]


@gpu
@pytest.mark.parametrize("top_k, dim, with_shared, gated, zero_centered", [
    (8, 2048, False, False, False), (10, 200, True, False, True), (10, 2048, True, True, False)])
def test_rms_norm_topk_sum_matches_ref(top_k, dim, with_shared, gated, zero_centered):
    """The MoE layer's top-k sum (and shared expert, and its sigmoid gate) folded into the next norm with its
    residual add."""
    from strata.kernels.rms_norm import rms_norm_topk_sum, topk_sum_ref

    dtype = torch.bfloat16
    partials = randn(9, top_k, dim, device="cuda", seed=1)
    shared = randn(9, dim, dtype=dtype, device="cuda", seed=2) if with_shared else None
    gate = randn(9, 1, dtype=dtype, device="cuda", seed=5) if gated else None
    residual, weight = randn(9, dim, dtype=dtype, device="cuda", seed=3), randn(dim, dtype=dtype, device="cuda", seed=4)
    out, new_residual = rms_norm_topk_sum(partials, shared, weight, 1e-6, zero_centered, residual, dtype,
                                          shared_gate=gate)
    ref, ref_residual = rms_norm_ref(topk_sum_ref(partials, shared, dtype, gate), weight, 1e-6, zero_centered,
                                     residual)
    assert out.dtype == new_residual.dtype == dtype
    close(out, ref, dtype)
    close(new_residual, ref_residual, dtype)


def test_fused_routing_is_chosen_only_where_it_measured_faster():
    from strata.kernels.routing import fused_routing_pays

    assert fused_routing_pays(1, 128) and fused_routing_pays(16, 128) and not fused_routing_pays(17, 128)
    assert fused_routing_pays(1, 512) and not fused_routing_pays(8, 512)
    assert fused_routing_pays(32, 60) and not fused_routing_pays(33, 60)  # 60 experts pad to 64
    assert not fused_routing_pays(0, 8) and not fused_routing_pays(65, 8)


# ---- dense projections of single-token steps ------------------------------------------------------------

@gpu
@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize("cols, dim_in", [(5120, 2048), (2048, 4096), (72, 1000), (4100, 264)])
@pytest.mark.parametrize("dtype, with_bias", [(torch.bfloat16, False), (torch.bfloat16, True), (torch.float16, True)])
def test_skinny_linear_matches_ref(rows, cols, dim_in, dtype, with_bias):
    from strata.kernels.skinny_linear import skinny_linear, skinny_linear_ref

    x = randn(rows, dim_in, dtype=dtype, device="cuda", seed=rows)
    w = randn(cols, dim_in, dtype=dtype, device="cuda", seed=cols) * dim_in ** -0.5
    b = randn(cols, dtype=dtype, device="cuda", seed=3) if with_bias else None
    expected = skinny_linear_ref(x.float(), w.float(), b.float() if with_bias else None)
    torch.testing.assert_close(skinny_linear(x, w, b).float(), expected, rtol=1e-2, atol=1e-2)


@gpu
def test_model_linear_takes_the_skinny_kernel_only_for_single_rows(monkeypatch):
    """strata.model.linear.Linear: one row of a 16-bit CUDA input goes to skinny_linear, more rows
    (and float32, and weights of SKINNY_MAX_WEIGHT elements or more) to torch's linear; both give the
    layer's result."""
    import strata.kernels.skinny_linear as skinny
    from strata.model.linear import Linear

    calls = []
    real = skinny.skinny_linear
    monkeypatch.setattr(skinny, "skinny_linear", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    layer = Linear(512, 384, bias=True).to(device="cuda", dtype=torch.bfloat16)
    for rows in (1, 2, 16, 64):
        x = randn(rows, 512, dtype=torch.bfloat16, device="cuda", seed=rows)
        close(layer(x), torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float()), torch.bfloat16)
    Linear(512, 384).to(device="cuda")(randn(1, 512, device="cuda"))
    Linear(4096, 4096, bias=False).to(device="cuda", dtype=torch.bfloat16)(randn(1, 4096, dtype=torch.bfloat16,
                                                                                device="cuda"))
    assert calls == [1]


@gpu
@pytest.mark.parametrize("dim, inter, gated", [(2048, 512, True), (576, 1536, False), (200, 33, True)])
def test_skinny_mlp_matches_ref(dim, inter, gated):
    """One row through a SwiGLU MLP (and a sigmoid-gated shared expert) in two launches against the torch form
    in float32 on the same bf16 weights. Checked under TRITON_INTERPRET=1 on the CPU (float32 and float16)."""
    from strata.kernels.skinny_mlp import skinny_mlp, skinny_mlp_ref

    dtype = torch.bfloat16
    x = randn(1, dim, dtype=dtype, device="cuda", seed=1)
    gate_up = randn(2 * inter, dim, dtype=dtype, device="cuda", seed=2) / dim ** 0.5
    down = randn(dim, inter, dtype=dtype, device="cuda", seed=3) / inter ** 0.5
    gate = randn(1, dim, dtype=dtype, device="cuda", seed=4) / dim ** 0.5 if gated else None
    expected = skinny_mlp_ref(x.float(), gate_up.float(), down.float(), None if gate is None else gate.float())
    got = skinny_mlp(x, gate_up, down, gate)
    assert got.dtype == dtype and got.shape == (1, dim)
    close(got, expected, dtype)


@gpu
def test_dense_mlp_and_shared_expert_take_two_launches_for_one_row(monkeypatch):
    """DenseMLP (and the MoE block's gated shared expert) on one bf16 CUDA row go through ops.gated_mlp; more
    rows keep the torch form; both agree with the float32 torch form."""
    from strata.model import ops
    from strata.model.linear import Linear
    from strata.model.mlp import DenseMLP

    calls = []
    real = ops.gated_mlp
    monkeypatch.setattr(ops, "gated_mlp", lambda *a: calls.append(len(a)) or real(*a))
    torch.manual_seed(0)
    mlp = DenseMLP(256, 128).to(device="cuda", dtype=torch.bfloat16)
    gate = Linear(256, 1, bias=False).to(device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for p in (*mlp.parameters(), gate.weight):
            p.mul_(0.2)
        mlp32, gate32 = copy.deepcopy(mlp).float(), copy.deepcopy(gate).float()
        for rows in (1, 3):
            x = randn(rows, 256, dtype=torch.bfloat16, device="cuda", seed=rows)
            close(mlp(x), mlp32(x.float()), torch.bfloat16)
            close(mlp(x, gate), mlp32(x.float(), gate32), torch.bfloat16)
    assert calls == [3, 4]  # one row, without and with the gate: (x, gate_up, down[, gate])


@gpu
@pytest.mark.parametrize("layers, experts", [(24, 128), (48, 512), (3, 60), (1, 8)])
@pytest.mark.parametrize("routed", [True, False])
def test_fold_step_matches_ref(layers, experts, routed):
    from strata.kernels.routing import fold_step

    touched = (torch.rand(layers, experts, generator=torch.Generator().manual_seed(layers)) < 0.1).long() * routed
    total, steps = torch.arange(layers), torch.tensor([5])
    on_gpu = [x.to("cuda") for x in (touched, total, steps)]
    fold_step(*on_gpu)
    fold_step_ref(touched, total, steps)
    for actual, expected in zip(on_gpu, (touched, total, steps)):
        assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=gpu), "cpu"])
@pytest.mark.parametrize("rows, vocab", [(1, 151936), (5, 4096), (3, 4097), (40, 32000), (2, 7)])
def test_argmax_matches_torch(rows, vocab, device):
    """Random rows, plus ties (the first index wins), an all -inf row, a NaN (it wins, as in torch); the Triton
    kernel on CUDA, numpy's argmax on the CPU."""
    from strata.kernels.argmax import argmax, argmax_ref

    logits = randn(rows, vocab, device=device, seed=vocab)
    if rows > 1:
        logits[0, vocab // 3] = logits[0, vocab // 2] = logits[0, vocab - 1] = 1e4   # ties across chunks
        logits[1] = float("-inf")
    if rows > 2:
        logits[2, vocab // 2] = float("nan")
    for _ in range(3):  # the launch leaves its per-row counters at zero for the next one
        assert torch.equal(argmax(logits), argmax_ref(logits))


# ---- hyper-connection mixer (Qwen4-Exp) ---------------------------------------------------------------

def _hyper_weights(hc: int, hidden: int, rank: int, dtype, device):
    width = hc * hidden
    return (randn(width, seed=11, dtype=dtype, device=device) * 0.1,
            randn(rank, width, seed=12, dtype=dtype, device=device) * width ** -0.5,
            randn(width, rank, seed=13, dtype=dtype, device=device) * rank ** -0.5,
            randn(hc, width, seed=14, dtype=dtype, device=device) * width ** -0.5)


def test_hyper_mix_ref_is_what_hf_computes():
    """The ref (the model's torch path) against HF's Qwen4-Exp gated residual on the same weights."""
    from transformers import Qwen4ExpTextConfig
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextGatedResidual
    from strata.kernels.hyper import hyper_mix_ref

    config = Qwen4ExpTextConfig(hidden_size=64, hc_count=4, hc_lowrank=16, rms_norm_eps=1e-6, num_experts=8,
                                num_experts_per_tok=2)
    hf = Qwen4ExpTextGatedResidual(config)
    norm, down, up, inject = _hyper_weights(4, 64, 16, torch.float32, "cpu")
    with torch.no_grad():
        for param, value in zip((hf.hc_norm.weight, hf.input_mix_weight_down.weight, hf.input_mix_weight_up.weight,
                                 hf.block_inject_weight.weight), (norm, down, up, inject)):
            param.copy_(value)
        streams = randn(3, 256, seed=15)
        expected, _, weights = hf(streams)
    out, out_weights = hyper_mix_ref(streams, norm, down, up, inject, 4, 1e-6)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out_weights, weights)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, hidden, rank, inject", [(1, 2560, 320, True), (3, 2560, 320, False),
                                                        (16, 200, 24, True)])
def test_hyper_mix_kernel_matches_ref(dtype, rows, hidden, rank, inject):
    from strata.kernels.hyper import hyper_mix, hyper_mix_ref

    norm, down, up, inject_w = _hyper_weights(4, hidden, rank, dtype, "cuda")
    streams = randn(rows, 4 * hidden, seed=16, dtype=dtype, device="cuda")
    args = (streams, norm, down, up, inject_w if inject else None, 4, 1e-6)
    (out, weights), (ref, ref_weights) = hyper_mix(*args), hyper_mix_ref(*args)
    close(out, ref, dtype)
    if inject:
        close(weights, ref_weights, dtype)


@gpu
@pytest.mark.parametrize("inject", [False, True])
def test_the_heads_hyper_mix_rounds_a_row_alike_among_any_rows(inject):
    """rows_alike (the LM head's mixer): row r of 1, 5, 24 or 64 rows comes out bit for bit the same, so a head
    graph over a layout's padded rows samples what an eager step's head over its sampled rows does. Without
    it one row alone takes its faster one-block form, which sums in another order."""
    from strata.model import ops

    norm, down, up, inject_w = _hyper_weights(4, 2560, 320, torch.bfloat16, "cuda")
    streams = randn(64, 4 * 2560, seed=16, dtype=torch.bfloat16, device="cuda")
    args = (norm, down, up, inject_w if inject else None, 4, 1e-6)
    full, full_weights = ops.hyper_mix(streams, *args, rows_alike=True)
    for rows in (1, 5, 24):
        out, weights = ops.hyper_mix(streams[:rows].contiguous(), *args, rows_alike=True)
        assert torch.equal(out, full[:rows])
        assert not inject or torch.equal(weights, full_weights[:rows])


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, top_k, hidden, with_shared, gated", [
    (1, 1, 2560, True, False), (1, 10, 2560, True, True), (5, 10, 200, False, False), (16, 4, 640, True, True)])
def test_topk_sum_inject_matches_ref(dtype, rows, top_k, hidden, with_shared, gated):
    """The MoE block's top-k sum, shared expert (gated) and write into the streams: one launch, the torch form's
    roundings."""
    from strata.kernels.hyper import topk_sum_inject, topk_sum_inject_ref

    partials = randn(rows, top_k, hidden, seed=17, device="cuda")
    shared = randn(rows, hidden, seed=18, dtype=dtype, device="cuda") if with_shared else None
    gate = randn(rows, 1, seed=21, dtype=dtype, device="cuda") if gated else None
    streams = randn(rows, 4 * hidden, seed=19, dtype=dtype, device="cuda")
    weights = randn(rows, 4, seed=20, dtype=dtype, device="cuda").sigmoid() * 2
    out = topk_sum_inject(partials, shared, streams, weights, gate)
    ref = topk_sum_inject_ref(partials, shared, streams, weights, gate)
    torch.testing.assert_close(out, ref, rtol=2 ** -7 if dtype == torch.bfloat16 else 1e-6, atol=1e-6)
    if dtype == torch.bfloat16:  # rounded where the torch form rounds: equal but for rare last-bit ties
        assert (out != ref).float().mean() < 0.01
