"""q8_grouped_pairs (a layer's experts on 8-bit activations, the pairs grouped by expert in blocks of ROWS): each
launch against its reference on the same input (the first from rounded hidden, the second from the rounding of the
kernel's own act), the whole equal to its two launches, skipped pairs zero; blocks with fewer pairs than ROWS and
experts no pair routes to; in Triton's interpreter on the CPU and on CUDA. packed_moe sends it the steps of 2-12
pairs an expert only with STRATA_GROUPED_PAIRS=1."""

from __future__ import annotations

import pytest
import torch

from strata.kernels import packed_moe as packed_moe_module
from strata.kernels import q8_grouped_pairs
from strata.kernels.packed_gemv import IQ4_NL, IQ4_XS, MXFP4, Q3_K, Q4_K, Q5_0, Q6_K, Q8_0
from strata.kernels.packed_iquants import IQ2_XXS, IQ3_S, IQ3_XXS
from strata.kernels.q8_rounding import quantize
from test_packed_moe import case, on_device  # this folder's modules by name (see test_packed_q8)
from test_packed_q8 import down_reference, gate_up_reference, gpu, interpreted


def check_grouped(qtypes: tuple[int, int], tokens: int, device: str, shape: dict, config: dict | None = None):
    hidden, w13, w2, ids, weights = case(*qtypes, tokens, **shape, pad=96, seed=tokens)
    ids[1, 0] = -1  # a second skipped pair
    w13_d, w2_d = on_device(w13, device), on_device(w2, device)
    args = (hidden.to(device), w13_d, qtypes[0], w2_d, qtypes[1], ids.to(device), weights.to(device))
    out = q8_grouped_pairs.moe_grouped_pairs_q8(*args, config=config).cpu()                   # [T, K, D]
    cfg = {**q8_grouped_pairs.CONFIG, **(config or {})}
    layout = q8_grouped_pairs.align_blocks(args[5], w13.shape[0], cfg["ROWS"])
    act = q8_grouped_pairs.grouped_gate_up(quantize(args[0]), w13_d, qtypes[0], layout, ids.shape[1], cfg)
    again = q8_grouped_pairs.grouped_down(quantize(act), w2_d, qtypes[1], layout, ids.shape, args[6], cfg)
    assert torch.equal(out, again.cpu())
    assert torch.all(out[0, -1] == 0) and torch.all(out[1, 0] == 0)
    # float32 sums in another order (a wrong row, scale or sign is off by 1e-2 or more)
    act, act_expected = act.cpu(), gate_up_reference(hidden, w13, qtypes[0], ids)
    assert (act - act_expected).abs().max() / act_expected.abs().max() < 1e-4
    expected = down_reference(act, w2, qtypes[1], ids, weights)
    assert (out - expected).abs().max() / expected.abs().max() < 1e-4


@interpreted
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (IQ3_XXS, Q3_K), (IQ4_XS, IQ4_NL), (MXFP4, Q8_0)])
def test_grouped_pairs_in_the_interpreter(qtypes):
    """8 tokens at top 2 of 4 experts (~4 pairs an expert, blocks of 4 and of fewer) with wide programs (the
    interpreter runs programs one by one)."""
    check_grouped(qtypes, 8, "cpu", dict(dim=256, inter=256, num=4, top_k=2), config=dict(BLOCK_N=64))


@interpreted
def test_grouped_pairs_with_eight_row_blocks_and_an_unused_expert_in_the_interpreter():
    """Blocks of 8 rows at ISUM 0; every pair on experts 0-2 of 4 (expert 3's rows never read)."""
    hidden, w13, w2, _, weights = case(Q4_K, Q5_0, 6, dim=256, inter=256, num=4, top_k=2, seed=3)
    ids = torch.tensor([[0, 1], [2, -1], [0, 2], [1, 0], [2, 1], [0, 0]])
    out = q8_grouped_pairs.moe_grouped_pairs_q8(hidden, w13, Q4_K, w2, Q5_0, ids, weights,
                                                config=dict(ROWS=8, BLOCK_N=64, ISUM=0))
    act = gate_up_reference(hidden, w13, Q4_K, ids)
    expected = down_reference(act, w2, Q5_0, ids, weights)
    assert torch.all(out[1, 1] == 0)
    # against the reference on unrounded act: within the 8-bit rounding of act (~1e-2 of the largest output)
    assert (out - expected).abs().max() / expected.abs().max() < 2e-2


@gpu
@pytest.mark.parametrize("qtypes", [(Q4_K, Q6_K), (Q4_K, Q5_0), (IQ2_XXS, IQ3_S), (IQ4_XS, IQ4_XS), (MXFP4, MXFP4)])
@pytest.mark.parametrize("tokens", [16, 64])
@pytest.mark.parametrize("rows", [4, 8])
def test_grouped_pairs_match_their_references(qtypes, tokens, rows):
    """16 experts at top 4: 4 and 16 pairs an expert, experts in slots wider than they are (a padded view)."""
    inter = 640 if qtypes[1] == Q5_0 else 768
    check_grouped(qtypes, tokens, "cuda", dict(dim=512, inter=inter, num=16, top_k=4), config=dict(ROWS=rows))


def test_packed_moe_takes_the_grouped_pairs_only_when_switched_on(monkeypatch):
    """From GROUPED_PAIRS_MIN up to MMQ_PAIRS_PER_EXPERT pairs an expert, with STRATA_GROUPED_PAIRS=1."""
    take = packed_moe_module.grouped_pairs_take
    monkeypatch.delenv("STRATA_GROUPED_PAIRS", raising=False)
    assert not take(64, 8)
    monkeypatch.setenv("STRATA_GROUPED_PAIRS", "1")
    low, high = q8_grouped_pairs.GROUPED_PAIRS_MIN * 8, packed_moe_module.MMQ_PAIRS_PER_EXPERT * 8
    assert [take(n, 8) for n in (low - 1, low, high - 1, high)] == [False, True, True, False]
