"""packed_mmq (several tokens' routed experts over Q4_K / Q6_K blocks on int8 tensor cores) against
packed_q8.moe_pairs_q8, whose numbers it promises (same rounding of the activations, exact integer sums),
and against the float reference of the rounded activations (test_packed_q8.moe_reference)."""

from __future__ import annotations

import os

import pytest
import torch

from strata.kernels import packed_mmq, packed_q8
from strata.kernels.packed_gemv import Q4_K, Q5_0, Q5_K, Q6_K, Q8_0

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")


def test_supports_the_types_of_q4_k_m_experts():
    rows = torch.zeros(4, 288, dtype=torch.uint8)
    assert packed_mmq.supports(Q4_K, 512, rows) and packed_mmq.supports(Q6_K, 768, rows)
    assert packed_mmq.supports(Q8_0, 640, rows) and packed_mmq.supports(Q5_0, 640, rows)  # 128-value runs
    assert not packed_mmq.supports(Q8_0, 96, rows) and not packed_mmq.supports(Q4_K, 640, rows)


@gpu
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (Q4_K, Q4_K), (Q6_K, Q6_K), (Q4_K, Q8_0), (Q4_K, Q5_0)])
@pytest.mark.parametrize("tokens", [1, 8, 40])
@pytest.mark.parametrize("word_unpack", ["0", "1"])
def test_grouped_experts_equal_the_pairs(qtypes, tokens, word_unpack, monkeypatch):
    """Experts in padded slot views, a skipped pair (zeros), experts shared by several tokens (8 experts,
    top 4: blocks of BLOCK_M rows with padding) and blocks of a full 16 rows (40 tokens); quant bytes unpacked one
    at a time or four at a time in inline PTX (the default; STRATA_MMQ_WORD_UNPACK=0 keeps bytes)."""
    monkeypatch.setenv("STRATA_MMQ_WORD_UNPACK", word_unpack)
    from test_packed_moe import case, on_device  # this folder's modules (see test_packed_q8.py)
    from test_packed_q8 import moe_reference

    inter = 640 if qtypes[1] in (Q8_0, Q5_0) else 768  # Qwen4-Exp's down rows
    hidden, w13, w2, ids, weights = case(*qtypes, tokens, dim=512, inter=inter, pad=96, seed=tokens)
    args = (hidden.cuda(), on_device(w13), qtypes[0], on_device(w2), qtypes[1], ids.cuda(), weights.cuda())
    out = packed_mmq.moe_grouped_q8(*args).cpu()
    pairs = packed_q8.moe_pairs_q8(*args).cpu()
    assert torch.all(out[0, -1] == 0)
    scale = pairs.abs().max()
    assert ((out - pairs).abs().max() / scale) < 1e-4
    if tokens <= 8:  # the reference loops in Python
        expected = moe_reference(hidden, w13, qtypes[0], w2, qtypes[1], ids, weights)
        assert ((out - expected).abs().max() / expected.abs().max()) < 1e-3


@interpreted
@pytest.mark.parametrize("qtypes, inter", [((Q4_K, Q6_K), 256), ((Q6_K, Q4_K), 256), ((Q4_K, Q8_0), 640),
                                           ((Q4_K, Q5_0), 640)])
def test_grouped_experts_in_the_interpreter(qtypes, inter):
    """On the CPU, experts in padded slots and a skipped pair: the float reference of the rounded activations;
    Qwen4-Exp's 640-wide down rows in Q8_0 / Q5_0 too."""
    from test_packed_moe import case
    from test_packed_q8 import moe_reference

    hidden, w13, w2, ids, weights = case(*qtypes, 3, dim=256, inter=inter, num=4, top_k=2, pad=96, seed=4)
    out = packed_mmq.moe_grouped_q8(hidden.float(), w13, qtypes[0], w2, qtypes[1], ids, weights)
    assert torch.all(out[0, -1] == 0)
    expected = moe_reference(hidden, w13, qtypes[0], w2, qtypes[1], ids, weights)
    assert ((out - expected).abs().max() / expected.abs().max()) < 1e-3


def check_linear(qtype: int, rows: int, n: int, k: int, device: str, config: dict | None = None) -> None:
    """linear_q8 within float32 summation error of gguf's weights times the rounded x, as the 8-bit GEMV
    (test_packed_q8.check_gemv: rows of 16-row blocks, a last block and a last column block partly masked), and in
    a wider output's columns in bf16 too."""
    from test_packed_q8 import check_gemv

    x, blocks, out = check_gemv(qtype, rows, n, k, config, device, kernel=packed_mmq.linear_q8)
    wide = torch.zeros(rows, n + 8, dtype=torch.bfloat16, device=device)
    packed_mmq.linear_q8(x.to(device), blocks.to(device), qtype, n, k, config=config, out=wide[:, 3:3 + n])
    in_place = wide[:, 3:3 + n].cpu().float()
    assert ((in_place - out).abs() <= out.abs() * 2 ** -7).all() and not wide[:, :3].any()  # one bf16 step


@gpu
@pytest.mark.parametrize("qtype", [Q4_K, Q6_K, Q8_0, Q5_0])
@pytest.mark.parametrize("rows, n, k, split_k", [(1, 70, 512, 1), (8, 4096, 2048, 1), (19, 130, 768, 1),
                                                 (40, 64, 2560, 1), (8, 4096, 2048, 4), (5, 130, 512, 2)])
def test_linear_equals_the_dequantized_weight_times_the_rounded_activations(qtype, rows, n, k, split_k):
    if not packed_mmq.supports(qtype, k, torch.zeros(1, 1, dtype=torch.uint8)):
        pytest.skip("K not a whole number of the type's units")
    check_linear(qtype, rows, n, k, "cuda", config=dict(SPLIT_K=split_k))


@gpu
@pytest.mark.parametrize("qtype", [Q4_K, Q6_K])
@pytest.mark.parametrize("word_unpack", ["0", "1"])
def test_linear_equals_the_8_bit_gemv(qtype, word_unpack, monkeypatch):
    """The GEMV kernel's numbers (same rounding, exact integer sums): equal up to float32 summation order, with quant
    bytes unpacked one or four at a time."""
    from test_packed_gemv import random_blocks

    monkeypatch.setenv("STRATA_MMQ_WORD_UNPACK", word_unpack)

    blocks = random_blocks(qtype, 1000, 2048, seed=3).cuda()
    x = torch.randn(8, 2048, device="cuda", dtype=torch.bfloat16)
    out = packed_mmq.linear_q8(x, blocks, qtype, 1000, 2048)
    gemv = packed_q8.packed_gemv_q8(x, blocks, qtype, 1000, 2048)
    assert ((out - gemv).abs().max() / gemv.abs().max()) < 1e-5


@interpreted
@pytest.mark.parametrize("qtype", [Q4_K, Q6_K, Q8_0, Q5_0])
@pytest.mark.parametrize("split_k", [1, 2])
def test_linear_in_the_interpreter(qtype, split_k):
    """Whole K in one program, or split in two (partials summed after): a last row block and column block partly
    masked."""
    check_linear(qtype, 17, 70, 512, "cpu", config=dict(BLOCK_N=32, SPLIT_K=split_k))


@pytest.mark.parametrize("qtype, n, rows, kernel", [
    (Q4_K, 4096, 1, "gemv"), (Q4_K, 4096, 4, "gemv"), (Q4_K, 4096, 8, "gemv"), (Q4_K, 4096, 9, None),
    (Q4_K, 4096, 16, None),
    (Q6_K, 32768, 8, "gemv"), (Q6_K, 32768, 9, "mmq"), (Q6_K, 32768, 16, "mmq"), (Q6_K, 32768, 17, None),
    (Q6_K, 32767, 9, None), (Q5_K, 32768, 8, "gemv"), (Q5_K, 32768, 9, None)])
def test_packed_linear_takes_each_kernel_for_its_rows_and_width(qtype, n, rows, kernel, monkeypatch):
    """ops.packed_linear's CUDA dispatch, by sessions 39's and 50's measurements: packed_q8's GEMV up to 8 rows;
    packed_mmq.linear_q8 for LM heads of its types at 9-16 rows; else (None) packed_gemv or dequantize + GEMM;
    packed_linear_in_place (what an LM head graph may capture) agrees. Neither 8-bit kernel with 8-bit activations
    off."""
    from strata.model import ops

    monkeypatch.setattr(ops, "kernels_on", lambda t: True)
    blocks = torch.empty(n, packed_q8.row_bytes(qtype, 2048), dtype=torch.uint8)
    x = torch.empty(rows, 2048)
    from strata.model.packed import PackedWeight

    expected = {"gemv": packed_q8.packed_gemv_q8, "mmq": packed_mmq.linear_q8, None: None}[kernel]
    assert ops._8_bit_kernel(x, qtype, blocks, 2048) is expected
    weight = PackedWeight(blocks, qtype, 2048)
    assert ops.packed_linear_in_place(weight, rows) == (kernel is not None or rows <= ops.GEMV_MAX_ROWS)
    monkeypatch.setenv("STRATA_NO_Q8_ACTIVATIONS", "1")
    assert ops._8_bit_kernel(x, qtype, blocks, 2048) is None
    assert ops.packed_linear_in_place(weight, rows) == (rows <= ops.GEMV_MAX_ROWS)  # (the float GEMV reads these)
