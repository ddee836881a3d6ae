"""Triton kernels against their torch refs (GPU, `-m gpu`), and each ref against the model code it
stands for (CPU, so CI runs them): fused MoE vs LocalExperts, paged attention vs the model's
paged_attention on a runner-built context, the delta rule and conv update vs gated_delta_net.

Tolerances (relative Frobenius error against the ref computed in float32 on upcast inputs): bf16
operands 1e-2; float32 state and outputs of the float32 recurrences 1e-4; tf32 dots (fp32 MoE) 5e-3.
"""

from __future__ import annotations

import pathlib
from types import SimpleNamespace

import pytest
import torch

from strata.kernels.fused_moe import expert_mlp, fused_moe_ref, moe_align_ref
from strata.kernels.gdn import causal_conv1d_update_ref, gdn_recurrent_ref
from strata.kernels.sm_copy import flat_words
from strata.kernels.kv_quant import quantize_int8_ref
from strata.kernels.paged_attention import paged_attention_ref
from strata.model.attention import paged_attention as model_paged_attention
from strata.model.gated_delta_net import causal_conv1d_ragged, recurrent_gated_delta_rule
from strata.model.moe import LocalExperts
from strata.runner.inputs import build_inputs
from strata.types import ScheduledSlot

gpu = pytest.mark.gpu


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    assert not actual.isnan().any(), "NaN in the output (unwritten or poisoned element)"
    return ((actual.double() - expected.double()).norm() / expected.double().norm().clamp_min(1e-30)).item()


def ragged(query_lens: list[int], device: str = "cpu") -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], device=device)  # [S + 1]


# ---- fused MoE ------------------------------------------------------------------------------------

def moe_inputs(num_tokens, dim, inter, num_experts, top_k, dtype, device, generator):
    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)

    hidden = randn(num_tokens, dim)
    w13, w2 = randn(num_experts, 2 * inter, dim) / dim ** 0.5, randn(num_experts, dim, inter) / inter ** 0.5
    ids = torch.stack([torch.randperm(num_experts, generator=generator)[:top_k] for _ in range(num_tokens)])
    weights = torch.rand(num_tokens, top_k, generator=generator).softmax(-1)
    return hidden, w13, w2, ids.to(device), weights.to(device=device, dtype=dtype)


def test_fused_moe_ref_matches_local_experts():
    """LocalExperts on the CPU, fused_moe_ref and a token-by-token sum of its k weighted expert MLPs agree."""
    generator = torch.Generator().manual_seed(0)
    hidden, w13, w2, ids, weights = moe_inputs(9, 24, 20, 6, 2, torch.float32, "cpu", generator)
    experts = LocalExperts(6, 24, 20)
    with torch.no_grad():
        experts.w13.copy_(w13)
        experts.w2.copy_(w2)
        expected = experts(hidden, ids, weights)
    assert torch.allclose(fused_moe_ref(hidden, w13, w2, ids, weights), expected, rtol=1e-6, atol=1e-6)
    per_token = torch.stack([sum(weights[t, j] * expert_mlp(hidden[t:t + 1], w13[e], w2[e])[0]
                                 for j, e in enumerate(ids[t].tolist())) for t in range(9)])   # [T, D]
    assert torch.allclose(per_token, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("num_tokens, num_experts, top_k, block_m",
                         [(1, 128, 8, 16), (7, 10, 3, 16), (300, 16, 4, 64), (700, 128, 8, 16)])
def test_moe_align_groups_each_pair_once_by_expert(device, num_tokens, num_experts, top_k, block_m):
    if device == "cuda":
        from strata.kernels.fused_moe import moe_align
    else:
        moe_align = moe_align_ref
    generator = torch.Generator().manual_seed(num_tokens)
    ids = torch.stack([torch.randperm(num_experts, generator=generator)[:top_k] for _ in range(num_tokens)])
    sorted_ids, block_expert = (x.cpu() for x in moe_align(ids.to(device), num_experts, block_m))
    num_pairs = ids.numel()
    rows = sorted_ids.view(-1, block_m)
    real = sorted_ids[sorted_ids < num_pairs]
    assert sorted(real.tolist()) == list(range(num_pairs))
    for block, expert in zip(rows.tolist(), block_expert.tolist()):
        pairs = [p for p in block if p < num_pairs]
        assert (expert < 0) == (not pairs)
        assert all(ids.flatten()[p] == expert for p in pairs)
    used = block_expert[block_expert >= 0]
    # one block per expert while its rows fit one block: its weights are read once
    counts = torch.bincount(ids.flatten(), minlength=num_experts)
    assert used.tolist() == [e for e in range(num_experts) for _ in range(-(-int(counts[e]) // block_m))]


MOE_CASES = [  # T, D, I, E, K
    (1, 2048, 768, 128, 8),      # qwen3-30b-a3b decode
    (1, 64, 48, 8, 2),
    (7, 200, 136, 10, 3),        # non-powers of two
    (33, 256, 96, 16, 4),
    (200, 128, 64, 32, 4),       # 25 rows per expert: the middle tile config
    (300, 512, 384, 32, 8),      # mid-size groups
    (1024, 256, 128, 8, 2),      # prefill-sized groups
]


@gpu
@pytest.mark.parametrize("num_tokens, dim, inter, num_experts, top_k", MOE_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_moe_matches_ref(num_tokens, dim, inter, num_experts, top_k, dtype):
    from strata.kernels.fused_moe import fused_moe

    generator = torch.Generator().manual_seed(num_tokens * 31 + dim)
    hidden, w13, w2, ids, weights = moe_inputs(num_tokens, dim, inter, num_experts, top_k, dtype, "cuda", generator)
    out = fused_moe(hidden, w13, w2, ids, weights)
    expected = fused_moe_ref(hidden.float(), w13.float(), w2.float(), ids, weights.float())
    assert out.dtype == dtype and out.shape == hidden.shape
    assert rel_err(out, expected) < (1e-2 if dtype == torch.bfloat16 else 5e-3)


@gpu
@pytest.mark.parametrize("num_tokens", [1, 2, 5])
def test_fused_moe_gives_zero_weight_pairs_nothing(num_tokens):
    """run_experts marks pairs computed elsewhere as id 0 with weight 0: they must add nothing."""
    from strata.kernels.fused_moe import fused_moe

    generator = torch.Generator().manual_seed(num_tokens)
    hidden, w13, w2, ids, weights = moe_inputs(num_tokens, 256, 128, 16, 8, torch.bfloat16, "cuda", generator)
    skipped = torch.zeros_like(ids, dtype=torch.bool)
    skipped[0, 0] = skipped[-1, 3] = True
    out = fused_moe(hidden, w13, w2, ids.masked_fill(skipped, 0), weights.masked_fill(skipped, 0))
    expected = fused_moe_ref(hidden.float(), w13.float(), w2.float(), ids.masked_fill(skipped, -1), weights.float())
    assert rel_err(out, expected) < 1e-2


@gpu
@pytest.mark.parametrize("dim, inter, num_experts, top_k", [(2048, 768, 128, 8), (256, 96, 16, 4), (512, 512, 64, 10)])
@pytest.mark.parametrize("duplicate", [False, True])
def test_one_token_down_sums_its_experts_like_the_k_row_path(dim, inter, num_experts, top_k, duplicate):
    """One token's down projection sums its k weighted expert outputs in the kernel (one float32 row);
    the k-row path leaves them apart. Same sum to float32 rounding (inter 96: a partial K tile; top-k
    10: padded to 16 picks; `duplicate`: an expert picked twice with a nonzero weight, so its block holds
    two rows and takes the kernel's second pass)."""
    import strata.kernels.fused_moe as fm

    generator = torch.Generator().manual_seed(dim + top_k)
    hidden, w13, w2, ids, weights = moe_inputs(1, dim, inter, num_experts, top_k, torch.bfloat16, "cuda", generator)
    if duplicate:
        ids[0, 2] = ids[0, 1]
    cfg = fm.default_config(top_k, num_experts)
    sorted_ids, block_expert = fm.moe_align(ids, num_experts, cfg["BLOCK_M"])
    summed = fm.moe_grouped_gemms(hidden, w13, w2, weights, sorted_ids, block_expert, cfg, sum_topk=False)
    rows = fm.moe_grouped_gemms(hidden, w13, w2, weights, sorted_ids, block_expert, cfg, sum_topk=False,
                                _k_rows=True)                     # the k-row down kernel for the same token
    assert summed.shape == (1, 1, dim) and rows.shape == (1, top_k, dim) and summed.dtype == torch.float32
    torch.testing.assert_close(summed[:, 0], rows.sum(1), rtol=1e-4, atol=1e-5)


# ---- paged attention ------------------------------------------------------------------------------

def paged_problem(windows, block_size, num_heads, num_kv_heads, head_dim, dtype, device, generator):
    """windows: (num_computed, query_len) per sequence; blocks are handed out shuffled."""
    seq_lens = [c + n for c, n in windows]
    per_seq = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(per_seq) + 3
    ids = torch.randperm(num_blocks, generator=generator).tolist()
    tables, start = [], 0
    for n in per_seq:
        tables.append(ids[start:start + n])
        start += n
    width = max(per_seq) + 2                                   # padding columns past the longest table
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], device=device)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)

    k_cache = randn(num_blocks, block_size, num_kv_heads, head_dim)
    v_cache = randn(num_blocks, block_size, num_kv_heads, head_dim)
    q = randn(sum(n for _, n in windows), num_heads, head_dim)
    return q, k_cache, v_cache, block_tables, tables, torch.tensor(seq_lens, device=device), \
        ragged([n for _, n in windows], device)


def _scheduled(windows: list[tuple[int, int]]) -> list[ScheduledSlot]:
    return [ScheduledSlot(slot_id=i, num_computed_tokens=c, num_new_tokens=n, new_block_ids=[], token_ids=[0] * n)
            for i, (c, n) in enumerate(windows)]


@pytest.mark.parametrize("windows, block_size, head_dim", [
    ([(0, 5), (12, 1), (30, 4), (7, 16)], 4, 8),     # windows: one padded batch
    ([(0, 40), (20, 30), (3, 1), (0, 17)], 8, 16),   # long chunks one by one: causal, or masked after a prefix
    ([(0, 40), (0, 40), (0, 40)], 8, 16),            # equal fresh prompts: one batch
    ([(0, 17)], 16, 8),
])
@pytest.mark.parametrize("int8", [False, True])
def test_paged_attention_ref_matches_model(windows, block_size, head_dim, int8):
    """Every torch path of the model's paged attention, on float32 caches and on int8 ones with their scales."""
    generator = torch.Generator().manual_seed(len(windows) + block_size)
    q, k_cache, v_cache, _, tables, _, _ = paged_problem(windows, block_size, 6, 2, head_dim, torch.float32, "cpu",
                                                         generator)
    kv_scales = None
    if int8:
        (k_cache, k_scale), (v_cache, v_scale) = quantize_int8_ref(k_cache), quantize_int8_ref(v_cache)
        kv_scales = (k_scale, v_scale)
    step = build_inputs(_scheduled(windows), dict(enumerate(tables)), block_size, {}, {}, "cpu")
    expected = model_paged_attention(q, k_cache, v_cache, step.ctx, 0.35, kv_scales)
    out = paged_attention_ref(q, k_cache, v_cache, step.ctx.block_tables, step.ctx.seq_lens,
                              step.ctx.query_start_loc, 0.35, kv_scales)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)


ATTN_SHAPES = [(32, 4, 128), (6, 2, 64), (8, 8, 96), (12, 4, 80)]  # H, Hkv, D
ATTN_WINDOWS = [
    [(0, 1)],                                     # T = 1, first token
    [(4000, 1)],                                  # one long decode row
    [(5, 1), (100, 1), (33, 1), (1000, 1)],       # decode batch
    [(40, 4), (0, 7), (300, 16), (2, 1), (63, 3)],  # verify windows, mixed lengths
    [(2047, 16)],
]


@gpu
@pytest.mark.parametrize("heads", ATTN_SHAPES)
@pytest.mark.parametrize("windows", ATTN_WINDOWS)
@pytest.mark.parametrize("block_size, num_splits", [(16, None), (5, 1), (16, 3), (32, 64)])
def test_paged_attention_matches_ref(heads, windows, block_size, num_splits):
    from strata.kernels.paged_attention import paged_attention

    num_heads, num_kv_heads, head_dim = heads
    generator = torch.Generator().manual_seed(len(windows) * 7 + block_size + head_dim)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
        windows, block_size, num_heads, num_kv_heads, head_dim, torch.bfloat16, "cuda", generator)
    scale = head_dim ** -0.5
    out = paged_attention(q, k_cache, v_cache, block_tables, seq_lens, qsl, scale,
                          max_query_len=max(n for _, n in windows), num_splits=num_splits)
    expected = paged_attention_ref(q.float(), k_cache.float(), v_cache.float(), block_tables, seq_lens, qsl, scale)
    assert rel_err(out, expected) < 1e-2


def check_output_epilogue(heads, num_splits, dtype, device, with_gate):
    """The output's epilogue: gated by sigmoid(gate) as torch's `out * sigmoid(gate)` on the 16-bit output rounds
    (bit for bit, with_gate: the CUDA build, libdevice), and rounded to 8 bits for a packed o_proj as
    q8_rounding.quantize_ref rounds the (gated) rows; windows whose context is one KV tile (their one split
    writes) and longer ones (the merge)."""
    from strata.kernels import q8_rounding
    from strata.kernels.paged_attention import paged_attention

    num_heads, num_kv_heads, head_dim = heads
    windows = [(10, 1), (300, 1), (3, 4), (120, 16)]
    generator = torch.Generator().manual_seed(head_dim + num_heads)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
        windows, 16, num_heads, num_kv_heads, head_dim, dtype, device, generator)
    tokens = q.shape[0]
    # the gate inside a wider projection output, as the gated layers' [q | gate] rows leave it
    wide = torch.randn(tokens, num_heads, 3 * head_dim, generator=generator).to(device=device, dtype=dtype)
    gate = wide[:, :, head_dim:2 * head_dim]
    args = (q, k_cache, v_cache, block_tables, seq_lens, qsl, head_dim ** -0.5)
    plain = paged_attention(*args, max_query_len=16, num_splits=num_splits)
    rounding = q8_rounding.empty_rounding(tokens, num_heads * head_dim, device)
    if with_gate:
        gated = paged_attention(*args, max_query_len=16, num_splits=num_splits, gate=gate, rounding=rounding)
        assert torch.equal(gated, plain * torch.sigmoid(gate))
        for got, want in zip(rounding, q8_rounding.quantize_ref(gated.reshape(tokens, -1))):
            torch.testing.assert_close(got, want.to(got.dtype), rtol=0, atol=0)
    only_rounded = paged_attention(*args, max_query_len=16, num_splits=num_splits, rounding=rounding)
    assert torch.equal(only_rounded, plain)
    for got, want in zip(rounding, q8_rounding.quantize_ref(plain.reshape(tokens, -1))):
        torch.testing.assert_close(got, want.to(got.dtype), rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("heads", [(32, 4, 128), (16, 2, 256), (8, 2, 64)])
@pytest.mark.parametrize("num_splits", [None, 1, 3])
def test_paged_attention_gates_and_rounds_its_output(heads, num_splits):
    check_output_epilogue(heads, num_splits, torch.bfloat16, "cuda", with_gate=True)


@pytest.mark.skipif(__import__("os").environ.get("TRITON_INTERPRET") != "1",
                    reason="the kernel in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")
@pytest.mark.parametrize("num_splits", [None, 1])
@pytest.mark.parametrize("fused_merge", [False, True])
def test_paged_attention_rounds_its_output_interpreted(num_splits, fused_merge, monkeypatch):
    if fused_merge:
        monkeypatch.setenv("STRATA_FUSED_MERGE", "1")
    check_output_epilogue((8, 2, 64), num_splits, torch.float16, "cpu", with_gate=False)  # (no libdevice there)


@pytest.mark.parametrize("mode, num_seqs, fused", [("", 4, True), ("", 1, False), ("0", 4, False), ("1", 1, True),
                                                   ("2", 1, False), ("2", 2, True)])
def test_fused_merge_switch(mode, num_seqs, fused, monkeypatch):
    """STRATA_FUSED_MERGE: unset or 2 for steps of two or more sequences, 1 for every step, 0 never; the counters
    cover the step's (sequence, KV head) pairs, at zero."""
    from strata.kernels import paged_attention as module

    monkeypatch.setenv("STRATA_FUSED_MERGE", mode)
    counters = module.merge_counters(torch.device("cpu"), num_seqs, 8)
    assert (counters is not None) == fused
    if fused:
        assert counters.numel() >= num_seqs * 8 and not counters.any()


def test_arrival_counters_are_kept_per_kernel_and_grown_without_dropping_the_old_buffer():
    """One zeroed buffer per kind of kernel, the same tensor for every launch that fits it (CUDA graphs captured
    with it stay valid); a launch that needs more gets a larger one, and the outgrown buffer stays alive."""
    from strata.kernels import launch

    cpu = torch.device("cpu")
    first = launch.arrival_counters("test kind", cpu, 10, minimum=16)
    assert first.numel() == 16 and first.dtype == torch.int32 and not first.any()
    assert launch.arrival_counters("test kind", cpu, 16) is first
    assert launch.arrival_counters("another kind", cpu, 4, minimum=16) is not first
    grown = launch.arrival_counters("test kind", cpu, 40)
    assert grown.numel() == 4096 and not grown.any() and any(old is first for old in launch._RETIRED)


def check_fused_merge(device: str, monkeypatch) -> None:
    """STRATA_FUSED_MERGE=1: the last split of each (sequence, KV head) merges the partial sums (no merge launch):
    the reference's output within the kernel's bounds, the merge kernel's up to float32 summation order, and the
    arrival counters left at zero for the next launch (twice over, with other sequence counts)."""
    from strata.kernels import paged_attention as module

    generator = torch.Generator().manual_seed(5)
    for windows in ([(40, 4), (0, 7), (300, 16), (2, 1), (63, 3)], [(150, 1), (9, 1)]):
        q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
            windows, 16, 8, 2, 64, torch.float32, device, generator)
        args = (q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.125)
        monkeypatch.delenv("STRATA_FUSED_MERGE", raising=False)
        merged = module.paged_attention(*args, max_query_len=16, num_splits=3)
        monkeypatch.setenv("STRATA_FUSED_MERGE", "1")
        fused = module.paged_attention(*args, max_query_len=16, num_splits=3)
        expected = paged_attention_ref(*args)
        assert rel_err(fused, expected) < (5e-3 if device == "cuda" else 1e-4)  # float32 dots run as TF32 there
        torch.testing.assert_close(fused, merged, rtol=1e-5, atol=1e-6)
        assert not module.merge_counters(q.device, 2, 1).any()  # the buffer the launches shared


@pytest.mark.skipif(__import__("os").environ.get("TRITON_INTERPRET") != "1",
                    reason="the kernel in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")
def test_fused_merge_interpreted(monkeypatch):
    check_fused_merge("cpu", monkeypatch)


@gpu
def test_fused_merge(monkeypatch):
    check_fused_merge("cuda", monkeypatch)


@gpu
@pytest.mark.parametrize("windows", [[(40, 4), (0, 64), (300, 3), (17, 1), (100, 40)], [(0, 64)] * 5])
def test_mixed_step_attention_on_cuda_matches_the_cpu_path(windows):
    """A prompt chunk beside verification windows: the windows take the Triton kernel in one launch,
    the chunk torch SDPA; together they match the CPU path of the same step. Equal fresh prompts (a
    multi-prompt graph's layout) run as one SDPA batch."""
    generator = torch.Generator().manual_seed(11)
    block_size = 16
    q, k_cache, v_cache, _, tables, _, _ = paged_problem(windows, block_size, 8, 2, 64, torch.float32, "cpu",
                                                         generator)
    scheduled = _scheduled(windows)
    expected = model_paged_attention(q, k_cache, v_cache, build_inputs(scheduled, dict(enumerate(tables)), block_size,
                                                                       {}, {}, "cpu").ctx, 0.125)
    step = build_inputs(scheduled, dict(enumerate(tables)), block_size, {}, {}, "cuda")
    out = model_paged_attention(q.cuda(), k_cache.cuda(), v_cache.cuda(), step.ctx, 0.125)
    assert rel_err(out.cpu(), expected) < 5e-3  # float32 dots run as TF32 in the kernel


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("heads", [(16, 2, 256), (8, 2, 128), (4, 4, 64)])
def test_paged_attention_wide_heads_and_float32(dtype, heads):
    """Qwen3-Next's head_dim 256 and float32 KV: tiles sized by kv_tile_for fit shared memory."""
    from strata.kernels.paged_attention import paged_attention

    num_heads, num_kv_heads, head_dim = heads
    windows = [(300, 1), (17, 4), (1000, 16), (64, 8)]
    generator = torch.Generator().manual_seed(head_dim)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
        windows, 16, num_heads, num_kv_heads, head_dim, dtype, "cuda", generator)
    out = paged_attention(q, k_cache, v_cache, block_tables, seq_lens, qsl, head_dim ** -0.5, max_query_len=16)
    expected = paged_attention_ref(q.float(), k_cache.float(), v_cache.float(), block_tables, seq_lens, qsl,
                                   head_dim ** -0.5)
    assert out.dtype == dtype and rel_err(out, expected) < (1e-2 if dtype == torch.bfloat16 else 5e-3)  # float32 dots run as TF32


@gpu
@pytest.mark.parametrize("heads", [(16, 2, 256), (32, 4, 128)])
def test_paged_attention_reads_fp8_kv(heads):
    """fp8 KV (float8 e4m3 caches): the kernel widens K and V to the query's dtype and matches the reference
    on the same float8 values."""
    from strata.kernels.paged_attention import paged_attention

    num_heads, num_kv_heads, head_dim = heads
    windows = [(300, 1), (17, 4), (1000, 16), (64, 8)]
    generator = torch.Generator().manual_seed(head_dim + 1)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
        windows, 16, num_heads, num_kv_heads, head_dim, torch.bfloat16, "cuda", generator)
    k8, v8 = k_cache.to(torch.float8_e4m3fn), v_cache.to(torch.float8_e4m3fn)
    out = paged_attention(q, k8, v8, block_tables, seq_lens, qsl, head_dim ** -0.5, max_query_len=16)
    expected = paged_attention_ref(q.float(), k8.float(), v8.float(), block_tables, seq_lens, qsl, head_dim ** -0.5)
    assert out.dtype == torch.bfloat16 and rel_err(out, expected) < 1e-2


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("heads", [(16, 2, 256), (32, 4, 128), (6, 2, 80)])
@pytest.mark.parametrize("num_splits", [None, 1])
def test_paged_attention_reads_int8_kv(dtype, heads, num_splits):
    """int8 KV: the kernel reads int8 K and V with their per-vector scales (folded into the scores and the
    probabilities) and matches the reference, which dequantizes first, on the same int8 values. Checked
    under TRITON_INTERPRET=1 on the CPU (float32 and float16: relative errors 1e-6 / 3e-4)."""
    from strata.kernels.paged_attention import paged_attention

    num_heads, num_kv_heads, head_dim = heads
    windows = [(300, 1), (17, 4), (1000, 16), (64, 8), (0, 1)]
    generator = torch.Generator().manual_seed(head_dim + 2)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(
        windows, 16, num_heads, num_kv_heads, head_dim, dtype, "cuda", generator)
    (k8, k_scale), (v8, v_scale) = quantize_int8_ref(k_cache * 5), quantize_int8_ref(v_cache * 5)
    out = paged_attention(q, k8, v8, block_tables, seq_lens, qsl, head_dim ** -0.5, max_query_len=16,
                          num_splits=num_splits, kv_scales=(k_scale, v_scale))
    expected = paged_attention_ref(q.float(), k8, v8, block_tables, seq_lens, qsl, head_dim ** -0.5,
                                   (k_scale, v_scale))
    assert out.dtype == dtype and rel_err(out, expected) < (1e-2 if dtype == torch.bfloat16 else 5e-3)  # TF32 dots


def chosen_blocks_attention(device: str, dtype: torch.dtype, num_splits: int | None):
    """The paged attention kernel under a QSA block choice (ratio 4, 8 top blocks, random choices) on
    decode rows and verification windows of contexts below, at and past the budget -> (its output, the
    reference's in float32). Rows past the budget read only their chosen blocks and the tokens after."""
    from strata.kernels.paged_attention import paged_attention

    windows = [(300, 1), (17, 4), (30, 3), (90, 16), (0, 1), (1000, 2)]   # (30, 3) crosses the budget
    generator = torch.Generator().manual_seed(41)
    q, k_cache, v_cache, block_tables, _, seq_lens, qsl = paged_problem(windows, 16, 8, 2, 64, dtype, device,
                                                                        generator)
    ratio, top_blocks = 4, 8
    width = block_tables.shape[1] * 16 // ratio
    chosen = (torch.rand(q.shape[0], width, generator=generator) < 0.2).to(torch.uint8).to(device)
    choice = (chosen, ratio, top_blocks)
    out = paged_attention(q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.125, max_query_len=16,
                          num_splits=num_splits, block_choice=choice)
    expected = paged_attention_ref(q.float(), k_cache.float(), v_cache.float(), block_tables, seq_lens, qsl, 0.125,
                                   block_choice=choice)
    return out, expected


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("num_splits", [None, 1, 5])
def test_paged_attention_reads_only_the_chosen_blocks(dtype, num_splits):
    """QSA's block choice in the kernel = the reference's masked attention. Checked under TRITON_INTERPRET=1 on
    CPU tensors too (chosen_blocks_attention("cpu", ...))."""
    out, expected = chosen_blocks_attention("cuda", dtype, num_splits)
    assert rel_err(out, expected) < (1e-2 if dtype == torch.bfloat16 else 5e-3)


def test_block_choice_reference_reads_chosen_blocks_past_the_budget():
    """The reference's visibility under a choice: causal below the budget; past it the chosen complete blocks
    and the tokens after the last complete block, nothing else."""
    from strata.kernels.paged_attention import block_choice_visible

    ratio, top_blocks = 4, 2
    chosen = torch.zeros(2, 8, dtype=torch.uint8)
    chosen[1, [0, 2]] = 1
    q_pos = torch.tensor([10, 13])              # 2 complete blocks (dense), then 3 (sparse: blocks 0 and 2)
    visible = block_choice_visible(q_pos, 14, (chosen, ratio, top_blocks), chosen)
    assert visible[0].tolist() == [True] * 11 + [False] * 3
    assert visible[1].nonzero()[:, 0].tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13]


def host_tier_attention(dtype, int8, num_splits, device, layout="separate"):
    """The paged attention kernel on a problem whose sequences have their first blocks (0 .. all full ones)
    in a host tier (pinned on CUDA; plain CPU tensors under TRITON_INTERPRET=1) -> (that output, the
    all-resident kernel's, the reference's). The device copies of moved blocks are overwritten with NaN and
    their table columns set to -1, so a row read from the wrong tier shows. `layout`: "separate" host
    tables (eager steps), "merged" (a CUDA graph's: the host blocks in the block table's first columns,
    the one table passed as both) or "none" (the host tier passed, no block in it: a graph's padding)."""
    from strata.kernels.paged_attention import paged_attention

    windows, block_size, (num_heads, num_kv_heads, head_dim) = [(300, 1), (17, 4), (90, 16), (64, 8), (0, 1)], 16, \
        (8, 2, 64)
    generator = torch.Generator().manual_seed(26)
    q, k_cache, v_cache, block_tables, tables, seq_lens, qsl = paged_problem(
        windows, block_size, num_heads, num_kv_heads, head_dim, dtype, device, generator)
    kv_scales = None
    if int8:
        (k_cache, k_scale), (v_cache, v_scale) = quantize_int8_ref(k_cache * 5), quantize_int8_ref(v_cache * 5)
        kv_scales = (k_scale, v_scale)
    kwargs = dict(max_query_len=16, num_splits=num_splits, kv_scales=kv_scales)
    resident = paged_attention(q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.125, **kwargs)
    expected = paged_attention_ref(q.float(), k_cache if int8 else k_cache.float(),
                                   v_cache if int8 else v_cache.float(), block_tables, seq_lens, qsl, 0.125, kv_scales)
    counts = [0 if layout == "none" else min(c // block_size, [19, 1, 5, 4, 0][i])  # full, computed blocks
              for i, (c, _) in enumerate(windows)]
    host_ids = torch.randperm(sum(counts) + 2, generator=generator).tolist()
    host_tables, start = [], 0
    for n in counts:
        host_tables.append(host_ids[start:start + n])
        start += n
    pin = torch.device(device).type == "cuda"
    caches = [k_cache, v_cache, *(kv_scales or ())]
    host = [torch.zeros(len(host_ids), *c.shape[1:], dtype=c.dtype, pin_memory=pin) for c in caches]
    moved_tables = block_tables.clone()
    for i, (table, ids) in enumerate(zip(tables, host_tables)):
        for column, host_block in enumerate(ids):
            for device_cache, host_cache in zip(caches, host):
                host_cache[host_block] = device_cache[table[column]].cpu()
                device_cache[table[column]] = float("nan") if device_cache.is_floating_point() else 127
            moved_tables[i, column] = -1
    width = max(counts)
    host_block_tables = torch.tensor([t + [0] * (width - len(t)) for t in host_tables], device=device)
    if layout != "separate":
        for i, ids in enumerate(host_tables):
            moved_tables[i, :len(ids)] = torch.tensor(ids, dtype=moved_tables.dtype)
        host_block_tables = moved_tables
    out = paged_attention(q, k_cache, v_cache, moved_tables, seq_lens, qsl, 0.125,
                          host_kv=(host[0], host[1], tuple(host[2:]) or None), host_block_tables=host_block_tables,
                          host_block_counts=torch.tensor(counts, device=device), **kwargs)
    return out, resident, expected


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("num_splits", [None, 1, 5])
@pytest.mark.parametrize("layout", ["separate", "merged", "none"])
def test_paged_attention_reads_host_blocks_over_pcie(dtype, int8, num_splits, layout):
    """KV beyond VRAM: with each sequence's first blocks in pinned host memory (read through unified
    addressing) the kernel gives the all-resident kernel's output bit for bit (the same rows in the same
    tiles and splits), near the reference; so does a CUDA graph's one table holding both tiers' blocks, and
    the host variant with no block in the host tier. Checked under TRITON_INTERPRET=1 on CPU tensors
    (float32 and float16, 16-bit and int8 caches, one, five and the default splits, every layout): bit-equal
    there too."""
    out, resident, expected = host_tier_attention(dtype, int8, num_splits, "cuda", layout)
    assert torch.equal(out, resident)
    assert rel_err(out, expected) < (1e-2 if dtype == torch.bfloat16 else 5e-3)


# ---- copies by kernels between pinned memory and the device ---------------------------------------

def test_flat_words_views_whole_words_and_refuses_the_rest():
    """A tensor's bytes as 32-bit words (float8 included); odd byte counts and non-contiguous views get None."""
    t = torch.randn(5, 4, 6).to(torch.float8_e4m3fn)
    w = flat_words(t)
    assert w.shape == (30,) and w.dtype == torch.int32
    assert torch.equal(w.view(torch.uint8), t.view(torch.uint8).reshape(-1))
    assert flat_words(torch.zeros(3, 5, dtype=torch.uint8)) is None
    assert flat_words(torch.zeros(4, 4).t()) is None


# ---- gated delta rule -----------------------------------------------------------------------------

def delta_problem(query_lens, heads, max_slots, dtype, device, generator):
    num_k_heads, num_v_heads, dim_k, dim_v = heads
    num_tokens = sum(query_lens)

    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    def unit(x):
        return x / x.norm(dim=-1, keepdim=True)

    q, k = unit(randn(num_tokens, num_k_heads, dim_k)), unit(randn(num_tokens, num_k_heads, dim_k))
    v = randn(num_tokens, num_v_heads, dim_v)
    g = -torch.nn.functional.softplus(randn(num_tokens, num_v_heads)) * 0.5     # log decay <= 0
    beta = torch.rand(num_tokens, num_v_heads, generator=generator)
    pool = randn(max_slots, num_v_heads, dim_k, dim_v) * 0.1
    slots = torch.randperm(max_slots, generator=generator)[:len(query_lens)]
    has_initial = torch.rand(len(query_lens), generator=generator) < 0.7
    tensors = [q.to(dtype), k.to(dtype), v.to(dtype), g, beta, pool, slots, ragged(query_lens), has_initial]
    return [t.to(device) for t in tensors]


def test_gdn_ref_matches_model_recurrence():
    generator = torch.Generator().manual_seed(2)
    query_lens = [3, 1, 5]
    q, k, v, g, beta, pool, slots, qsl, has_initial = delta_problem(
        query_lens, (2, 4, 8, 6), 5, torch.float32, "cpu", generator)
    before = pool.clone()
    out, all_states = gdn_recurrent_ref(q, k, v, g, beta, pool, slots, qsl, has_initial)
    for i, n in enumerate(query_lens):
        s, e = qsl[i].item(), qsl[i + 1].item()
        initial = before[slots[i]] if has_initial[i] else torch.zeros_like(before[0])
        exp_out, exp_states = recurrent_gated_delta_rule(
            q[None, s:e].repeat_interleave(2, 2), k[None, s:e].repeat_interleave(2, 2), v[None, s:e],
            g[None, s:e], beta[None, s:e], initial[None], return_all_states=True)
        assert torch.allclose(out[s:e], exp_out[0], atol=1e-5)
        assert torch.allclose(all_states[s:e], exp_states[0], atol=1e-5)
        assert torch.allclose(pool[slots[i]], exp_states[0, -1], atol=1e-5)
    untouched = [r for r in range(5) if r not in slots.tolist()]
    assert torch.equal(pool[untouched], before[untouched])


def test_conv_ref_matches_model():
    generator = torch.Generator().manual_seed(3)
    windows = [(4, 2), (0, 5), (9, 1)]
    channels, width = 10, 4
    x = torch.randn(8, channels, generator=generator)
    weight = torch.randn(channels, width, generator=generator)
    conv_state = torch.randn(4, channels, width - 1, generator=generator)
    scheduled = [ScheduledSlot(slot_id=slot, num_computed_tokens=c, num_new_tokens=n, new_block_ids=[],
                               token_ids=[0] * n) for slot, (c, n) in zip([2, 0, 3], windows)]
    step = build_inputs(scheduled, {s: [0, 1] for s in range(4)}, 16, {}, {}, "cpu", keep_window_states=True)
    expected_state = conv_state.clone()
    expected, expected_window = causal_conv1d_ragged(x, weight, expected_state, step.ctx)
    out, window = causal_conv1d_update_ref(x, weight, conv_state, step.ctx.state_slot_ids, step.ctx.query_start_loc,
                                           step.ctx.has_initial_state, keep_window_states=True)
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.equal(window, expected_window)
    assert torch.equal(conv_state, expected_state)


GDN_HEADS = [(16, 32, 128, 128), (2, 6, 48, 40), (4, 4, 64, 64)]  # Hk, Hv, Dk, Dv
GDN_WINDOWS = [[1], [1] * 7, [4, 1, 16, 2, 9], [16, 16, 3], [200, 1, 37]]  # the last: prompt chunks too


@gpu
@pytest.mark.parametrize("heads", GDN_HEADS)
@pytest.mark.parametrize("query_lens", GDN_WINDOWS)
@pytest.mark.parametrize("keep_all_states", [True, False])
def test_gdn_recurrent_matches_ref(heads, query_lens, keep_all_states):
    from strata.kernels.gdn import gdn_recurrent

    generator = torch.Generator().manual_seed(sum(query_lens) + heads[1])
    q, k, v, g, beta, pool, slots, qsl, has_initial = delta_problem(
        query_lens, heads, 12, torch.bfloat16, "cuda", generator)
    expected_pool = pool.clone()
    expected, expected_states = gdn_recurrent_ref(q, k, v.float(), g, beta, expected_pool, slots, qsl, has_initial)
    out, all_states = gdn_recurrent(q, k, v, g, beta, pool, slots, qsl, has_initial, keep_all_states=keep_all_states)
    assert out.dtype == v.dtype and rel_err(out, expected) < 1e-2
    assert rel_err(pool, expected_pool) < 1e-4   # written rows and untouched rows alike
    if keep_all_states:  # every row but each window's last (its state is the pool row's, checked above)
        kept = [t for s, e in zip(qsl[:-1].tolist(), qsl[1:].tolist()) for t in range(s, e - 1)]
        assert rel_err(all_states[kept], expected_states[kept]) < 1e-4
    else:
        assert all_states is None


@gpu
@pytest.mark.parametrize("channels, width", [(8192, 4), (300, 4), (33, 2)])
@pytest.mark.parametrize("query_lens", [[1], [1] * 5, [4, 1, 16, 2], [130, 1, 60]])
@pytest.mark.parametrize("keep_window_states, silu", [(True, False), (False, True)])
def test_causal_conv1d_update_matches_ref(channels, width, query_lens, keep_window_states, silu):
    from strata.kernels.gdn import causal_conv1d_update

    generator = torch.Generator().manual_seed(channels + len(query_lens))
    num_tokens, max_slots = sum(query_lens), 8

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(device="cuda", dtype=torch.bfloat16)

    x, weight, conv_state = randn(num_tokens, channels), randn(channels, width), randn(max_slots, channels, width - 1)
    slots = torch.randperm(max_slots, generator=generator)[:len(query_lens)].cuda()
    has_initial = (torch.arange(len(query_lens)) % 3 != 1).cuda()
    qsl = ragged(query_lens, "cuda")
    expected_state = conv_state.clone()
    expected, expected_window = causal_conv1d_update_ref(x, weight, expected_state, slots, qsl, has_initial,
                                                         keep_window_states, silu)
    out, window = causal_conv1d_update(x, weight, conv_state, slots, qsl, has_initial, keep_window_states, silu)
    assert rel_err(out, expected) < 1e-2
    assert torch.equal(conv_state, expected_state)   # copies of inputs: exact
    if keep_window_states:
        assert torch.equal(window, expected_window)


def check_padded_prompts_stop_at_real_lengths(device: str) -> None:
    """Prompts padded in place to one graph length (real lengths 5, 8 and 1 of 8): the recurrent and
    conv kernels given real_lens leave the states a run on the real tokens alone leaves, give the real
    rows its outputs, and zeros (recurrent) on the padding rows."""
    from strata.kernels.gdn import causal_conv1d_update, gdn_recurrent

    generator = torch.Generator().manual_seed(5)
    real, n = [5, 8, 1], 8
    q, k, v, g, beta, pool, slots, qsl, has_initial = delta_problem([n] * 3, (2, 4, 32, 16), 6, torch.float32,
                                                                    device, generator)
    rows = torch.tensor([i * n + t for i, m in enumerate(real) for t in range(m)], device=device)
    padding = torch.tensor([i * n + t for i, m in enumerate(real) for t in range(m, n)], device=device)
    real_lens = torch.tensor(real, device=device)
    expected_pool = pool.clone()
    expected, _ = gdn_recurrent_ref(q[rows], k[rows], v[rows], g[rows], beta[rows], expected_pool, slots,
                                    ragged(real, device), has_initial, keep_all_states=False)
    out, _ = gdn_recurrent(q, k, v, g, beta, pool, slots, qsl, has_initial, keep_all_states=False, real_lens=real_lens)
    assert rel_err(out[rows], expected) < 1e-4 and not out[padding].any()
    assert rel_err(pool, expected_pool) < 1e-4

    x = torch.randn(3 * n, 40, generator=generator).to(device)
    weight = torch.randn(40, 4, generator=generator).to(device)
    conv_state = torch.randn(6, 40, 3, generator=generator).to(device)
    expected_state = conv_state.clone()
    expected, _ = causal_conv1d_update_ref(x[rows], weight, expected_state, slots, ragged(real, device), has_initial,
                                           silu=True)
    out, _ = causal_conv1d_update(x, weight, conv_state, slots, qsl, has_initial, silu=True, block_c=16,
                                  real_lens=real_lens)
    assert rel_err(out[rows], expected) < 1e-5
    assert torch.equal(conv_state, expected_state)


@gpu
def test_gdn_kernels_stop_at_the_real_lengths_of_padded_prompts():
    check_padded_prompts_stop_at_real_lengths("cuda")


def test_refs_import_without_triton():
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None; "
            "import strata.kernels.fused_moe, strata.kernels.paged_attention, strata.kernels.gdn")
    root = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


class _KernelsOnTheCpu:
    """strata.model.ops as the Gated DeltaNet layer sees it, with its kernels taken on CPU tensors (Triton's
    interpreter): the layer's own dispatch picks the CUDA path; its projections keep theirs."""

    def __getattr__(self, name):
        from strata.model import ops

        return getattr(ops, name)

    @staticmethod
    def kernels_on(t: torch.Tensor) -> bool:
        return True


def check_gdn_layer_short_windows_match_the_torch_path(device: str, grouped: bool, activation: str,
                                                        tiled: bool, prompt_after: int = 0,
                                                        monkeypatch=None) -> None:
    """A Gated DeltaNet layer's short-window path (conv reading the projection in place, the recurrence
    finishing the L2 norms and gates, the gated norm reading z in place) against the layer's torch path on
    the CPU: outputs, the states written back, and the per-token states of verification windows.
    `prompt_after`: a fresh prompt of this many (> 16) tokens after the windows, an eager step the kernels take
    in two recurrences (leading_windows), keeping the windows' per-token states only. device "cpu" (with
    `monkeypatch`): the kernels in Triton's interpreter."""
    from strata.config import ModelConfig
    from strata.model import gated_delta_net
    from strata.model.gated_delta_net import GatedDeltaNet

    cfg = ModelConfig(architecture="x", vocab_size=8, hidden_size=48, intermediate_size=8, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=8, linear_num_key_heads=2,
                      linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=8,
                      linear_conv_kernel_dim=4, linear_value_heads_tiled=tiled)
    torch.manual_seed(7)
    layer = GatedDeltaNet(cfg, 0, grouped_qkvz=grouped, gate_activation=activation)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    windows = [(4, 1), (0, 3), (9, 4)]  # (computed, new): decode, a fresh prompt, a verification window
    windows += [(0, prompt_after)] if prompt_after else []
    scheduled = _scheduled(windows)
    tables = {s: [0, 1] for s in range(4)}
    hidden = torch.randn(sum(n for _, n in windows), 48)
    conv_shape, ssm_shape = layer.state_shapes()
    states = (torch.randn(4, *conv_shape), torch.randn(4, *ssm_shape) * 0.1)
    results = []
    for run, run_device in enumerate(("cpu", device)):
        if run and device == "cpu":
            monkeypatch.setattr(gated_delta_net, "ops", _KernelsOnTheCpu())
        caches = {0: tuple(s.clone().to(run_device) for s in states)}
        step = build_inputs(scheduled, tables, 16, {}, caches, run_device, keep_window_states=True)
        with torch.no_grad():
            out = layer.to(run_device)(hidden.to(run_device), step.ctx)
        window_conv, window_ssm = step.ctx.scratch.window_states[0]
        # the short windows' rows but each one's last (a longer prompt's are not kept; the kernel leaves a window's
        # last row unwritten, its state being the pool row's, which the comparison holds)
        window_ssm = window_ssm[[1, 2, 4, 5, 6]]
        results.append([t.cpu() for t in (out, *caches[0], window_conv, window_ssm)])
    for expected, got in zip(*results):
        assert rel_err(got, expected) < 1e-4


@gpu
@pytest.mark.parametrize("grouped, activation, tiled", [(True, "silu", False), (False, "sigmoid", True),
                                                        (False, "silu", False)])
def test_gdn_layer_short_windows_match_the_torch_path(grouped, activation, tiled):
    check_gdn_layer_short_windows_match_the_torch_path("cuda", grouped, activation, tiled)


@gpu
@pytest.mark.parametrize("grouped", [True, False])
def test_gdn_layer_windows_beside_a_longer_prompt_match_the_torch_path(grouped):
    check_gdn_layer_short_windows_match_the_torch_path("cuda", grouped, "silu", False, prompt_after=21)


@pytest.mark.skipif(__import__("os").environ.get("TRITON_INTERPRET") != "1",
                    reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")
@pytest.mark.parametrize("grouped, activation, tiled, prompt_after", [(True, "silu", False, 0),
                                                                      (False, "sigmoid", True, 0),
                                                                      (True, "silu", False, 21),
                                                                      (False, "silu", False, 21)])
def test_gdn_layer_kernels_interpreted(grouped, activation, tiled, prompt_after, monkeypatch):
    check_gdn_layer_short_windows_match_the_torch_path("cpu", grouped, activation, tiled, prompt_after, monkeypatch)


def test_leading_windows_keep_only_windows_that_come_first():
    """Which sequences of a verification step keep per-token states in the kernels' two recurrences: the
    leading short ones, only when every later one is longer (else the torch path, None)."""
    from strata.model.gated_delta_net import leading_windows

    def ctx(lens, keep=True):
        return SimpleNamespace(query_lens=tuple(lens), keep_window_states=keep)

    assert leading_windows(ctx([4, 1, 4, 40])) == 3
    assert leading_windows(ctx([4, 40, 30])) == 1
    assert leading_windows(ctx([4, 40, 4])) is None        # a window after a prompt chunk
    assert leading_windows(ctx([40, 4])) is None
    assert leading_windows(ctx([4, 4])) is None            # all short: one recurrence
    assert leading_windows(ctx([4, 40], keep=False)) is None
