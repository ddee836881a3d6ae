"""packed_q8 (packed GGUF rows times 8-bit activations, integer dot products): the activation rounding in
torch on the CPU; on the GPU (and in Triton's interpreter on the CPU with TRITON_INTERPRET=1, small shapes) the
kernels against gguf's dequantization times the rounded activations (float32 summation order apart), and the
rounding's error against unrounded activations."""

from __future__ import annotations

import os

import pytest
import torch

from test_packed_gemv import random_blocks  # this folder's module by name: an installed `kernels` package (transformers >= 5.25 needs one) shadows tests/kernels
from strata.kernels import packed_q8, q8_rounding
from strata.kernels.gguf_blocks import dequantize_ref
from strata.kernels.packed_gemv import (IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K,
                                       Q8_0, packed_gemv_ref)
from strata.kernels.packed_iquants import IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")
IQ_TYPES = [IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M]
Q8_TYPES = [Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, *IQ_TYPES]


def test_activation_rounding_keeps_each_value_within_half_a_step():
    """Per 32 values: |x - dx * q| <= dx / 2 with dx = max|x| / 127, the largest value exact, all-zero blocks
    zero, and the sums per 16 the integers' sums."""
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(0)) * torch.logspace(-3, 2, 512)
    x[1, 32:64] = 0
    q, dx, sums = q8_rounding.quantize_ref(x)
    back = q8_rounding.dequantize_activations(q, dx)
    step = dx.repeat_interleave(32, dim=1)
    assert torch.all((x - back).abs() <= step / 2 * (1 + 1e-6))
    assert torch.all(q[1, 32:64] == 0) and torch.all(dx[1, 1] == 0)
    peak = x.reshape(3, 16, 32).abs().argmax(dim=2)
    assert torch.equal(q.reshape(3, 16, 32).gather(2, peak[..., None]).abs().squeeze(2)[dx > 0],
                       torch.full_like(dx[dx > 0], 127, dtype=torch.int8))
    assert torch.equal(sums, q.float().reshape(3, 32, 16).sum(dim=2))


def test_supports_rows_of_whole_units():
    """Q2_K / Q3_K / Q4_K / Q5_K / Q6_K and i-quant rows of whole superblocks, the 32-value types rows of whole
    128-value units; rows may start two bytes into a word except Q2_K's, Q4_K's, Q5_K's and IQ4_XS's."""
    assert packed_q8.supports(Q4_K, 512, torch.zeros(4, 288, dtype=torch.uint8))
    assert packed_q8.supports(Q6_K, 768, torch.zeros(4, 630, dtype=torch.uint8))
    assert packed_q8.supports(Q8_0, 640, torch.zeros(4, 680, dtype=torch.uint8))
    assert packed_q8.supports(Q5_0, 640, torch.zeros(3, 440, dtype=torch.uint8))
    assert not packed_q8.supports(Q8_0, 96, torch.zeros(4, 102, dtype=torch.uint8))
    assert not packed_q8.supports(Q4_K, 320, torch.zeros(4, 180, dtype=torch.uint8))
    assert packed_q8.supports(Q5_K, 512, torch.zeros(4, 352, dtype=torch.uint8))
    assert not packed_q8.supports(Q5_K, 256, torch.zeros(4, 178, dtype=torch.uint8)[:, :176])
    assert packed_q8.supports(IQ4_XS, 512, torch.zeros(4, 272, dtype=torch.uint8))
    assert not packed_q8.supports(IQ4_XS, 256, torch.zeros(4, 138, dtype=torch.uint8)[:, :136])
    assert packed_q8.supports(IQ4_NL, 384, torch.zeros(4, 218, dtype=torch.uint8)[:, :216])
    assert packed_q8.row_bytes(IQ4_XS, 512) == 272 and packed_q8.row_bytes(IQ4_NL, 384) == 216
    assert not packed_q8.supports(Q4_K, 256, torch.zeros(4, 146, dtype=torch.uint8)[:, :144])
    assert not packed_q8.supports(Q6_K, 256, torch.zeros(4, 211, dtype=torch.uint8)[:, :210])
    assert packed_q8.supports(Q2_K, 512, torch.zeros(4, 168, dtype=torch.uint8))
    assert not packed_q8.supports(Q2_K, 256, torch.zeros(4, 86, dtype=torch.uint8)[:, :84])
    assert not packed_q8.supports(Q2_K, 320, torch.zeros(4, 105, dtype=torch.uint8))
    assert packed_q8.supports(Q3_K, 768, torch.zeros(4, 330, dtype=torch.uint8))
    assert packed_q8.supports(Q3_K, 256, torch.zeros(4, 112, dtype=torch.uint8)[:, :110])
    assert not packed_q8.supports(Q3_K, 256, torch.zeros(4, 111, dtype=torch.uint8)[:, :110])
    assert packed_q8.row_bytes(Q5_1, 640) == 480 and packed_q8.row_bytes(Q6_K, 512) == 420
    assert packed_q8.row_bytes(Q2_K, 512) == 168 and packed_q8.row_bytes(Q3_K, 768) == 330
    for qtype, superblock in ((IQ2_XXS, 66), (IQ2_XS, 74), (IQ2_S, 82), (IQ3_XXS, 98), (IQ3_S, 110), (IQ1_S, 50),
                              (IQ1_M, 56)):
        assert packed_q8.row_bytes(qtype, 768) == 3 * superblock
        assert packed_q8.supports(qtype, 768, torch.zeros(4, 3 * superblock, dtype=torch.uint8))
        assert packed_q8.supports(qtype, 256, torch.zeros(4, superblock + 2, dtype=torch.uint8)[:, :superblock])
        assert not packed_q8.supports(qtype, 640, torch.zeros(4, 3 * superblock, dtype=torch.uint8))


def rounded(x: torch.Tensor) -> torch.Tensor:
    """The activations the kernels multiply: x rounded to 8 bits per 32, back in float32 (the CUDA
    quantize kernel where a GPU is present: it is checked against quantize_ref on its own)."""
    q, dx, _ = q8_rounding.quantize(x.cuda()) if torch.cuda.is_available() else q8_rounding.quantize_ref(x.float())
    return q8_rounding.dequantize_activations(q.cpu(), dx.cpu())


@gpu
def test_quantize_kernel_matches_the_reference():
    """Bit for bit: IEEE divisions in the kernel, the same round-half-away-from-zero."""
    x = torch.randn(5, 768, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    x[2, :32] = 0
    for got, want in zip(q8_rounding.quantize(x.cuda()), q8_rounding.quantize_ref(x)):
        assert torch.equal(got.cpu(), want)


@gpu
@pytest.mark.parametrize("heads, activation", [(32, "sigmoid"), (48, "silu"), (3, "silu")])
def test_gated_norm_rounds_its_output_as_quantize_does(heads, activation):
    """gated_rms_norm(quantize=True) (a Gated DeltaNet's output norm before a packed out_proj) returns the same
    rows and attaches quantize_ref of them bit for bit; head counts that leave a program's last heads masked
    (48 over programs of 32, 3 in a program of 4) included."""
    from strata.kernels.rms_norm import gated_rms_norm

    gen = torch.Generator().manual_seed(heads)
    x = torch.randn(3, heads, 128, generator=gen).to(torch.bfloat16).cuda()
    gate = torch.randn(3, heads * 128, generator=gen).to(torch.bfloat16).cuda()
    weight = torch.rand(128, generator=gen).to(torch.bfloat16).cuda()
    out = gated_rms_norm(x, gate, heads, 0, weight, 1e-6, activation, quantize=True)
    assert torch.equal(out, gated_rms_norm(x, gate, heads, 0, weight, 1e-6, activation))
    attached = q8_rounding.quantize(out)
    assert attached[0].data_ptr() == out.q8_rows[0].data_ptr()
    for got, want in zip(attached, q8_rounding.quantize_ref(out.cpu())):
        assert torch.equal(got.cpu(), want)


@gpu
@pytest.mark.parametrize("dim", [2048, 2560])
@pytest.mark.parametrize("form", ["plain", "residual", "topk_sum"])
def test_norm_rounds_its_output_as_quantize_does(dim, form):
    """rms_norm(quantize=True) attaches quantize_ref of the very rows it returns (bit for bit, a width
    that is not a power of two included); quantize hands them back without a launch while the rows are
    unchanged, and rounds afresh once they change in place."""
    from strata.kernels import rms_norm as norms

    gen = torch.Generator().manual_seed(dim)
    x = torch.randn(3, dim, generator=gen).to(torch.bfloat16).cuda()
    weight = torch.rand(dim, generator=gen).cuda()
    residual = torch.randn(3, dim, generator=gen).to(torch.bfloat16).cuda()
    if form == "topk_sum":
        partials = torch.randn(3, 4, dim, generator=gen).cuda()
        out, _ = norms.rms_norm_topk_sum(partials, None, weight, 1e-6, True, residual, torch.bfloat16, quantize=True)
        plain, _ = norms.rms_norm_topk_sum(partials, None, weight, 1e-6, True, residual, torch.bfloat16)
    else:
        res = residual if form == "residual" else None
        out, _ = norms.rms_norm(x, weight.to(torch.bfloat16), 1e-6, False, res, quantize=True)
        plain, _ = norms.rms_norm(x, weight.to(torch.bfloat16), 1e-6, False, res)
    assert torch.equal(out, plain)
    attached = q8_rounding.quantize(out)
    assert attached[0].data_ptr() == out.q8_rows[0].data_ptr()
    for got, want in zip(attached, q8_rounding.quantize_ref(out.cpu())):
        assert torch.equal(got.cpu(), want)
    with torch.inference_mode():  # (the engine's steps: tensors without a version counter)
        inferred, _ = norms.rms_norm(x, weight.to(torch.bfloat16), 1e-6, False, None, quantize=True)
        assert q8_rounding.quantize(inferred)[0] is inferred.q8_rows[0]
    kept, plain = x.clone(), x.clone()
    q8_rounding.keep_rounding(kept)  # a producer's promise: the first rounding serves every later reader
    assert q8_rounding.quantize(kept)[0] is q8_rounding.quantize(kept)[0]
    assert q8_rounding.quantize(plain)[0] is not q8_rounding.quantize(plain)[0]
    out.mul_(2)
    fresh = q8_rounding.quantize(out)
    assert fresh[0].data_ptr() != attached[0].data_ptr()
    for got, want in zip(fresh, q8_rounding.quantize_ref(out.cpu())):
        assert torch.equal(got.cpu(), want)


# Beside each shape's default_config tiling: 8 rows of W with a superblock a step, one row of W with 8 (the narrow
# grid's corner, gemv_rows_sweep.py GEMV_GRID=narrow) and session 57's one-warp tilings with 4 superblocks a step,
# which the defaults take only for shapes too large for these tests (o_proj at one row, q_proj / o_proj at 3-4).
TILINGS = [None, dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=4), dict(BLOCK_N=1, SUPERBLOCKS=8, num_warps=4),
           dict(BLOCK_N=1, SUPERBLOCKS=4, num_warps=1), dict(BLOCK_N=4, SUPERBLOCKS=4, num_warps=1)]


@gpu
@pytest.mark.parametrize("qtype", Q8_TYPES)
@pytest.mark.parametrize("rows, n, k", [(1, 33, 256), (1, 4096, 2048), (3, 64, 768), (5, 7, 2560), (8, 4096, 2048),
                                        (16, 40, 512)])
@pytest.mark.parametrize("config", TILINGS)
def test_gemv_equals_the_dequantized_weight_times_the_rounded_activations(qtype, rows, n, k, config):
    """Exact integer sums scaled in float32: within float32 summation error of gguf's weights times the
    rounded x; against unrounded x within 1 % of |W| @ |x| (the rounding, as in llama.cpp)."""
    check_gemv(qtype, rows, n, k, config, "cuda")


@interpreted
@pytest.mark.parametrize("qtype", Q8_TYPES)
@pytest.mark.parametrize("rows, n, k", [(1, 5, 256), (3, 9, 768), (8, 9, 512)])
@pytest.mark.parametrize("config", TILINGS)
def test_gemv_in_the_interpreter(qtype, rows, n, k, config):
    """The GPU test's bounds on the CPU: one row (per-word sums) and three (integer sums per group first), odd
    superblocks (Q3_K's and Q6_K's then start two bytes into a word), a last program of masked rows; eight rows;
    each at its default tiling and at TILINGS' others."""
    check_gemv(qtype, rows, n, k, config, "cpu")


@gpu
@pytest.mark.parametrize("qtype", [Q4_K, Q5_K, Q6_K, Q8_0, Q3_K])
@pytest.mark.parametrize("rows, n, k", [(1, 33, 256), (1, 4096, 2048), (3, 64, 768), (8, 4096, 2048)])
@pytest.mark.parametrize("config", [dict(ISUM=2), dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=4, ISUM=2)])
def test_gemv_with_a_groups_words_in_a_loop(qtype, rows, n, k, config):
    """ISUM 2 (q8_steps.k_step: Q4_K's, Q5_K's and Q6_K's words of a group in a loop, the other types' integer group
    sums) at one row too: the same bounds."""
    check_gemv(qtype, rows, n, k, config, "cuda")


@interpreted
@pytest.mark.parametrize("qtype", [Q4_K, Q5_K, Q6_K])
@pytest.mark.parametrize("rows, n, k", [(1, 5, 256), (3, 9, 768), (8, 9, 512)])
def test_gemv_with_a_groups_words_in_a_loop_in_the_interpreter(qtype, rows, n, k):
    check_gemv(qtype, rows, n, k, dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=4, ISUM=2), "cpu")


def check_gemv(qtype: int, rows: int, n: int, k: int, config: dict | None, device: str,
               kernel=packed_q8.packed_gemv_q8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`kernel` (packed_gemv_q8's contract) against the reference on the rounded x and on x itself; returns its
    (x, blocks, out) for further checks."""
    blocks = random_blocks(qtype, n, k, seed=rows * n + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
    out = kernel(x.to(device), blocks.to(device), qtype, n, k, config=config).cpu()
    weight_abs = packed_gemv_ref(torch.eye(k), blocks, qtype, n, k).abs()             # |W|.T [K, N]
    exact = packed_gemv_ref(rounded(x), blocks, qtype, n, k)
    assert ((out - exact).abs() / (rounded(x).abs() @ weight_abs).clamp_min(1e-3)).max() < 1e-5
    unrounded = packed_gemv_ref(x, blocks, qtype, n, k)
    assert ((out - unrounded).abs() / (x.float().abs() @ weight_abs).clamp_min(1e-3)).max() < 1e-2
    return x, blocks, out


@gpu
@pytest.mark.parametrize("qtype", [Q8_0, Q5_0])
def test_gemv_reads_blocks_two_bytes_into_a_word(qtype):
    """640-wide rows (Qwen4-Exp's expert down rows) of blocks of 34 / 22 bytes: odd blocks and odd rows
    start two bytes into a word."""
    blocks = random_blocks(qtype, 9, 640, seed=5)
    x = torch.randn(1, 640, generator=torch.Generator().manual_seed(5))
    out = packed_q8.packed_gemv_q8(x.cuda(), blocks.cuda(), qtype, 9, 640).cpu()
    scale = rounded(x).abs() @ packed_gemv_ref(torch.eye(640), blocks, qtype, 9, 640).abs()
    assert ((out - packed_gemv_ref(rounded(x), blocks, qtype, 9, 640)).abs() / scale).max() < 1e-5


@gpu
@pytest.mark.parametrize("qtype", [Q6_K, Q3_K, Q2_K, *IQ_TYPES])
def test_gemv_reads_rows_of_a_strided_view(qtype):
    """Rows spaced further apart than their bytes (a weight inside a wider buffer), Q6_K, Q3_K and the i-quants
    of odd superblocks (rows starting two bytes into a word), Q2_K rows 4 bytes apart."""
    check_strided_rows(qtype, "cuda")


@interpreted
@pytest.mark.parametrize("qtype", [Q6_K, Q3_K, Q2_K, *IQ_TYPES])
def test_strided_rows_in_the_interpreter(qtype):
    check_strided_rows(qtype, "cpu")


def check_strided_rows(qtype: int, device: str) -> None:
    blocks = random_blocks(qtype, 24, 768, seed=3)
    wide = torch.zeros(24, blocks.shape[1] + 4 if qtype == Q2_K else blocks.shape[1] + 2, dtype=torch.uint8)
    wide[:, :blocks.shape[1]] = blocks
    x = torch.randn(2, 768, generator=torch.Generator().manual_seed(3))
    out = packed_q8.packed_gemv_q8(x.to(device), wide.to(device)[:, :blocks.shape[1]], qtype, 24, 768).cpu()
    exact = packed_gemv_ref(rounded(x), blocks, qtype, 24, 768)
    # relative to |x| @ |W|: Q6_K's offset (sum q x - 32 sum x) cancels, so plain relative error is no measure
    scale = rounded(x).abs() @ packed_gemv_ref(torch.eye(768), blocks, qtype, 24, 768).abs()
    assert ((out - exact).abs() / scale).max() < 1e-5


def moe_reference(hidden, w13, qtype13, w2, qtype2, ids, weights) -> torch.Tensor:
    """[T, K, D] float32: each pair's routing weight times down(rounded(SiLU(gate) * up)) of rounded hidden,
    gguf's weights in float32 (the contract of moe_pairs_q8)."""
    act = gate_up_reference(hidden, w13, qtype13, ids)
    return down_reference(act, w2, qtype2, ids, weights)


def gate_up_reference(hidden, w13, qtype13, ids) -> torch.Tensor:
    """[T * K, I] float32: SiLU(gate) * up of each pair's expert on its token's rounded hidden (zeros for a
    skipped pair), the first launch of moe_pairs_q8."""
    top_k = ids.shape[1]
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    x = rounded(hidden)
    act = torch.zeros(ids.numel(), inter)
    for p, e in enumerate(ids.flatten().tolist()):
        if e >= 0:
            gate_up = dequantize_ref(w13[e], qtype13, dim) @ x[p // top_k]
            act[p] = torch.nn.functional.silu(gate_up[:inter]) * gate_up[inter:]
    return act


def down_reference(act, w2, qtype2, ids, weights) -> torch.Tensor:
    """[T, K, D] float32: each pair's routing weight times its expert's down projection of rounded act [T * K, I]
    (zeros for a skipped pair), the second launch of moe_pairs_q8."""
    tokens, top_k = ids.shape
    inter, x = act.shape[1], rounded(act)
    out = torch.zeros(tokens, top_k, w2.shape[1])
    for p, e in enumerate(ids.flatten().tolist()):
        if e >= 0:
            out[p // top_k, p % top_k] = weights[p // top_k, p % top_k] * (dequantize_ref(w2[e], qtype2, inter) @ x[p])
    return out


@gpu
@pytest.mark.parametrize("qtypes, inter", [((Q4_K, Q6_K), 768), ((Q6_K, Q4_K), 768), ((Q4_K, Q4_K), 768),
                                           ((Q4_K, Q8_0), 640), ((Q4_K, Q5_0), 640), ((Q8_0, Q8_0), 384),
                                           ((Q5_K, Q6_K), 768), ((Q2_K, Q3_K), 768), ((Q3_K, Q2_K), 768),
                                           ((IQ2_XXS, IQ3_XXS), 768), ((IQ2_XS, IQ3_S), 768), ((IQ2_S, Q4_K), 768),
                                           ((IQ3_S, IQ2_S), 768), ((IQ1_S, IQ1_M), 768), ((IQ1_M, Q6_K), 768),
                                           ((IQ4_XS, IQ4_XS), 768), ((IQ4_XS, IQ4_NL), 384), ((IQ4_NL, Q6_K), 768),
                                           ((MXFP4, MXFP4), 768), ((MXFP4, Q6_K), 768)])
@pytest.mark.parametrize("tokens", [1, 4, 48])
def test_moe_pairs_match_the_rounded_reference(qtypes, inter, tokens):
    """Experts in slots wider than they are (a padded view), a skipped pair (zeros), K = 768 down rows (odd
    Q6_K / Q3_K superblocks), Qwen4-Exp's 640-wide down rows in Q8_0 / Q5_0."""
    check_moe_pairs(qtypes, tokens, "cuda", dict(dim=512, inter=inter))


@gpu
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (Q4_K, Q4_K), (IQ2_XXS, IQ3_XXS), (IQ4_XS, IQ4_XS)])
@pytest.mark.parametrize("tokens", [1, 4])
def test_moe_pairs_read_in_place_from_pinned_host_memory(qtypes, tokens):
    """The offload's zero-copy experts: pinned host blocks read by the device over PCIe, one token at the host
    tilings (pair_configs' in_host)."""
    check_moe_pairs(qtypes, tokens, "cuda", dict(dim=512, inter=768), host_weights=True)


@interpreted
@pytest.mark.parametrize("qtypes", [(Q2_K, Q3_K), (Q3_K, Q2_K), (Q4_K, Q6_K), (IQ2_XXS, IQ3_XXS), (IQ2_XS, IQ3_S),
                                    (IQ3_S, IQ2_S), (IQ1_S, IQ1_M), (IQ4_XS, IQ4_NL), (IQ4_NL, IQ4_XS), (MXFP4, MXFP4)])
def test_moe_pairs_in_the_interpreter(qtypes):
    """A small case with wide programs (the interpreter runs programs one by one): one-superblock gate/up rows
    and 768-wide down rows (Q3_K's odd rows start two bytes into a word in both)."""
    check_moe_pairs(qtypes, 2, "cpu", dict(dim=256, inter=768, num=4, top_k=2), config=dict(BLOCK_N=64))


@gpu
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (Q5_K, Q4_K), (Q2_K, Q3_K)])
@pytest.mark.parametrize("tokens, tiling", [(1, dict(BLOCK_N=1, SUPERBLOCKS=8, num_warps=1)),
                                            (4, dict(BLOCK_N=16, SUPERBLOCKS=2, num_warps=1)),
                                            (48, dict(BLOCK_N=8, SUPERBLOCKS=4, num_warps=2))])
@pytest.mark.parametrize("isum", [1, 2])
def test_moe_pairs_with_integer_group_sums(qtypes, tokens, tiling, isum):
    """ISUM 1 (integer sums per scale group) and 2 (Q4_K's, Q5_K's and Q6_K's words of a group in a loop, the other
    types as 1; q8_steps.k_step): the same numbers as the float per-word scaling, up to float32 summation order."""
    check_moe_pairs(qtypes, tokens, "cuda", dict(dim=512, inter=768), config=dict(tiling, ISUM=isum))


@interpreted
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (Q5_K, Q4_K)])
@pytest.mark.parametrize("tiling", [dict(BLOCK_N=64, SUPERBLOCKS=1), dict(BLOCK_N=32, SUPERBLOCKS=2)])
@pytest.mark.parametrize("isum", [1, 2])
def test_moe_pairs_with_integer_group_sums_in_the_interpreter(qtypes, tiling, isum):
    """ISUM 1 and 2 in the interpreter: two superblocks a row, one or both a K step."""
    check_moe_pairs(qtypes, 2, "cpu", dict(dim=512, inter=256, num=4, top_k=2), config=dict(tiling, ISUM=isum))


def check_moe_pairs(qtypes: tuple[int, int], tokens: int, device: str, shape: dict, config: dict | None = None,
                    host_weights: bool = False):
    """moe_pairs_q8 equals its two launches run at its tilings (bit for bit), and each launch its reference on the
    same input: gate/up from rounded hidden, down from the rounding of the kernel's own act. (The whole against
    moe_reference differs where float32 sums in another order move an activation across a rounding step: one such
    step moved (IQ2_XS, IQ3_S) at 48 tokens by 1.07e-3 of the largest output on an H100.)"""
    from test_packed_moe import case, on_device

    hidden, w13, w2, ids, weights = case(*qtypes, tokens, **shape, pad=96, seed=tokens)
    place = (lambda w: on_device(w, "cpu").pin_memory()) if host_weights else (lambda w: on_device(w, device))
    args = (hidden.to(device), place(w13), qtypes[0], place(w2), qtypes[1], ids.to(device), weights.to(device))
    out = packed_q8.moe_pairs_q8(*args, config=config).cpu()
    cfg13, cfg2 = ({**c, **(config or {})} for c in packed_q8.pair_configs(tokens, qtypes[1], qtypes[0],
                                                                           in_host=host_weights))
    act = torch.empty(ids.numel(), w13.shape[1] // 2, device=device)                           # [P, I]
    packed_q8.gate_up_pairs(packed_q8.quantize(args[0]), args[1], qtypes[0], args[5].flatten(), ids.shape[1], act,
                            cfg13)
    partials = torch.empty(out.shape, device=device)                                          # [T, K, D]
    packed_q8.down_pairs(packed_q8.quantize(act), args[3], qtypes[1], args[5].flatten(), args[6].flatten(),
                         partials, cfg2)
    assert torch.equal(out, partials.cpu())
    assert torch.all(out[0, -1] == 0)
    # float32 sums in another order (a wrong scale or sign is off by 1e-2 or more)
    act, act_expected = act.cpu(), gate_up_reference(hidden, w13, qtypes[0], ids)
    assert (act - act_expected).abs().max() / act_expected.abs().max() < 1e-4
    expected = down_reference(act, w2, qtypes[1], ids, weights)
    assert (out - expected).abs().max() / expected.abs().max() < 1e-4
